// commux_cost_model: what the alpha-beta model predicts for the schedules commux runs.
//
// For each collective, group size and buffer size it builds the actual Schedule of every
// rank (collectives::plan*), plays them against each other in time and prints the finish
// time of the last rank: the algorithm the selection picks, the ring, and what commux chose
// before the large-group algorithms (issue 14). For broadcast the "ring" is the pipelined
// chain, for all-to-all the pairwise exchange. Pure logic: no torch, no UCX.
//
// The time model and the sampling of large groups: collectives/schedule_cost.hpp. Rows
// costed from a sample of ranks are marked '~'.
//
//   commux_cost_model [--alpha-us 1.8] [--beta-ns 0.25] [--gamma-us 1.3] [--delta-ns 0.15]
//                     [--epsilon-ns 0.05] [--ranks 16,256,1024,16384]
//                     [--sizes 8,65536,1048576,67108864] [--element-size 4]
//                     [--full-steps 1000000]
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "collectives/schedule.hpp"
#include "collectives/schedule_cost.hpp"
#include "collectives/selection.hpp"

using namespace commux::collectives;

namespace {

struct Options {
  CostModel model;
  std::vector<int> ranks{16, 256, 1024, 16384};
  std::vector<std::size_t> sizes{8, 64 * 1024, 1024 * 1024, 64 * 1024 * 1024};
  std::size_t elementSize = 4;
  std::size_t fullSteps = 1'000'000;
};

using Maker = PlanMaker;

Prediction predict(int p, const Maker& make, const Options& o) {
  try {
    return commux::collectives::predict(p, make, o.elementSize, o.model, o.fullSteps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "commux_cost_model: %s\n", e.what());
    std::exit(1);
  }
}

std::string human(double seconds) {
  char buf[32];
  if (seconds < 1e-3) {
    std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
  } else if (seconds < 1) {
    std::snprintf(buf, sizeof buf, "%.2f ms", seconds * 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%.2f s", seconds);
  }
  return buf;
}

std::string bytesLabel(std::size_t b) {
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

template <typename T>
std::vector<T> parseList(const char* s) {
  std::vector<T> out;
  std::string item;
  for (const char* c = s;; ++c) {
    if (*c == ',' || *c == '\0') {
      if (!item.empty()) out.push_back(static_cast<T>(std::stoull(item)));
      item.clear();
      if (*c == '\0') break;
    } else {
      item += *c;
    }
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "commux_cost_model: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--alpha-us") {
      o.model.alpha = std::atof(value()) * 1e-6;
    } else if (a == "--beta-ns") {
      o.model.beta = std::atof(value()) * 1e-9;
    } else if (a == "--gamma-us") {
      o.model.gamma = std::atof(value()) * 1e-6;
    } else if (a == "--delta-ns") {
      o.model.delta = std::atof(value()) * 1e-9;
    } else if (a == "--epsilon-ns") {
      o.model.epsilon = std::atof(value()) * 1e-9;
    } else if (a == "--ranks") {
      o.ranks = parseList<int>(value());
    } else if (a == "--sizes") {
      o.sizes = parseList<std::size_t>(value());
    } else if (a == "--element-size") {
      o.elementSize = std::max<std::size_t>(1, std::strtoull(value(), nullptr, 10));
    } else if (a == "--full-steps") {
      o.fullSteps = std::strtoull(value(), nullptr, 10);
    } else {
      std::fprintf(stderr,
                   "usage: commux_cost_model [--alpha-us A] [--beta-ns B] [--gamma-us G] "
                   "[--delta-ns D] [--epsilon-ns E] [--ranks 16,256,...] [--sizes 8,65536,...] "
                   "[--element-size 4] [--full-steps N]\n");
      std::exit(a == "--help" || a == "-h" ? 0 : 2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  Thresholds chosen;
  chosen.model = o.model;
  Thresholds before = chosen;  // the selection before issue 14: small-group rules everywhere
  before.logAlgorithmsMinRanks = INT_MAX;
  const std::size_t es = o.elementSize;

  std::printf("alpha %.2f us, beta %.3f ns/B (%.2f GB/s), gamma %.2f us, delta %.3f ns/B, "
              "epsilon %.3f ns/B; %zu-byte elements; size = the whole buffer (allgather output, "
              "reduce-scatter input, one rank's all-to-all input: p equal blocks, rounded down)\n",
              o.model.alpha * 1e6, o.model.beta * 1e9, 1e-9 / o.model.beta, o.model.gamma * 1e6,
              o.model.delta * 1e9, o.model.epsilon * 1e9, es);
  std::printf("| collective | ranks | size | chosen | steps | chosen time | ring time | before "
              "issue 14 | ring / chosen | before / chosen |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  for (const char* collective :
       {"allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall"}) {
    for (int p : o.ranks) {
      for (std::size_t bytes : o.sizes) {
        const std::size_t count = bytes / es;
        const std::vector<Range> blocks = evenBlocks(count, p);
        // All-to-all: all_to_all_single without splits, input and output read and written in
        // place (blocks at the same offsets on both sides).
        const std::vector<Range> equal = evenBlocks(count / static_cast<std::size_t>(p) * p, p);
        const std::size_t chunk = std::max<std::size_t>(1, chosen.pipelineChunkBytes / es);
        Maker pick;
        Maker ring;
        Maker old;
        const std::string c = collective;
        if (c == "allreduce") {
          pick = [&](int r) { return planAllreduce(r, p, count, es, chosen); };
          ring = [&](int r) { return Plan{allreduceRing(r, p, count, chunk), "ring"}; };
          old = [&](int r) { return planAllreduce(r, p, count, es, before); };
        } else if (c == "allgather") {
          pick = [&](int r) { return planAllgather(r, p, blocks, es, chosen); };
          ring = [&](int r) { return Plan{allgatherRing(r, p, blocks), "ring"}; };
          old = [&](int r) { return planAllgather(r, p, blocks, es, before); };
        } else if (c == "alltoall") {
          pick = [&](int r) { return planAlltoall(r, p, equal, equal, es, true, true, chosen); };
          ring = [&](int r) { return Plan{alltoallPairwise(r, p, equal, equal), "pairwise"}; };
          old = [&](int r) { return planAlltoall(r, p, equal, equal, es, true, true, before); };
        } else if (c == "broadcast") {
          // The "ring" of a broadcast is the pipelined chain.
          pick = [&](int r) { return planBroadcast(r, p, 0, count, es, chosen); };
          ring = [&](int r) { return Plan{broadcastChain(r, p, 0, count, chunk), "chain"}; };
          old = [&](int r) { return planBroadcast(r, p, 0, count, es, before); };
        } else {
          pick = [&](int r) { return planReduceScatter(r, p, blocks, es, chosen); };
          ring = [&](int r) { return Plan{reduceScatterRing(r, p, blocks, 0, chunk), "ring"}; };
          old = [&](int r) { return planReduceScatter(r, p, blocks, es, before); };
        }
        const Prediction a = predict(p, pick, o);
        const Prediction b = predict(p, ring, o);
        // Before issue 14 the allgather and reduce-scatter were always this ring, and so was
        // a large allreduce: cost it once.
        const std::string oldName = old(0).algorithm;
        const Prediction d = oldName == b.algorithm ? b : predict(p, old, o);
        auto mark = [](const Prediction& x) { return std::string(x.sampled ? "~" : "") + human(x.seconds); };
        std::printf("| %s | %d | %s | %s | %zu | %s | %s | %s (%s) | %.1fx | %.1fx |\n", collective, p,
                    bytesLabel(bytes).c_str(), a.algorithm.c_str(), a.steps, mark(a).c_str(),
                    mark(b).c_str(), mark(d).c_str(), d.algorithm.c_str(),
                    a.seconds > 0 ? b.seconds / a.seconds : 1.0,
                    a.seconds > 0 ? d.seconds / a.seconds : 1.0);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}
