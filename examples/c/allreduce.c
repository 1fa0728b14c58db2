/* Every rank adds its rank + 1 into a vector and checks the sum; then a tagged ring.
 *   cc allreduce.c $(pkg-config --cflags --libs commux) -o allreduce
 *   COMMUX_BOOTSTRAP=127.0.0.1:29600 COMMUX_SIZE=2 COMMUX_RANK=0 ./allreduce &
 *   COMMUX_BOOTSTRAP=127.0.0.1:29600 COMMUX_SIZE=2 COMMUX_RANK=1 ./allreduce */
#include <stdio.h>
#include <stdlib.h>

#include <commux/commux.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    commuxResult_t r_ = (call);                                                       \
    if (r_ != commuxSuccess) {                                                        \
      fprintf(stderr, "%s: %s\n", #call, commuxGetLastError(NULL));                   \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

int main(void) {
  commuxComm_t comm;
  int rank, size;
  CHECK(commuxCommInitFromEnv(&comm));
  CHECK(commuxCommUserRank(comm, &rank));
  CHECK(commuxCommCount(comm, &size));

  float v[1024];
  for (int i = 0; i < 1024; ++i) v[i] = (float)(rank + 1);
  CHECK(commuxAllReduce(v, v, 1024, commuxFloat32, commuxSum, comm, NULL));
  const float want = size * (size + 1) / 2.0f;
  for (int i = 0; i < 1024; ++i)
    if (v[i] != want) return fprintf(stderr, "rank %d: v[%d] = %g\n", rank, i, v[i]), 1;

  /* A ring with tag 42: post both sides, then wait for both. */
  int out = rank, in = -1;
  commuxRequest_t reqs[2];
  CHECK(commuxIrecv(&in, 1, commuxInt32, (rank + size - 1) % size, 42, comm, NULL, &reqs[0]));
  CHECK(commuxIsend(&out, 1, commuxInt32, (rank + 1) % size, 42, comm, NULL, &reqs[1]));
  CHECK(commuxWait(reqs[0], NULL));
  CHECK(commuxWait(reqs[1], NULL));
  if (in != (rank + size - 1) % size) return fprintf(stderr, "rank %d got %d\n", rank, in), 1;

  CHECK(commuxCommFinalize(comm)); /* nobody leaves while a peer still needs it */
  CHECK(commuxCommDestroy(comm));
  printf("rank %d of %d: allreduce %g, ring ok\n", rank, size, want);
  return 0;
}
