// commux_cost_model: what the alpha-beta model predicts for the schedules commux runs.
//
// For each collective, group size and buffer size it builds the actual Schedule of every
// rank (collectives::plan*), plays them against each other in time and prints the finish
// time of the last rank: the algorithm the selection picks, the ring, and what commux chose
// before the large-group algorithms (issue 14). For broadcast the "ring" is the pipelined
// chain, for all-to-all the pairwise exchange. Pure logic: no torch, no UCX.
//
// Time model, per rank and step (a step starts when the previous one ended):
//   - its sends leave one after the other: send i arrives at start + alpha + beta * (bytes
//     of sends 0..i);
//   - the step ends at max(start + beta * bytes sent, latest arrival of its receives,
//     start + alpha + beta * bytes received) + gamma, plus delta * bytes received when the
//     step folds (Reduce);
//   - a receive waits for its message: the sender's start of that step is a dependency, so
//     the finish time is the critical path through the message graph;
//   - a step's local copies (Bruck's packing) take epsilon * bytes copied before its sends
//     leave.
// Groups whose schedules hold more than --full-steps steps and copies in all (the rings
// and Bruck from 1,024 ranks) are costed from a sample of ranks, each receive taken as
// arriving alpha + beta * bytes after the step starts (exact for the ring and Bruck, where
// all ranks move in lockstep); those rows are marked '~'.
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
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "collectives/schedule.hpp"
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

using Maker = std::function<Plan(int rank)>;

struct Prediction {
  double seconds = 0;
  std::string algorithm;
  bool sampled = false;
  std::size_t steps = 0;  // the most steps of any rank (of the sampled ones when sampled)
};

/// The step's local copies, done before its sends leave.
double copyTime(const Step& step, std::size_t es, const CostModel& m) {
  double copied = 0;
  for (const auto& c : step.copies) copied += static_cast<double>(c.count * es);
  return m.epsilon * copied;
}

/// What a schedule holds, for the choice between playing all ranks and sampling.
std::size_t entries(const Schedule& s) {
  std::size_t n = s.steps.size();
  for (const Step& st : s.steps) n += st.copies.size();
  return n;
}

double stepEnd(const Step& step, double start, std::size_t es, const CostModel& m,
               const std::vector<double>* arrivals) {
  double sent = 0;
  for (const auto& t : step.sends) sent += static_cast<double>(t.count * es);
  double received = 0;
  double end = start + m.beta * sent;
  for (std::size_t i = 0; i < step.recvs.size(); ++i) {
    received += static_cast<double>(step.recvs[i].count * es);
    if (arrivals) end = std::max(end, (*arrivals)[i]);
  }
  if (!step.recvs.empty()) end = std::max(end, start + m.alpha + m.beta * received);
  end += m.gamma;
  if (step.recvMode == RecvMode::Reduce) end += m.delta * received;
  return end;
}

std::uint64_t key(int from, int to, std::uint32_t round) {
  return (static_cast<std::uint64_t>(from) << 48) | (static_cast<std::uint64_t>(to) << 32) | round;
}

/// Plays every rank's schedule; returns the finish time of the last rank.
double playAll(int p, const std::vector<Schedule>& s, std::size_t es, const CostModel& m) {
  std::vector<std::size_t> step(p, 0);
  std::vector<double> now(p, 0);
  std::vector<char> posted(p, 0);
  std::unordered_map<std::uint64_t, std::deque<double>> wire;
  std::vector<double> arrivals;
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (step[r] < s[r].steps.size()) {
        const Step& st = s[r].steps[step[r]];
        if (!posted[r]) {
          now[r] += copyTime(st, es, m);
          double bytes = 0;
          for (const auto& t : st.sends) {
            bytes += static_cast<double>(t.count * es);
            wire[key(r, t.peer, t.round)].push_back(now[r] + m.alpha + m.beta * bytes);
          }
          posted[r] = 1;
          progress = true;
        }
        bool ready = true;
        for (const auto& t : st.recvs) {
          auto it = wire.find(key(t.peer, r, t.round));
          if (it == wire.end() || it->second.empty()) {
            ready = false;
            break;
          }
        }
        if (!ready) break;
        arrivals.clear();
        for (const auto& t : st.recvs) {
          auto& q = wire[key(t.peer, r, t.round)];
          arrivals.push_back(q.front());
          q.pop_front();
        }
        now[r] = stepEnd(st, now[r], es, m, &arrivals);
        ++step[r];
        posted[r] = 0;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (step[r] < s[r].steps.size()) {
      std::fprintf(stderr, "commux_cost_model: rank %d of %d is stuck at step %zu\n", r, p, step[r]);
      std::exit(1);
    }
  }
  return *std::max_element(now.begin(), now.end());
}

/// One rank alone, every message arriving alpha + beta * bytes after its step starts.
double playOne(const Schedule& s, std::size_t es, const CostModel& m) {
  double now = 0;
  for (const Step& st : s.steps) now = stepEnd(st, now + copyTime(st, es, m), es, m, nullptr);
  return now;
}

Prediction predict(int p, const Maker& make, const Options& o) {
  Prediction out;
  Plan first = make(0);
  out.algorithm = first.algorithm;
  out.steps = first.schedule.steps.size();
  if (entries(first.schedule) * static_cast<std::size_t>(p) <= o.fullSteps) {
    std::vector<Schedule> all;
    all.reserve(static_cast<std::size_t>(p));
    all.push_back(std::move(first.schedule));
    for (int r = 1; r < p; ++r) {
      all.push_back(make(r).schedule);
      out.steps = std::max(out.steps, all.back().steps.size());
    }
    out.seconds = playAll(p, all, o.elementSize, o.model);
    return out;
  }
  out.sampled = true;
  const int pof2 = 1 << floorLog2(static_cast<std::uint64_t>(p));
  const int rem = p - pof2;
  out.seconds = playOne(first.schedule, o.elementSize, o.model);
  for (int r : {1, p / 2, p - 1, std::max(0, 2 * rem - 1), std::min(p - 1, 2 * rem)}) {
    const Schedule s = make(r).schedule;
    out.steps = std::max(out.steps, s.steps.size());
    out.seconds = std::max(out.seconds, playOne(s, o.elementSize, o.model));
  }
  return out;
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
