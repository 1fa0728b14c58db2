// test_commux: commux's core checks from C++, as a program that consumes the installed
// package (find_package(commux) or FetchContent): tagged point-to-point, collectives, the
// coalescing window (COMMUX_COALESCE, COMMUX_GROUP), timeouts. With COMMUX_BENCH=1 it is
// the V-tensor ping-pong benchmark instead (COMMUX_BENCH_V tensors per message).
//
//   test_commux RANK SIZE ADDR PORT     one rank; the ranks meet through a TCPStore that
//                                       rank 0 serves on ADDR:PORT
//   test_commux --spawn N               starts N ranks of itself on this host (free port)
//
// Exit status 0 when every check passed on this rank (in --spawn mode: on every rank).
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "commux/process_group_ucx.hpp"
#include "commux/window_ucx.hpp"

using namespace std::chrono_literals;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;

namespace {

int checksRun = 0;

void check(bool condition, const std::string& what) {
  ++checksRun;
  if (!condition) throw std::runtime_error("check failed: " + what);
}

bool envFlag(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && std::string(v) != "0" && std::string(v) != "";
}

at::Tensor filled(std::int64_t n, double value) { return at::full({n}, value, at::kDouble); }

void pointToPoint(commux::ProcessGroupUCX& pg, int rank, int size) {
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  // Receives posted first, in the reverse order of the sends: (sender, tag) matching.
  std::vector<at::Tensor> got1{at::empty({8}, at::kDouble)};
  std::vector<at::Tensor> got2{at::empty({8}, at::kDouble), at::empty({3}, at::kDouble)};
  WorkPtr r2 = pg.recv(got2, left, 2);
  WorkPtr r1 = pg.recv(got1, left, 1);
  std::vector<at::Tensor> one{filled(8, 100 + rank)};
  std::vector<at::Tensor> two{filled(8, 200 + rank), filled(3, 300 + rank)};
  WorkPtr s1 = pg.send(one, right, 1);
  WorkPtr s2 = pg.send(two, right, 2);
  for (const auto& w : {r1, r2, s1, s2}) w->wait();
  check(at::equal(got1[0], filled(8, 100 + left)), "tag 1 from the left neighbour");
  check(at::equal(got2[0], filled(8, 200 + left)) && at::equal(got2[1], filled(3, 300 + left)),
        "two tensors under tag 2");
  // Any source: rank 0 hears from everyone else.
  if (rank == 0) {
    std::vector<int> seen;
    for (int i = 1; i < size; ++i) {
      std::vector<at::Tensor> x{at::empty({1}, at::kDouble)};
      WorkPtr w = pg.recvAnysource(x, 7);
      w->wait();
      seen.push_back(w->sourceRank());
      check(x[0].item<double>() == w->sourceRank(), "any-source payload names its sender");
    }
    std::sort(seen.begin(), seen.end());
    for (int i = 1; i < size; ++i) check(seen[i - 1] == i, "any-source heard every rank once");
  } else {
    std::vector<at::Tensor> x{filled(1, rank)};
    pg.send(x, 0, 7)->wait();
  }
}

void collectives(commux::ProcessGroupUCX& pg, int rank, int size) {
  const double sum = size * (size - 1) / 2.0;
  for (std::int64_t n : {1, 1000, 300000}) {
    std::vector<at::Tensor> t{filled(n, rank)};
    pg.allreduce(t)->wait();
    check(at::equal(t[0], filled(n, sum)), "allreduce of " + std::to_string(n));
  }
  std::vector<at::Tensor> b{filled(50, rank == size - 1 ? 42 : -1)};
  c10d::BroadcastOptions bo;
  bo.rootRank = size - 1;
  pg.broadcast(b, bo)->wait();
  check(at::equal(b[0], filled(50, 42)), "broadcast from the last rank");
  std::vector<at::Tensor> in{filled(4, rank)};
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < size; ++r) out[0].push_back(at::empty({4}, at::kDouble));
  pg.allgather(out, in)->wait();
  for (int r = 0; r < size; ++r) check(at::equal(out[0][r], filled(4, r)), "allgather block");
  at::Tensor rsIn = at::arange(size * 5, at::kDouble);
  at::Tensor rsOut = at::empty({5}, at::kDouble);
  pg._reduce_scatter_base(rsOut, rsIn)->wait();
  check(at::equal(rsOut, at::arange(rank * 5, rank * 5 + 5, at::kDouble) * size), "reduce_scatter");
  at::Tensor a2aIn = at::full({size * 2}, static_cast<double>(rank), at::kDouble);
  at::Tensor a2aOut = at::empty({size * 2}, at::kDouble);
  std::vector<int64_t> even;
  pg.alltoall_base(a2aOut, a2aIn, even, even)->wait();
  for (int r = 0; r < size; ++r) {
    check(at::equal(a2aOut.narrow(0, r * 2, 2), filled(2, r)), "alltoall block");
  }
  pg.barrier()->wait();
}

void coalescing(commux::ProcessGroupUCX& pg, int rank, int size) {
  // A halo exchange as a stencil code writes it: two tensors per message, a tag per
  // direction, everything in one coalescing window (COMMUX_GROUP=1 posts it at the end).
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  std::vector<at::Tensor> fromLeft{at::empty({16}, at::kDouble), at::empty({4}, at::kDouble)};
  std::vector<at::Tensor> fromRight{at::empty({16}, at::kDouble), at::empty({4}, at::kDouble)};
  std::vector<at::Tensor> toRight{filled(16, rank), filled(4, -rank)};
  std::vector<at::Tensor> toLeft{filled(16, 10 + rank), filled(4, -10 - rank)};
  pg.startCoalescing();
  pg.recv(fromRight, right, 11);
  pg.recv(fromLeft, left, 10);
  pg.send(toLeft, left, 11);
  pg.send(toRight, right, 10);
  pg.endCoalescing()->wait();
  check(at::equal(fromLeft[0], filled(16, left)) && at::equal(fromLeft[1], filled(4, -left)),
        "halo from the left");
  check(at::equal(fromRight[0], filled(16, 10 + right)) &&
            at::equal(fromRight[1], filled(4, -10 - right)),
        "halo from the right");
}

void timeouts(commux::ProcessGroupUCX& pg, int rank, int size) {
  // A receive nobody answers times out with an error naming it; the group goes on.
  if (rank == 0) {
    std::vector<at::Tensor> x{at::empty({4}, at::kDouble)};
    WorkPtr w = pg.recv(x, size - 1, 999);
    bool timedOut = false;
    try {
      w->wait(200ms);
    } catch (const std::exception& e) {
      timedOut = std::string(e.what()).find("Timed out") != std::string::npos;
    }
    check(timedOut, "an unanswered receive times out");
  }
  std::vector<at::Tensor> t{filled(3, 1)};
  pg.allreduce(t)->wait();
  check(at::equal(t[0], filled(3, size)), "allreduce after a timed-out receive");
}

// COMMUX_BENCH=1: rank 0 and rank 1 ping-pong messages of V tensors (COMMUX_BENCH_V).
// One-sided windows from C++: c10d's Window (put with the "signal" hint, wait_signal) and
// commux's own calls on it (get, flush).
void windows(commux::ProcessGroupUCX& pg, int rank, int size) {
#ifdef C10D_BACKEND_HAS_WINDOW
  const int right = (rank + 1) % size;
  const int left = (rank + size - 1) % size;
  check(pg.supportsWindow(), "supportsWindow");
  at::Tensor buf = at::zeros({8}, at::kDouble);
  c10::intrusive_ptr<c10d::Window> window = pg.new_window(buf);
  c10d::PutOptions signal;
  signal.hints["signal"] = "1";
  window->put(filled(8, rank + 0.5), right, 0, false, signal);
  window->wait_signal(left, false);
  check(at::equal(buf, filled(8, left + 0.5)), "a window put with the signal hint");
  auto* mine = dynamic_cast<commux::WindowUCX*>(window.get());
  check(mine != nullptr, "new_window returns a commux::WindowUCX");
  mine->flush(right, false, c10d::kUnsetTimeout);
  at::Tensor back = at::zeros({8}, at::kDouble);
  mine->get(back, right, 0, false, c10d::kUnsetTimeout);
  check(at::equal(back, filled(8, rank + 0.5)), "a window get of what this rank put");
  window->tensor_deregister();
#else
  (void)pg, (void)rank, (void)size;
#endif
}

void bench(commux::ProcessGroupUCX& pg, int rank) {
  const char* vEnv = std::getenv("COMMUX_BENCH_V");
  const int v = vEnv ? std::max(1, std::atoi(vEnv)) : 1;
  if (rank > 1) return;
  const int peer = 1 - rank;
  if (rank == 0) std::printf("# V=%d tensors per message (COMMUX_COALESCE=%d)\n", v, envFlag("COMMUX_COALESCE"));
  for (std::int64_t bytes : {8, 1024, 65536, 1 << 20}) {
    const std::int64_t n = std::max<std::int64_t>(1, bytes / 8 / v);
    std::vector<at::Tensor> msg;
    for (int i = 0; i < v; ++i) msg.push_back(at::ones({n}, at::kDouble));
    const int iters = bytes <= 65536 ? 2000 : 200;
    auto once = [&] {
      if (rank == 0) {
        pg.send(msg, peer, 1)->wait();
        pg.recv(msg, peer, 2)->wait();
      } else {
        pg.recv(msg, peer, 1)->wait();
        pg.send(msg, peer, 2)->wait();
      }
    };
    for (int i = 0; i < iters / 10; ++i) once();
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iters; ++i) once();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    if (rank == 0) {
      std::printf("bytes=%lld V=%d one_way_us=%.2f\n", static_cast<long long>(n * 8 * v), v, us / iters / 2);
    }
  }
}

int runRank(int rank, int size, const std::string& addr, int port) {
  try {
    c10d::TCPStoreOptions opts;
    opts.port = static_cast<std::uint16_t>(port);
    opts.isServer = rank == 0;
    opts.numWorkers = size;
    opts.waitWorkers = false;
    opts.timeout = 60s;
    auto store = c10::make_intrusive<c10d::TCPStore>(addr, opts);
    auto pg = c10::make_intrusive<commux::ProcessGroupUCX>(store, rank, size, 60s);
    if (envFlag("COMMUX_BENCH")) {
      bench(*pg, rank);
    } else {
      pointToPoint(*pg, rank, size);
      collectives(*pg, rank, size);
      coalescing(*pg, rank, size);
      timeouts(*pg, rank, size);
      windows(*pg, rank, size);
    }
    pg->barrier()->wait();  // nobody leaves while a peer still needs it
    if (!envFlag("COMMUX_BENCH")) std::printf("rank %d/%d: %d checks passed\n", rank, size, checksRun);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d/%d: %s\n", rank, size, e.what());
    return 1;
  }
}

// --spawn N: serve nothing ourselves; start N ranks (rank 0 serves the store) on a port the
// kernel picked, and wait for all of them with a hard limit.
int spawn(const char* self, int size) {
  c10d::TCPStoreOptions probe;
  probe.port = 0;
  probe.isServer = true;
  probe.waitWorkers = false;
  int port = 0;
  {
    c10d::TCPStore listener("127.0.0.1", probe);  // only to learn a free port
    port = listener.getPort();
  }
  std::vector<pid_t> pids;
  for (int rank = 0; rank < size; ++rank) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      alarm(120);  // a hang fails instead of blocking
      const std::string r = std::to_string(rank), s = std::to_string(size), p = std::to_string(port);
      ::execl(self, self, r.c_str(), s.c_str(), "127.0.0.1", p.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (int rank = 0; rank < size; ++rank) {
    int status = 0;
    ::waitpid(pids[rank], &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      std::fprintf(stderr, "test_commux: rank %d failed (status %d)\n", rank, status);
      ++failed;
    }
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::string(argv[1]) == "--spawn") return spawn("/proc/self/exe", std::atoi(argv[2]));
  if (argc == 5) return runRank(std::atoi(argv[1]), std::atoi(argv[2]), argv[3], std::atoi(argv[4]));
  std::fprintf(stderr, "usage: test_commux RANK SIZE ADDR PORT | test_commux --spawn N\n");
  return 2;
}
