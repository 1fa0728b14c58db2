// What a UCX endpoint costs in memory: one worker connects to N others in this process (both
// sides hold an endpoint, as two ranks that talk do), with peer error handling as commux
// asks for it, and one 8-byte tagged message each way per pair to finish the wire-up. Prints
// the RSS and malloc heap growth per pair. Each of the N has talked to a spare worker
// before: what a worker allocates on its first connection is paid once per process, not
// per peer, so it stays out of the measurement. Not part of the build (docs/performance.md,
// "bootstrap at 2..64 ranks"):
//   U=$(python3 -c 'import libucx,os;print(os.path.dirname(libucx.__file__))')
//   F="-I$U/include -L$U/lib -lucp -lucs -Wl,-rpath,$U/lib"
//   g++ -O1 -o /tmp/ucx_ep_memory benchmarks/cpp/ucx_ep_memory.cpp $F
//   UCX_NET_DEVICES=lo /tmp/ucx_ep_memory 512
// EP_NOERR=1: no peer error handling (commux's mode for peers watched by pidfd);
// EP_NOMSG=1: endpoints only, no traffic. Compare two N: the difference is per pair.
#include <malloc.h>
#include <ucp/api/ucp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

static long rssKib() {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  long v = 0;
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) v = atol(line + 6);
  fclose(f);
  return v;
}
static void progressAll(ucp_worker_h* w, int n) {
  for (int i = 0; i < n; ++i)
    while (ucp_worker_progress(w[i])) {
    }
}
static void waitRequest(void* req, ucp_worker_h* w, int n) {
  if (req == NULL) return;
  if (UCS_PTR_IS_ERR(req)) {
    fprintf(stderr, "request error %s\n", ucs_status_string(UCS_PTR_STATUS(req)));
    exit(1);
  }
  while (ucp_request_check_status(req) == UCS_INPROGRESS) progressAll(w, n);
  ucp_request_free(req);
}
static void onError(void* arg, ucp_ep_h ep, ucs_status_t s) {
  (void)arg;
  (void)ep;
  (void)s;
}

struct Job {
  int workers = 0;
  ucp_worker_h* w = nullptr;
  ucp_address_t** addr = nullptr;
};

static ucp_ep_h connect(Job& job, int from, int to) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER;
  params.err_mode = getenv("EP_NOERR") ? UCP_ERR_HANDLING_MODE_NONE : UCP_ERR_HANDLING_MODE_PEER;
  params.err_handler.cb = onError;
  params.address = job.addr[to];
  ucp_ep_h ep = nullptr;
  if (ucp_ep_create(job.w[from], &params, &ep) != UCS_OK) exit(3);
  return ep;
}

// Endpoints both ways between workers a and b (kept for the process's life), and a message
// each way unless EP_NOMSG.
static void pair(Job& job, int a, int b, ucp_tag_t tag) {
  ucp_ep_h ab = connect(job, a, b);
  ucp_ep_h ba = connect(job, b, a);
  if (getenv("EP_NOMSG")) return;
  char out = 0, in = 0;
  ucp_request_param_t rp{};
  void* s = ucp_tag_send_nbx(ab, &out, 1, tag, &rp);
  void* r = ucp_tag_recv_nbx(job.w[b], &in, 1, tag, (ucp_tag_t)-1, &rp);
  waitRequest(s, job.w, job.workers);
  waitRequest(r, job.w, job.workers);
  s = ucp_tag_send_nbx(ba, &out, 1, tag, &rp);
  r = ucp_tag_recv_nbx(job.w[a], &in, 1, tag, (ucp_tag_t)-1, &rp);
  waitRequest(s, job.w, job.workers);
  waitRequest(r, job.w, job.workers);
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 64;
  ucp_params_t p{};
  p.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
  p.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  p.estimated_num_eps = n + 1;
  ucp_context_h ctx;
  if (ucp_init(&p, nullptr, &ctx) != UCS_OK) return 1;
  Job job;
  job.workers = n + 2;  // 0 connects to 1..n; n+1 is the spare
  job.w = static_cast<ucp_worker_h*>(calloc(job.workers, sizeof(ucp_worker_h)));
  job.addr = static_cast<ucp_address_t**>(calloc(job.workers, sizeof(ucp_address_t*)));
  size_t addressBytes = 0;
  for (int i = 0; i < job.workers; ++i) {
    ucp_worker_params_t wp{};
    wp.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    wp.thread_mode = UCS_THREAD_MODE_SERIALIZED;
    if (ucp_worker_create(ctx, &wp, &job.w[i]) != UCS_OK) return 2;
    ucp_worker_get_address(job.w[i], &job.addr[i], &addressBytes);
  }
  for (int i = 1; i <= n; ++i) pair(job, i, n + 1, 1000000 + i);
  for (int k = 0; k < 100; ++k) progressAll(job.w, job.workers);
  malloc_trim(0);
  const struct mallinfo2 m0 = mallinfo2();
  const long r0 = rssKib();
  for (int i = 1; i <= n; ++i) pair(job, 0, i, i);
  for (int k = 0; k < 100; ++k) progressAll(job.w, job.workers);
  const struct mallinfo2 m1 = mallinfo2();
  const long r1 = rssKib();
  printf(
      "peers=%d address_bytes=%zu rss_delta_kib=%ld heap_delta_kib=%.1f "
      "per_pair_rss_kib=%.1f per_pair_heap_kib=%.1f\n",
      n, addressBytes, r1 - r0, (double)(m1.uordblks + m1.hblkhd - m0.uordblks - m0.hblkhd) / 1024,
      (double)(r1 - r0) / n,
      (double)(m1.uordblks + m1.hblkhd - m0.uordblks - m0.hblkhd) / 1024 / n);
  return 0;
}
