// The shared-memory step protocol at every interleaving that matters: the shipped code
// (shm/steps.cpp and the collectives of shm/algorithms.cpp) run by 2 and 3 participants,
// one thread each over one shared block of memory, under a deterministic scheduler that
// lets exactly one participant run at a time. A participant can be switched out wherever
// the protocol publishes (every ring of the signal, after each mark) and wherever it
// waits; a wait whose condition is false blocks it until some other participant rings.
// The scheduler chooses who runs next at each such point, so a run is a sequence of
// choices, and the explorer tries them:
//  - systematically: every schedule with at most two preemptions (switching away from a
//    participant that could go on), depth first, up to a budget per case;
//  - at random: seeded schedules with any number of switches.
// Faults are choices too: a participant's timeout (its deadline passes) or abort (its group
// goes away) fires at a chosen point, also while it is blocked. Every case runs its
// collective twice in a row, so the second reuses the parities the first left behind.
//
// What a run must show: nobody stays blocked with nobody left to ring (a lost wake-up or a
// protocol deadlock: the run stops and the test prints the schedule); results exact on
// every participant that succeeds; after a fault, every other participant either finished
// with exact results or failed naming the participant that left, and later collectives fail
// at once; ranks that pass different sizes fail with a ValueError where the protocol checks
// (every rank when every rank meets, COMMUX_CHECK_COLLECTIVES or an allreduce; the readers
// of a rooted collective otherwise) and the next collective works, or, where the ranks'
// steps differ, the channel breaks naming the rank that found it.
//
// What it cannot show: interleavings inside a copy or a fold between two points (a
// participant's plain memory accesses between points run without a switch), reorderings
// of the memory model (one participant runs at a time, with the scheduler's lock between
// them: the sanitizer builds and the real-rank stress test cover that), the futex Bell
// itself (tests/cpp/test_shm_primitives.cpp), and timeouts found by the clock alone (the
// 20 ms re-check of a sleeping waiter: here a fault wakes its participant directly).
//
// A failure prints the case, the fault and the schedule (`choices`); COMMUX_INTERLEAVING_SEED
// replays one random schedule, COMMUX_INTERLEAVING_BUDGET scales the number of runs.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "core/buffer.hpp"
#include "core/error.hpp"
#include "engine/description.hpp"
#include "engine/op.hpp"
#include "shm/algorithms.hpp"
#include "shm/steps.hpp"

namespace {

using commux::shm::Kind;
using commux::shm::Steps;
using commux::shm::Turn;
using Clock = std::chrono::steady_clock;

enum class Fault { None, Timeout, Abort };

const char* faultName(Fault f) {
  return f == Fault::Timeout ? "timeout" : f == Fault::Abort ? "abort" : "none";
}

/// Chooses one of `options` at decision `index`; `preempting`: whether choices other than
/// the first switch away from a participant that could go on.
class Chooser {
 public:
  virtual ~Chooser() = default;
  virtual int choose(std::size_t index, int options, bool preempting) = 0;
};

/// Runs the participants one at a time; every switch is a choice.
class Scheduler {
 public:
  struct Deadlocked {};
  enum class State { Runnable, Waiting, Done };

  Scheduler(int participants, Chooser& chooser, Fault fault, int faulty)
      : state_(participants, State::Runnable),
        pending_(participants, Fault::None),
        chooser_(chooser),
        fault_(fault),
        faulty_(faulty) {}

  // The participants' side.
  void enter(int me) {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return running_ == me || deadlocked_; });
    if (deadlocked_) throw Deadlocked{};
  }
  /// `me` may be switched out here.
  void point(int me) {
    std::unique_lock<std::mutex> lock(mutex_);
    handOver(me, lock);
  }
  /// `me` waits for a ring.
  void block(int me) {
    std::unique_lock<std::mutex> lock(mutex_);
    state_[me] = State::Waiting;
    handOver(me, lock);
  }
  /// Everyone waiting for a ring may go on.
  void ringed() {
    std::lock_guard<std::mutex> lock(mutex_);
    for (auto& s : state_) {
      if (s == State::Waiting) s = State::Runnable;
    }
  }
  void leave(int me) {
    std::unique_lock<std::mutex> lock(mutex_);
    state_[me] = State::Done;
    handOver(me, lock);
  }
  /// The fault chosen for `me`, once.
  Fault takeFault(int me) {
    std::lock_guard<std::mutex> lock(mutex_);
    return std::exchange(pending_[me], Fault::None);
  }

  // The test's side: the first choice, then wait until every participant left.
  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    handOver(-1, lock);
    cv_.wait(lock, [&] { return running_ == kAllDone || deadlocked_; });
  }
  bool deadlocked() const { return deadlocked_; }
  const std::string& trace() const { return trace_; }

 private:
  static constexpr int kAllDone = -2;

  // Under the lock: choose who runs next and wait for `me`'s next turn (if it has one).
  void handOver(int me, std::unique_lock<std::mutex>& lock) {
    struct Candidate {
      int who;
      bool fault;
    };
    std::vector<Candidate> candidates;
    const bool goesOn = me >= 0 && state_[me] == State::Runnable;
    if (goesOn) candidates.push_back({me, false});
    for (int q = 0; q < static_cast<int>(state_.size()); ++q) {
      if (q != me && state_[q] == State::Runnable) candidates.push_back({q, false});
    }
    if (fault_ != Fault::None && !fired_ && state_[faulty_] != State::Done) {
      candidates.push_back({faulty_, true});
    }
    if (candidates.empty()) {
      if (std::all_of(state_.begin(), state_.end(), [](State s) { return s == State::Done; })) {
        running_ = kAllDone;
      } else {
        deadlocked_ = true;
        trace_ += " DEADLOCK";
      }
      cv_.notify_all();
      if (deadlocked_ && me >= 0 && state_[me] != State::Done) throw Deadlocked{};
      return;
    }
    const int k = chooser_.choose(decisions_++, static_cast<int>(candidates.size()), goesOn);
    const Candidate next = candidates[static_cast<std::size_t>(k)];
    if (next.fault) {
      fired_ = true;
      pending_[next.who] = fault_;
      state_[next.who] = State::Runnable;
      trace_ += " " + std::string(faultName(fault_)) + "@" + std::to_string(next.who);
    } else if (next.who != me) {
      trace_ += " " + std::to_string(next.who);
    }
    running_ = next.who;
    cv_.notify_all();
    if (me < 0 || state_[me] == State::Done) return;
    cv_.wait(lock, [&] { return running_ == me || deadlocked_; });
    if (deadlocked_) throw Deadlocked{};
  }

  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<State> state_;
  std::vector<Fault> pending_;
  Chooser& chooser_;
  const Fault fault_;
  const int faulty_;
  bool fired_ = false;
  int running_ = -1;
  bool deadlocked_ = false;
  std::size_t decisions_ = 0;
  std::string trace_;
};

/// The signal of one participant: each ring and wait is a point of the scheduler.
class ScheduledSignal final : public commux::shm::Signal {
 public:
  ScheduledSignal(Scheduler& scheduler, int me, std::function<void(Fault)> apply)
      : scheduler_(scheduler), me_(me), apply_(std::move(apply)) {}

  void ring() override {
    scheduler_.ringed();
    scheduler_.point(me_);
    applyFault();
  }
  bool waitFor(const std::function<bool()>& ready,
               const std::function<bool()>& interrupt) override {
    scheduler_.point(me_);
    applyFault();
    for (;;) {
      if (ready()) return true;
      if (interrupt()) return false;
      scheduler_.block(me_);
      applyFault();
    }
  }

 private:
  void applyFault() {
    if (const Fault f = scheduler_.takeFault(me_); f != Fault::None) apply_(f);
  }

  Scheduler& scheduler_;
  const int me_;
  const std::function<void(Fault)> apply_;
};

/// An operation that only names itself: what a Turn needs of one.
class NamedOp final : public commux::engine::Op {
 public:
  explicit NamedOp(std::string name) : Op(commux::engine::Description(std::move(name)), nullptr) {}
  void start(commux::engine::Engine&) override {}

 protected:
  void onComplete(commux::engine::Engine&, std::uint32_t,
                  const commux::engine::RecvInfo&) override {}
};

struct Case {
  std::string name;
  int ranks = 2;
  Kind kind = Kind::Allreduce;
  int root = 0;
  int64_t count = 0;         // elements per rank (all_to_all: a scale for the counts)
  std::size_t cmaBytes = 0;  // single-copy reads from here (0: never)
  bool mismatch = false;     // the last rank passes one element more in the first round
  bool checkAll = false;     // ChannelShape::checkAll (COMMUX_CHECK_COLLECTIVES)
  unsigned depth = 2;        // ChannelShape::depth: how far a rank may run ahead
  /// With `mismatch`: who fails the first round (-1: every rank), and whether the
  /// channel breaks (the second round may fail, naming the rank that found it).
  int mismatchFails = -1;
  bool mismatchBreaks = false;
  /// Per rank, what it calls in the first round instead (kind, root, count): ranks that
  /// call different collectives. With it, `expect` says per rank and round what must
  /// happen: "ok", "ValueError", or a part of the error.
  std::vector<std::tuple<Kind, int, int64_t>> firstRound;
  std::vector<std::array<std::string, 2>> expect;
};

std::ostream& operator<<(std::ostream& os, const Case& c) { return os << c.name; }

using Values = std::vector<float>;

// A rank's contribution: small integers, exact in float whatever the order of the sums.
Values values(int rank, int64_t n, int salt) {
  Values v(static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 11 + rank * 3 + salt);
  return v;
}

Values operator+(Values a, const Values& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

Values join(const std::vector<Values>& parts) {
  Values all;
  for (const auto& part : parts) all.insert(all.end(), part.begin(), part.end());
  return all;
}

Values slice(const Values& v, int64_t from, int64_t count) {
  return Values(v.begin() + from, v.begin() + from + count);
}

std::shared_ptr<Values> owned(Values v) { return std::make_shared<Values>(std::move(v)); }

std::size_t alltoallCount(int from, int to, int64_t scale) {
  return static_cast<std::size_t>((from + 1) * (to + 2) * scale % 1700);
}

/// What a participant brings to the `round`-th run of the case (its job's buffers, which it
/// owns), and what it must hold after.
struct Planned {
  Kind kind = Kind::Barrier;
  int root = 0;
  std::shared_ptr<Values> buffer, input, output;  // null: no such buffer
  std::vector<std::size_t> sendCounts, recvCounts;
  std::shared_ptr<Values> result;  // what to compare after (null: nothing to check)
  Values expected;

  commux::shm::Job job() const {
    const auto view = [](const std::shared_ptr<Values>& v) {
      return v ? commux::core::bufferOf(v->data(), v->size(), commux::core::Dtype::Float32, v)
               : commux::core::Buffer{};
    };
    commux::shm::Job job;
    job.kind = kind;
    job.root = root;
    job.buffer = view(buffer);
    job.input = view(input);
    job.output = view(output);
    job.sendCounts = sendCounts;
    job.recvCounts = recvCounts;
    return job;
  }
};

Planned plan(const Case& c, int rank, int round) {
  if (round == 0 && !c.firstRound.empty()) {
    Case first = c;
    std::tie(first.kind, first.root, first.count) = c.firstRound[static_cast<std::size_t>(rank)];
    first.firstRound.clear();
    first.mismatch = false;
    return plan(first, rank, round);
  }
  Planned p;
  Planned& job = p;
  job.kind = c.kind;
  job.root = c.root;
  const int n = c.ranks;
  // A mismatch in the first round only: the second must work again.
  const int64_t count = c.count + (c.mismatch && round == 0 && rank == n - 1 ? 1 : 0);
  const Values zeros(static_cast<std::size_t>(count), 0.0f);
  switch (c.kind) {
    case Kind::Allreduce:
    case Kind::Reduce: {
      job.buffer = owned(values(rank, count, round));
      Values sum = zeros;
      for (int r = 0; r < n; ++r) sum = sum + values(r, count, round);
      p.result = job.buffer;
      p.expected = c.kind == Kind::Allreduce || rank == c.root ? sum : *job.buffer;
      break;
    }
    case Kind::Broadcast:
      job.buffer = owned(rank == c.root ? values(rank, count, round) : zeros);
      p.result = job.buffer;
      p.expected = values(c.root, count, round);
      break;
    case Kind::Allgather:
    case Kind::Gather: {
      job.input = owned(values(rank, count, round));
      std::vector<Values> all;
      for (int r = 0; r < n; ++r) all.push_back(values(r, count, round));
      if (c.kind == Kind::Allgather || rank == c.root) {
        job.output = owned(Values(static_cast<std::size_t>(count * n), 0.0f));
        p.result = job.output;
        p.expected = join(all);
      }
      break;
    }
    case Kind::Scatter:
      if (rank == c.root) job.input = owned(values(rank, count * n, round));
      job.output = owned(zeros);
      p.result = job.output;
      p.expected = slice(values(c.root, count * n, round), rank * count, count);
      break;
    case Kind::ReduceScatter: {
      job.input = owned(values(rank, count * n, round));
      job.output = owned(zeros);
      Values sum = zeros;
      for (int r = 0; r < n; ++r) sum = sum + slice(values(r, count * n, round), rank * count, count);
      p.result = job.output;
      p.expected = sum;
      break;
    }
    case Kind::Alltoall: {
      std::vector<Values> sends, expected;
      for (int q = 0; q < n; ++q) {
        job.sendCounts.push_back(alltoallCount(rank, q, c.count));
        job.recvCounts.push_back(alltoallCount(q, rank, c.count));
        sends.push_back(values(rank * 10 + q, static_cast<int64_t>(job.sendCounts.back()), round));
        expected.push_back(
            values(q * 10 + rank, static_cast<int64_t>(job.recvCounts.back()), round));
      }
      job.input = owned(join(sends));
      p.expected = join(expected);
      job.output = owned(Values(p.expected.size(), 0.0f));
      p.result = job.output;
      break;
    }
    case Kind::Barrier:
      break;
  }
  return p;
}

struct RunResult {
  bool deadlocked = false;
  std::string trace;
  // Per participant and round: "" when it succeeded with exact results, else what happened.
  std::vector<std::vector<std::string>> outcomes;
  std::vector<std::vector<bool>> wrong;  // succeeded with a wrong result
};

constexpr int kRounds = 2;

RunResult runOnce(const Case& c, Chooser& chooser, Fault fault, int faulty) {
  commux::shm::ChannelShape shape;
  shape.size = c.ranks;
  shape.slotBytes = 4096;  // small slots: the larger cases take several steps
  shape.smallBytes = 256;
  shape.cma = commux::shm::CmaThresholds::all(c.cmaBytes);
  shape.checkAll = c.checkAll;
  shape.depth = c.depth;
  const std::size_t bytes = Steps::bytesFor(shape);
  std::unique_ptr<char, decltype(&std::free)> memory(
      static_cast<char*>(std::aligned_alloc(4096, bytes)), &std::free);
  std::memset(memory.get(), 0, bytes);

  Scheduler scheduler(c.ranks, chooser, fault, faulty);
  std::vector<int> members(static_cast<std::size_t>(c.ranks));
  std::iota(members.begin(), members.end(), 0);
  std::vector<std::unique_ptr<Steps>> steps;
  std::vector<Turn*> turns(static_cast<std::size_t>(c.ranks), nullptr);
  for (int r = 0; r < c.ranks; ++r) {
    const auto apply = [r, &steps, &turns](Fault f) {
      if (f == Fault::Timeout && turns[r] != nullptr) turns[r]->deadline = Clock::time_point::min();
      if (f == Fault::Abort) steps[r]->stop();
    };
    steps.push_back(std::make_unique<Steps>(memory.get(), bytes, "test", r, shape, r == 0, members,
                                            [&scheduler, r, apply](commux::shm::BellWords*) {
                                              return std::make_unique<ScheduledSignal>(scheduler, r,
                                                                                       apply);
                                            }));
  }
  RunResult result;
  result.outcomes.assign(c.ranks, std::vector<std::string>(kRounds));
  result.wrong.assign(c.ranks, std::vector<bool>(kRounds, false));
  std::vector<std::thread> threads;
  for (int r = 0; r < c.ranks; ++r) {
    threads.emplace_back([&, r] {
      try {
        scheduler.enter(r);
        bool timedOut = false;
        for (int round = 0; round < kRounds; ++round) {
          Planned p = plan(c, r, round);
          const NamedOp op(c.name + " round " + std::to_string(round));
          const commux::shm::Job job = p.job();
          Turn turn{job, op};
          // After its timeout a rank's later collectives keep a passed deadline, as the
          // group refuses them (here: the channel it broke must).
          if (timedOut) turn.deadline = Clock::time_point::min();
          turns[r] = &turn;
          std::string& outcome = result.outcomes[r][round];
          try {
            commux::shm::runCollective(*steps[r], turn);
            if (p.result && *p.result != p.expected) {
              result.wrong[r][round] = true;
              outcome = "WRONG RESULT";
            }
          } catch (const commux::shm::DeadlineReached&) {
            outcome = "deadline";
            timedOut = true;
          } catch (const std::exception&) {
            // A core error, or (in libcommux, which installs the factory) the c10 type it
            // became: InvalidArgument is torch's ValueError.
            const auto reading = commux::core::readError(std::current_exception());
            outcome = (reading.kind == commux::core::ErrorKind::InvalidArgument ? "ValueError: "
                                                                               : "error: ") +
                      reading.message;
          }
          turns[r] = nullptr;
        }
        scheduler.leave(r);
      } catch (const Scheduler::Deadlocked&) {
      }
    });
  }
  scheduler.run();
  for (auto& t : threads) t.join();
  result.deadlocked = scheduler.deadlocked();
  result.trace = scheduler.trace();
  return result;
}

/// Why the run is wrong, or "".
std::string judge(const Case& c, const RunResult& run, Fault fault, int faulty) {
  if (run.deadlocked) return "a participant stayed blocked with nobody left to ring";
  if (!c.expect.empty()) {
    for (int r = 0; r < c.ranks; ++r) {
      for (int round = 0; round < kRounds; ++round) {
        const std::string& o = run.outcomes[r][round];
        const std::string& want = c.expect[static_cast<std::size_t>(r)][round];
        const std::string where = "rank " + std::to_string(r) + " round " + std::to_string(round);
        if (run.wrong[r][round]) return where + ": wrong result";
        const bool ok = want == "ok"           ? o.empty()
                        : want == "ValueError" ? o.rfind("ValueError", 0) == 0
                                               : o.find(want) != std::string::npos;
        if (!ok) return where + ": expected " + want + ", got " + (o.empty() ? "ok" : o);
      }
    }
    return "";
  }
  for (int r = 0; r < c.ranks; ++r) {
    bool failed = false;
    for (int round = 0; round < kRounds; ++round) {
      const std::string& o = run.outcomes[r][round];
      const std::string where = "rank " + std::to_string(r) + " round " + std::to_string(round);
      if (run.wrong[r][round]) return where + ": wrong result";
      if (c.mismatch) {
        const bool fails = c.mismatchFails < 0 || c.mismatchFails == r;
        if (round == 0 && fails && o.rfind("ValueError", 0) != 0) {
          return where + ": no ValueError: " + o;
        }
        if (c.mismatchBreaks && !(round == 0 && fails)) {
          // The rank that found it fails its next collective at once; the others may have
          // gone on before it broke the channel, else they fail naming it.
          const std::string named = "rank " + std::to_string(c.mismatchFails) + " found";
          if (o.empty() && r != c.mismatchFails) continue;
          if (o.find(named) == std::string::npos) return where + ": not refused naming it: " + o;
          continue;
        }
        if (round == 0 && !fails && !o.empty()) return where + ": failed: " + o;
        if (round == 1 && !o.empty()) return where + ": the channel did not stay usable: " + o;
        continue;
      }
      if (fault == Fault::None && !o.empty()) return where + ": failed without a fault: " + o;
      if (o.empty()) {
        if (failed) return where + ": succeeded after its channel failed";
        continue;
      }
      failed = true;
      if (r != faulty && o.find("rank " + std::to_string(faulty)) == std::string::npos) {
        return where + ": its error does not name rank " + std::to_string(faulty) + ": " + o;
      }
    }
  }
  return "";
}

std::string describe(const Case& c, const RunResult& run, Fault fault, int faulty,
                     const std::string& how) {
  std::ostringstream os;
  os << c.name << " (" << c.ranks << " participants, depth " << c.depth << ", fault "
     << faultName(fault);
  if (fault != Fault::None) os << " on " << faulty;
  os << ", " << how << "): schedule" << run.trace << "\n";
  for (int r = 0; r < c.ranks; ++r) {
    for (int round = 0; round < kRounds; ++round) {
      os << "  rank " << r << " round " << round << ": "
         << (run.outcomes[r][round].empty() ? "ok" : run.outcomes[r][round]) << "\n";
    }
  }
  return os.str();
}

/// Follows a prefix of choices, then always the first option; records the tree for the
/// next depth-first step.
class PrefixChooser final : public Chooser {
 public:
  explicit PrefixChooser(std::vector<int> prefix) : prefix_(std::move(prefix)) {}
  int choose(std::size_t index, int options, bool preempting) override {
    const int k = index < prefix_.size() ? std::min(prefix_[index], options - 1) : 0;
    taken_.push_back(k);
    options_.push_back(options);
    preempting_.push_back(preempting);
    return k;
  }
  /// The next schedule in depth-first order with at most `bound` preemptions, or none.
  std::optional<std::vector<int>> next(int bound) const {
    for (std::size_t i = taken_.size(); i-- > 0;) {
      if (taken_[i] + 1 >= options_[i]) continue;
      int preemptions = 0;
      for (std::size_t j = 0; j < i; ++j) preemptions += taken_[j] > 0 && preempting_[j];
      if (preempting_[i]) ++preemptions;
      if (preemptions > bound) continue;
      std::vector<int> prefix(taken_.begin(), taken_.begin() + static_cast<std::ptrdiff_t>(i));
      prefix.push_back(taken_[i] + 1);
      return prefix;
    }
    return std::nullopt;
  }
  std::string choices() const {
    std::string s;
    for (int k : taken_) s += std::to_string(k);
    return s;
  }

 private:
  std::vector<int> prefix_;
  std::vector<int> taken_, options_;
  std::vector<bool> preempting_;
};

class RandomChooser final : public Chooser {
 public:
  explicit RandomChooser(unsigned seed) : rng_(seed) {}
  int choose(std::size_t, int options, bool) override {
    return static_cast<int>(rng_() % static_cast<unsigned>(options));
  }

 private:
  std::mt19937 rng_;
};

unsigned budget() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  unsigned runs = 60;  // the sanitizers are 5-20x slower; the release build explores
#else
  unsigned runs = 400;
#endif
  if (const char* b = std::getenv("COMMUX_INTERLEAVING_BUDGET"); b && *b) {
    runs = static_cast<unsigned>(std::strtoul(b, nullptr, 10));
  }
  return runs;
}

/// Explores `c` with `fault` on `faulty`: depth first with two preemptions, then at random.
void explore(const Case& c, Fault fault, int faulty) {
  const unsigned runs = budget();
  std::vector<int> prefix;
  unsigned systematic = 0;
  for (; systematic < runs; ++systematic) {
    PrefixChooser chooser(prefix);
    const RunResult run = runOnce(c, chooser, fault, faulty);
    const std::string wrong = judge(c, run, fault, faulty);
    ASSERT_TRUE(wrong.empty()) << wrong << "\n"
                               << describe(c, run, fault, faulty,
                                           "systematic, choices " + chooser.choices());
    auto next = chooser.next(2);
    if (!next) break;
    prefix = std::move(*next);
  }
  unsigned first = 1, last = runs / 2;
  if (const char* s = std::getenv("COMMUX_INTERLEAVING_SEED"); s && *s) {
    first = last = static_cast<unsigned>(std::strtoul(s, nullptr, 10));
  }
  for (unsigned seed = first; seed <= last; ++seed) {
    RandomChooser chooser(seed);
    const RunResult run = runOnce(c, chooser, fault, faulty);
    const std::string wrong = judge(c, run, fault, faulty);
    ASSERT_TRUE(wrong.empty()) << wrong << "\n"
                               << describe(
                                      c, run, fault, faulty,
                                      "random, COMMUX_INTERLEAVING_SEED=" + std::to_string(seed));
  }
  ::testing::Test::RecordProperty("systematic_runs", static_cast<int>(systematic));
}

// Every shape the channel runs, each at sizes that take one step and several.
std::vector<Case> shapes() {
  std::vector<Case> cases;
  for (int ranks : {2, 3}) {
    const auto add = [&](std::string name, Kind kind, int64_t count, int root = 0,
                         std::size_t cma = 0) {
      Case c;
      c.name = name + "_" + std::to_string(ranks) + "ranks";
      c.ranks = ranks;
      c.kind = kind;
      c.count = count;
      c.root = root % ranks;
      c.cmaBytes = cma;
      cases.push_back(c);
    };
    add("allreduce_small", Kind::Allreduce, 16);
    add("allreduce_chunked", Kind::Allreduce, 2100);  // 3 chunks of 1024 floats
    add("reduce_small", Kind::Reduce, 16, 1);
    add("reduce_chunked", Kind::Reduce, 1500, 1);
    add("broadcast", Kind::Broadcast, 2500, 1);  // more than one parity of slots
    add("broadcast_cma", Kind::Broadcast, 700, 1, 1);
    add("allgather", Kind::Allgather, 1500);  // 2 steps of a 4 KiB slot
    add("allgather_cma", Kind::Allgather, 300, 0, 1);
    add("gather", Kind::Gather, 1500, 1);
    add("scatter", Kind::Scatter, 1500, 1);
    add("scatter_cma", Kind::Scatter, 300, 1, 1);
    add("reduce_scatter", Kind::ReduceScatter, 700);  // several pieces per slot
    add("alltoall", Kind::Alltoall, 7);               // uneven, one step
    add("alltoall_steps", Kind::Alltoall, 211);       // uneven, several steps
    add("alltoall_cma", Kind::Alltoall, 211, 0, 1);   // every piece direct
    // Pieces of 2,532 bytes and less through the slots, larger ones direct: at 2 ranks one
    // step (only the final wait keeps the owner's input), at 3 ranks several.
    add("alltoall_cma_mixed", Kind::Alltoall, 211, 0, 3000);
    add("barrier", Kind::Barrier, 0);
    // The rooted ones again with COMMUX_CHECK_COLLECTIVES: every rank meets at the first step.
    for (const auto& [name, kind, count, cma] :
         {std::tuple{"broadcast_checked", Kind::Broadcast, 2500, std::size_t{0}},
          std::tuple{"broadcast_cma_checked", Kind::Broadcast, 700, std::size_t{1}},
          std::tuple{"reduce_small_checked", Kind::Reduce, 16, std::size_t{0}},
          std::tuple{"gather_checked", Kind::Gather, 1500, std::size_t{0}},
          std::tuple{"scatter_checked", Kind::Scatter, 1500, std::size_t{0}}}) {
      add(name, kind, count, 1, cma);
      cases.back().checkAll = true;
    }
    // Deeper small slots (oversubscribed hosts): a leader runs several small steps ahead of
    // the slowest reader; a large step beside them still waits for the parity before.
    for (const auto& [name, kind, count, root] :
         {std::tuple{"broadcast_small_deep", Kind::Broadcast, 100, 1},
          std::tuple{"gather_small_deep", Kind::Gather, 50, 1},
          std::tuple{"reduce_scatter_small_deep", Kind::ReduceScatter, 20, 0},
          std::tuple{"allreduce_chunked_deep", Kind::Allreduce, 2100, 0}}) {
      add(name, kind, count, root);
      cases.back().depth = 4;
    }
  }
  return cases;
}

class StepInterleavings : public ::testing::TestWithParam<Case> {};

TEST_P(StepInterleavings, EveryScheduleCompletesWithExactResults) {
  explore(GetParam(), Fault::None, 0);
}

TEST_P(StepInterleavings, ATimeoutHalfWayFailsTheOthersNamingIt) {
  explore(GetParam(), Fault::Timeout, GetParam().ranks - 1);
}

TEST_P(StepInterleavings, AnAbortHalfWayFailsTheOthersNamingIt) {
  explore(GetParam(), Fault::Abort, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, StepInterleavings, ::testing::ValuesIn(shapes()),
                         [](const auto& info) { return info.param.name; });

Case mismatched(Kind kind, int ranks, bool checkAll, int64_t count = 40) {
  Case c;
  c.name = std::string("mismatch_") + commux::shm::kindName(kind) + "_" + std::to_string(ranks) +
           (checkAll ? "_checked" : "");
  c.ranks = ranks;
  c.kind = kind;
  c.count = count;
  c.mismatch = true;
  c.checkAll = checkAll;
  return c;
}

// With COMMUX_CHECK_COLLECTIVES, ranks that pass different sizes fail alike, and the
// channel stays in step.
TEST(StepInterleavingsMismatch, CheckedDifferentSizesFailEveryRankAndTheChannelGoesOn) {
  for (Kind kind : {Kind::Allreduce, Kind::Broadcast, Kind::Allgather, Kind::ReduceScatter,
                    Kind::Reduce, Kind::Gather, Kind::Scatter}) {
    for (int ranks : {2, 3}) explore(mismatched(kind, ranks, true), Fault::None, 0);
  }
}

// Without it, the collectives in which every rank reads every other still fail alike; in
// the rooted ones the ranks that read find it (a broadcast's or scatter's mismatched
// reader, a reduce's or gather's root), and the channel stays in step.
TEST(StepInterleavingsMismatch, DifferentSizesFailWhereTheyAreReadAndTheChannelGoesOn) {
  for (int ranks : {2, 3}) {
    for (unsigned depth : {2u, 4u}) {
      if (depth != 2 && ranks != 3) continue;  // deeper small slots: once, at 3 ranks
      for (Kind kind : {Kind::Allreduce, Kind::Allgather, Kind::ReduceScatter}) {
        Case c = mismatched(kind, ranks, false);
        c.depth = depth;
        explore(c, Fault::None, 0);
      }
      for (Kind kind : {Kind::Broadcast, Kind::Scatter, Kind::Reduce, Kind::Gather}) {
        Case c = mismatched(kind, ranks, false);
        c.depth = depth;
        // The root is 0, the mismatched rank the last one.
        c.mismatchFails = kind == Kind::Broadcast || kind == Kind::Scatter ? ranks - 1 : 0;
        explore(c, Fault::None, 0);
      }
    }
  }
}

// A gather whose ranks take different numbers of steps (4096 bytes fill one slot, one
// more element takes two): at 3 ranks the root sees two leaders that end at different
// steps and breaks the channel, naming itself; at 2 ranks it ends where the other does.
TEST(StepInterleavingsMismatch, DifferentStepCountsBreakTheChannelNamingWhoFoundIt) {
  Case two = mismatched(Kind::Gather, 2, false, 1024);
  two.mismatchFails = 0;
  explore(two, Fault::None, 0);
  Case three = mismatched(Kind::Gather, 3, false, 1024);
  three.mismatchFails = 0;
  three.mismatchBreaks = true;
  explore(three, Fault::None, 0);
}

/// Two ranks that call the collectives of `firstRound` in the first round, then an
/// allreduce of 40 elements; `expect` per rank and round (see Case::expect).
void exploreMixed(std::string name, std::vector<std::tuple<Kind, int, int64_t>> firstRound,
                  std::vector<std::array<std::string, 2>> expect) {
  Case c;
  c.name = std::move(name);
  c.kind = Kind::Allreduce;
  c.count = 40;
  c.firstRound = std::move(firstRound);
  c.expect = std::move(expect);
  explore(c, Fault::None, 0);
}

// Ranks that call different collectives. A reduce's root (it meets: one step) beside a
// rank that takes it for a two-step broadcast from that root (it follows the root): the
// follower ends where the rank it follows ends, as the root counts it, so both fail at
// that step and the channel goes on (the root once counted the follower as a leader of
// two steps, and the channel hung after: found by review).
TEST(StepInterleavingsMismatch, AReduceRootAndABroadcastReaderBothFailAndTheChannelGoesOn) {
  exploreMixed("mismatch_reduce_root_vs_broadcast_reader",
               {{Kind::Reduce, 0, 40}, {Kind::Broadcast, 0, 3000}},
               {{"ValueError", "ok"}, {"ValueError", "ok"}});
}

// Two ranks that both lead (a gather's other rank, two steps; a broadcast's root, one step)
// check nothing, so both succeed and their step numbers part. The next collective in which
// one waits for the other finds it at that step in another collective and breaks the
// channel (it used to read the other's slots of the old collective), naming the rank that
// found it.
TEST(StepInterleavingsMismatch, RanksOutOfStepAfterTwoLeadersBreakTheChannelAtTheNextWait) {
  exploreMixed("mismatch_two_leaders", {{Kind::Gather, 1, 1500}, {Kind::Broadcast, 1, 40}},
               {{"ok", "rank 1 found"}, {"ok", "rank 1 found"}});
}

// A root that broadcasts a few elements (small slots) and a reader that expects many (the
// large ones): the reader compares before it reads, fails, and ends where the root ends;
// neither reads the other's slots, and the channel goes on.
TEST(StepInterleavingsMismatch, ASmallAndALargeBroadcastFailTheReaderAndTheChannelGoesOn) {
  exploreMixed("mismatch_small_vs_large_broadcast",
               {{Kind::Broadcast, 0, 40}, {Kind::Broadcast, 0, 3000}},
               {{"ok", "ok"}, {"ValueError", "ok"}});
}

}  // namespace
