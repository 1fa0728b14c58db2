/* What the C API's real-rank tests share: a failure that names the rank and the seed, checks
 * of every call's result code and message, the numbers every rank draws alike from the seed,
 * each rank's known values, and typed access to a buffer's elements. */
#ifndef COMMUX_TESTS_C_RANK_CHECKS_H
#define COMMUX_TESTS_C_RANK_CHECKS_H

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commux/commux.h"

static int g_rank = -1;
static unsigned long g_seed = 1;

static inline void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "rank %d (seed %lu): ", g_rank, g_seed);
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

#define OK(call)                                                                       \
  do {                                                                                 \
    commuxResult_t r_ = (call);                                                        \
    if (r_ != commuxSuccess)                                                           \
      fail("%s:%d: %s -> %s: %s", __FILE__, __LINE__, #call, commuxGetErrorString(r_), \
           commuxGetLastError(NULL));                                                  \
  } while (0)

#define REFUSED(call, code, says)                                                  \
  do {                                                                             \
    commuxResult_t r_ = (call);                                                    \
    if (r_ != (code))                                                              \
      fail("%s:%d: %s returned %s, expected %s", __FILE__, __LINE__, #call,        \
           commuxGetErrorString(r_), commuxGetErrorString(code));                  \
    if (strstr(commuxGetLastError(NULL), (says)) == NULL)                          \
      fail("%s:%d: %s: message '%s' does not say '%s'", __FILE__, __LINE__, #call, \
           commuxGetLastError(NULL), (says));                                      \
  } while (0)

/* The same stream of numbers on every rank (sizes, roots), from the seed. */
static unsigned long g_shared = 1;
static inline unsigned shared_random(unsigned below) {
  g_shared = g_shared * 6364136223846793005ul + 1442695040888963407ul;
  return (unsigned)((g_shared >> 33) % below);
}

/* Rank r's element i: small integers, exact in every type and in sums of a few ranks. */
static inline int value_of(int rank, size_t i) { return (int)((rank * 7 + i * 3) % 11) + 1; }

static inline uint16_t to_bf16(float f) {
  uint32_t bits;
  memcpy(&bits, &f, 4);
  return (uint16_t)(bits >> 16);
}
static inline float from_bf16(uint16_t h) {
  uint32_t bits = (uint32_t)h << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

typedef struct {
  commuxDataType_t type;
  size_t size;
  const char* name;
} TypeInfo;
static const TypeInfo kTypes[] = {{commuxFloat32, 4, "float32"},   {commuxInt32, 4, "int32"},
                                  {commuxFloat64, 8, "float64"},   {commuxInt64, 8, "int64"},
                                  {commuxBfloat16, 2, "bfloat16"}, {commuxUint8, 1, "uint8"}};

static inline void put(void* buf, commuxDataType_t type, size_t i, double v) {
  switch (type) {
    case commuxFloat32:
      ((float*)buf)[i] = (float)v;
      break;
    case commuxInt32:
      ((int32_t*)buf)[i] = (int32_t)v;
      break;
    case commuxFloat64:
      ((double*)buf)[i] = v;
      break;
    case commuxInt64:
      ((int64_t*)buf)[i] = (int64_t)v;
      break;
    case commuxBfloat16:
      ((uint16_t*)buf)[i] = to_bf16((float)v);
      break;
    case commuxUint8:
      ((uint8_t*)buf)[i] = (uint8_t)v;
      break;
    default:
      fail("no such type in the test");
  }
}
static inline double get(const void* buf, commuxDataType_t type, size_t i) {
  switch (type) {
    case commuxFloat32:
      return ((const float*)buf)[i];
    case commuxInt32:
      return ((const int32_t*)buf)[i];
    case commuxFloat64:
      return ((const double*)buf)[i];
    case commuxInt64:
      return (double)((const int64_t*)buf)[i];
    case commuxBfloat16:
      return from_bf16(((const uint16_t*)buf)[i]);
    case commuxUint8:
      return ((const uint8_t*)buf)[i];
    default:
      fail("no such type in the test");
  }
  return 0;
}

static inline double fold(commuxRedOp_t op, int size, size_t i) {
  double acc = value_of(0, i);
  for (int r = 1; r < size; ++r) {
    double v = value_of(r, i);
    if (op == commuxSum) acc += v;
    if (op == commuxMax) acc = v > acc ? v : acc;
    if (op == commuxMin) acc = v < acc ? v : acc;
  }
  return acc;
}

static long g_checked = 0; /* elements checked: printed, so a run that checked nothing shows */

static inline void check_value(const char* what, const TypeInfo* t, const void* buf, size_t i,
                               double want) {
  ++g_checked;
  double got = get(buf, t->type, i);
  if (got != want) fail("%s %s: element %zu is %g, expected %g", what, t->name, i, got, want);
}

#endif
