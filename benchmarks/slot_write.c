// The shared-memory step of a 2-rank all-to-all, without commux: two processes each copy a
// 256 KiB piece into their own slot (two parities), meet, copy the other's slot out, and
// depart; 8 steps a call. Blocks of 100 calls alternate between plain memcpy and streaming
// (non-temporal) stores for the copy into the slot, and each block prints
// "<seconds since start> <plain|nt> <us per call>". On the 2-vCPU VM of
// docs/performance-log.md (2026-12-04 17:00-18:00) plain blocks have stretches of seconds at 5-6x
// their usual time, and streaming blocks do not (src/shm/slot_copy.hpp).
//
//   gcc -O2 -o /tmp/slot_write benchmarks/slot_write.c && /tmp/slot_write 60
#define _GNU_SOURCE
#include <emmintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PIECE (256 * 1024)

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef struct {
  _Alignas(64) atomic_long arrived;
  _Alignas(64) atomic_long departed;
} Words;

static void streamCopy(char* d, const char* s, size_t n) {
  for (size_t i = 0; i < n; i += 16) {
    _mm_stream_si128((__m128i*)(d + i), _mm_loadu_si128((const __m128i*)(s + i)));
  }
  _mm_sfence();
}

static void waitFor(atomic_long* w, long v) {
  while (atomic_load(w) < v) sched_yield();
}

int main(int argc, char** argv) {
  const double seconds = argc > 1 ? atof(argv[1]) : 60;
  char* seg = mmap(0, 4 * PIECE + 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  memset(seg, 0, 4 * PIECE + 4096);
  Words* words = (Words*)(seg + 4 * PIECE);
  const pid_t child = fork();
  const int me = child == 0, peer = 1 - me;
  char* in = aligned_alloc(4096, 8 * PIECE);
  char* out = aligned_alloc(4096, 8 * PIECE);
  memset(in, me + 1, 8 * PIECE);
  memset(out, 0, 8 * PIECE);
  const int blocks = 2 * (int)(seconds / 0.1);  // both processes run the same count
  long s = 0;
  const double start = now();
  for (int block = 0; block < blocks; ++block) {
    const int nt = block & 1;
    const double t = now();
    for (int call = 0; call < 100; ++call) {
      for (int i = 0; i < 8; ++i, ++s) {
        char* mine = seg + (2 * me + (s & 1)) * PIECE;
        const char* theirs = seg + (2 * peer + (s & 1)) * PIECE;
        waitFor(&words[peer].departed, s - 1);  // the peer left step s-2: this parity is free
        if (nt) {
          streamCopy(mine, in + i * PIECE, PIECE);
        } else {
          memcpy(mine, in + i * PIECE, PIECE);
        }
        atomic_store(&words[me].arrived, s + 1);
        waitFor(&words[peer].arrived, s + 1);
        memcpy(out + i * PIECE, theirs, PIECE);
        atomic_store(&words[me].departed, s + 1);
      }
    }
    if (me == 0)
      printf("%.1f %s %.0f\n", now() - start, nt ? "nt" : "plain", (now() - t) / 100 * 1e6);
    fflush(stdout);
  }
  if (me) _exit(0);
  waitpid(child, 0, 0);
  return 0;
}
