// commux_bench: point-to-point latency and bandwidth through commux's C++ API
// (ProcessGroupUCX::send/recv + Work::wait), with no Python and no torch.distributed
// dispatch in the way. Its numbers sit next to `ucx_perftest -t tag_lat / tag_bw` on the
// same UCX, so what commux itself adds over raw UCX is visible.
//
//   commux_bench [--sizes 8,4096,67108864] [--iters N] [--window W] [--blocking]
//
// --blocking: the ping-pong goes through ProcessGroupUCX::sendBlocking/recvBlocking (no
// Work, completed on the calling thread) instead of send/recv + wait.
// COMMUX_BENCH_WORST=1: also print each size's slowest one-way time and its iteration
// (to find rare stalls).
//
// Forks two ranks that meet through a FileStore. For each size, rank 0 and rank 1 play
// ping-pong (one way = round trip / 2, averaged like ucx_perftest's "average" column after
// a warm-up); for sizes of 64 KiB and up it also streams `window` sends at a time from
// rank 0 to rank 1 (like tag_bw). Prints one line per size:
//   size=8 iters=20000 lat_us=0.61 lat_median_us=0.58 bw_GBps=0.01
#include <sys/wait.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/FileStore.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "commux/process_group_ucx.hpp"

namespace {

using Clock = std::chrono::steady_clock;

struct Args {
  std::vector<std::size_t> sizes{8, 4096, 65536, 1 << 20, 64 << 20};
  long iters = 0;  // 0: chosen per size
  int window = 8;
  bool blocking = false;
};

Args parse(int argc, char** argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "commux_bench: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--sizes") {
      args.sizes.clear();
      std::string list = value();
      for (std::size_t pos = 0; pos <= list.size();) {
        const std::size_t end = std::min(list.find(',', pos), list.size());
        args.sizes.push_back(std::stoull(list.substr(pos, end - pos)));
        pos = end + 1;
      }
    } else if (a == "--iters") {
      args.iters = std::stol(value());
    } else if (a == "--window") {
      args.window = std::max(1, std::stoi(value()));
    } else if (a == "--blocking") {
      args.blocking = true;
    } else {
      std::fprintf(stderr,
                   "usage: commux_bench [--sizes 8,4096,...] [--iters N] [--window W] "
                   "[--blocking]\n");
      std::exit(2);
    }
  }
  return args;
}

long itersFor(std::size_t bytes, long requested) {
  if (requested > 0) return requested;
  if (bytes <= 65536) return 20000;
  if (bytes <= (4u << 20)) return 1000;
  return 40;
}

void waitAll(std::vector<c10::intrusive_ptr<c10d::Work>>& works) {
  for (auto& w : works) w->wait();
  works.clear();
}

// Round trips of `bytes`; returns one-way times in microseconds (rank 0 only).
std::vector<double> pingPong(commux::ProcessGroupUCX& pg, int rank, at::Tensor& buf, long iters,
                             bool blocking) {
  std::vector<at::Tensor> t{buf};
  std::vector<double> oneWay;
  oneWay.reserve(static_cast<std::size_t>(iters));
  const int peer = 1 - rank;
  for (long i = 0; i < iters; ++i) {
    const auto start = Clock::now();
    if (blocking) {
      if (rank == 0) {
        pg.sendBlocking(buf, peer, 0);
        pg.recvBlocking(buf, peer, 0);
      } else {
        pg.recvBlocking(buf, peer, 0);
        pg.sendBlocking(buf, peer, 0);
      }
    } else if (rank == 0) {
      pg.send(t, peer, 0)->wait();
      pg.recv(t, peer, 0)->wait();
    } else {
      pg.recv(t, peer, 0)->wait();
      pg.send(t, peer, 0)->wait();
    }
    oneWay.push_back(std::chrono::duration<double, std::micro>(Clock::now() - start).count() / 2);
  }
  return oneWay;
}

// Streams `iters` messages from rank 0 to rank 1, `window` in flight; returns GB/s.
double stream(commux::ProcessGroupUCX& pg, int rank, at::Tensor& buf, long iters, int window) {
  std::vector<at::Tensor> t{buf};
  at::Tensor ackBuf = at::zeros({1}, at::kByte);
  std::vector<at::Tensor> ack{ackBuf};
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  const auto start = Clock::now();
  for (long i = 0; i < iters; ++i) {
    works.push_back(rank == 0 ? pg.send(t, 1, 1) : pg.recv(t, 0, 1));
    if (static_cast<int>(works.size()) == window) waitAll(works);
  }
  waitAll(works);
  // The receiver's acknowledgement closes the interval, as in tag_bw.
  if (rank == 0) {
    pg.recv(ack, 1, 2)->wait();
  } else {
    pg.send(ack, 0, 2)->wait();
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return static_cast<double>(buf.nbytes()) * static_cast<double>(iters) / seconds / 1e9;
}

int runRank(int rank, const std::string& storePath, const Args& args) {
  alarm(600);  // a hang kills the rank (SIGALRM) and fails the run instead of blocking it
  auto store = c10::make_intrusive<c10d::FileStore>(storePath, 2);
  commux::ProcessGroupUCX pg(store, rank, 2, std::chrono::seconds(120));
  for (std::size_t bytes : args.sizes) {
    at::Tensor buf = at::zeros({static_cast<long>(std::max<std::size_t>(bytes, 1))}, at::kByte);
    const long iters = itersFor(bytes, args.iters);
    // Warm-up: endpoints, caches.
    pingPong(pg, rank, buf, std::max<long>(10, iters / 10), args.blocking);
    auto oneWay = pingPong(pg, rank, buf, iters, args.blocking);
    double bandwidth = 0;
    if (bytes >= 65536) {
      stream(pg, rank, buf, std::max<long>(args.window, iters / 10), args.window);
      bandwidth = stream(pg, rank, buf, iters, args.window);
    }
    if (rank == 0) {
      double sum = 0;
      for (double v : oneWay) sum += v;
      const auto worst = std::max_element(oneWay.begin(), oneWay.end());
      if (std::getenv("COMMUX_BENCH_WORST") != nullptr)
        std::fprintf(stderr, "worst one-way %.1f us at iteration %ld\n", *worst,
                     static_cast<long>(worst - oneWay.begin()));
      std::nth_element(oneWay.begin(), oneWay.begin() + oneWay.size() / 2, oneWay.end());
      std::printf("size=%zu iters=%ld lat_us=%.3f lat_median_us=%.3f bw_GBps=%.3f\n", bytes, iters,
                  sum / static_cast<double>(oneWay.size()), oneWay[oneWay.size() / 2],
                  bandwidth > 0 ? bandwidth
                                : static_cast<double>(bytes) / (oneWay[oneWay.size() / 2] * 1e3));
      std::fflush(stdout);
    }
  }
  pg.barrier()->wait();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  char storePath[] = "/tmp/commux_bench_XXXXXX";
  const int fd = mkstemp(storePath);
  if (fd < 0) {
    std::perror("commux_bench: mkstemp");
    return 1;
  }
  ::close(fd);
  std::remove(storePath);  // FileStore creates it; the template only reserved a unique name
  // Fork before anything starts threads or UCX: each rank builds its own engine.
  std::vector<pid_t> children;
  for (int rank = 0; rank < 2; ++rank) {
    const pid_t pid = fork();
    if (pid == 0) {
      int rc = 1;
      try {
        rc = runRank(rank, storePath, args);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "commux_bench rank %d: %s\n", rank, e.what());
      }
      std::fflush(nullptr);
      _exit(rc);
    }
    children.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : children) {
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failures;
  }
  std::remove(storePath);
  return failures == 0 ? 0 : 1;
}
