#include "collectives/schedule_cost.hpp"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <unordered_map>

#include "core/error.hpp"

namespace commux::collectives {
namespace {

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

}  // namespace

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
    COMMUX_CHECK(step[r] >= s[r].steps.size(), InvalidArgument, "commux: rank ", r, " of ", p,
                 " is stuck at step ", step[r], " of its schedule: no rank sends what it waits for");
  }
  return p > 0 ? *std::max_element(now.begin(), now.end()) : 0.0;
}

double playOne(const Schedule& s, std::size_t es, const CostModel& m) {
  double now = 0;
  for (const Step& st : s.steps) now = stepEnd(st, now + copyTime(st, es, m), es, m, nullptr);
  return now;
}

Prediction predict(int p, const PlanMaker& make, std::size_t es, const CostModel& m,
                   std::size_t fullSteps) {
  Prediction out;
  Plan first = make(0);
  out.algorithm = first.algorithm;
  out.steps = first.schedule.steps.size();
  if (entries(first.schedule) * static_cast<std::size_t>(p) <= fullSteps) {
    std::vector<Schedule> all;
    all.reserve(static_cast<std::size_t>(p));
    all.push_back(std::move(first.schedule));
    for (int r = 1; r < p; ++r) {
      all.push_back(make(r).schedule);
      out.steps = std::max(out.steps, all.back().steps.size());
    }
    out.seconds = playAll(p, all, es, m);
    return out;
  }
  out.sampled = true;
  const int pof2 = 1 << floorLog2(static_cast<std::uint64_t>(p));
  const int rem = p - pof2;
  out.seconds = playOne(first.schedule, es, m);
  for (int r : {1, p / 2, p - 1, std::max(0, 2 * rem - 1), std::min(p - 1, 2 * rem)}) {
    const Schedule s = make(r).schedule;
    out.steps = std::max(out.steps, s.steps.size());
    out.seconds = std::max(out.seconds, playOne(s, es, m));
  }
  return out;
}

}  // namespace commux::collectives
