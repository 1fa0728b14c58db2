#include "shm/steps.hpp"

#include <unistd.h>

#include <cstring>
#include <system_error>

#include "core/error.hpp"
#include "core/group_health.hpp"
#include "engine/op.hpp"
#include "shm/cma.hpp"
#include "shm/steps_layout.hpp"

namespace commux::shm {

std::size_t Steps::controlsOffset() { return layout::roundUp(sizeof(Header), layout::kLine); }

std::size_t Steps::slotsOffset(int size) {
  return layout::roundUp(controlsOffset() + static_cast<std::size_t>(size) * sizeof(Control),
                         layout::kPage);
}

namespace {
std::size_t smallSlotFor(const ChannelShape& shape) {
  return layout::roundUp(shape.smallBytes, layout::kLine);
}
std::size_t bigSlotsBytes(const ChannelShape& shape) {
  return 2 * static_cast<std::size_t>(shape.size) * shape.slotBytes;
}
bool sameCma(const std::uint64_t (&words)[CmaThresholds::kWords], const CmaThresholds& cma) {
  for (int i = 0; i < CmaThresholds::kWords; ++i) {
    if (words[i] != cma.word(i)) return false;
  }
  return true;
}
}  // namespace

std::size_t Steps::bytesFor(const ChannelShape& shape) {
  // Whole pages: a segment is mapped in pages, and aligned_alloc wants a multiple.
  return layout::roundUp(
      slotsOffset(shape.size) + bigSlotsBytes(shape) +
          shape.depth * static_cast<std::size_t>(shape.size) * smallSlotFor(shape),
      layout::kPage);
}

Steps::Steps(char* memory, std::size_t bytes, std::string name, int rank, const ChannelShape& shape,
             bool initialise, std::vector<int> members, const SignalMaker& signal)
    : name_(std::move(name)),
      rank_(rank),
      shape_(shape),
      members_(std::move(members)),
      header_(reinterpret_cast<Header*>(memory)),
      controls_(reinterpret_cast<Control*>(memory + controlsOffset())),
      slots_(memory + slotsOffset(shape.size)),
      smallSlot_(smallSlotFor(shape)),
      small_(slots_ + bigSlotsBytes(shape)) {
  COMMUX_CHECK(bytes >= bytesFor(shape), Runtime, "commux: shared-memory segment ", name_,
               " is too small for ", shape.size, " ranks");
  COMMUX_CHECK(
      members_.size() == static_cast<std::size_t>(shape.size) && rank >= 0 && rank < shape.size,
      Runtime, "commux: internal error: channel index ", rank, " of ", members_.size());
  COMMUX_CHECK(
      shape.depth >= 2 && shape.depth <= kMaxDepth && (shape.depth & (shape.depth - 1)) == 0,
      Runtime, "commux: internal error: shared-memory depth ", shape.depth);
  if (initialise) {
    header_->size = static_cast<std::uint32_t>(shape.size);
    header_->slotBytes = shape.slotBytes;
    for (int i = 0; i < CmaThresholds::kWords; ++i) header_->cma[i] = shape.cma.word(i);
    header_->checkAll = shape.checkAll ? 1 : 0;
    header_->depth = shape.depth;
    __atomic_store_n(&header_->magic, layout::kMagic, __ATOMIC_RELEASE);
  } else {
    COMMUX_CHECK(__atomic_load_n(&header_->magic, __ATOMIC_ACQUIRE) == layout::kMagic &&
                     header_->size == static_cast<std::uint32_t>(shape.size) &&
                     header_->slotBytes == shape.slotBytes && sameCma(header_->cma, shape.cma) &&
                     header_->checkAll == (shape.checkAll ? 1u : 0u) &&
                     header_->depth == shape.depth,
                 Runtime, "commux: shared-memory segment ", name_,
                 " does not match this rank's layout (", shape.size, " ranks, ", shape.depth,
                 " sets of ", shape.slotBytes, "-byte slots, its own single-copy sizes)"
                 "; do all ranks run the same commux with the same COMMUX_SHM_* settings?");
  }
  signal_ = signal ? signal(&header_->bell)
                   : std::make_unique<Bell>(&header_->bell, shape.spin, shape.poll);
  controls_[rank_].pid = static_cast<std::int32_t>(::getpid());
}

int Steps::deadRank() const noexcept {
  if (const int dead = dead_.load(); dead >= 0) return dead;
  return static_cast<int>(__atomic_load_n(&header_->deadRank, __ATOMIC_ACQUIRE) &
                          ~layout::kLeftBit) -
         1;
}

std::string Steps::brokenReason() const {
  if (const int dead = deadRank(); dead >= 0) return lost(dead);
  const std::uint32_t by = __atomic_load_n(&header_->brokenBy, __ATOMIC_ACQUIRE);
  if (by == 0) return "";
  return brokenBecause(static_cast<int>(by) - 1);
}

std::string Steps::lost(int dead) const {
  {
    std::lock_guard<std::mutex> lock(deadMutex_);
    if (dead_.load() == dead) return core::lostMember(dead, deadWhy_);
  }
  // Heard of through the channel only: another survivor marked it.
  const bool left = (__atomic_load_n(&header_->deadRank, __ATOMIC_ACQUIRE) & layout::kLeftBit) != 0;
  return core::lostMember(dead, left ? std::string(core::kClosedByPeer) +
                                           ": it left the group; another member heard so"
                                     : std::string());
}

std::string Steps::leftMessage(int left) const {
  std::string why;
  {
    std::lock_guard<std::mutex> lock(deadMutex_);
    if (auto found = leftWhy_.find(left); found != leftWhy_.end()) why = found->second;
  }
  if (why.empty()) {
    why = std::string(core::kClosedByPeer) + ": it destroyed, shut down or aborted its process group";
  }
  return core::lostMember(left, why) + " before its part in this collective";
}

std::string Steps::leftBeforeReason(const Turn& turn) const {
  const int left = leftBefore(turn);
  return left < 0 ? std::string() : leftMessage(left);
}

std::string Steps::brokenBecause(int by) const {
  if (__atomic_load_n(&header_->mismatchBy, __ATOMIC_ACQUIRE) ==
      static_cast<std::uint32_t>(by) + 1) {
    return "rank " + std::to_string(by) +
           " found that the ranks called different collectives or passed different tensors, "
           "where the steps the ranks take differ, so the group's collectives are out of step "
           "(COMMUX_CHECK_COLLECTIVES=1 makes every rank check every collective, so that such "
           "a mismatch fails every rank alike and the group goes on)";
  }
  return "rank " + std::to_string(by) +
         " left a shared-memory collective half way (timed out, aborted or group destroyed), so "
         "the group's collectives are out of step";
}

bool Steps::broken() const noexcept {
  return __atomic_load_n(&header_->brokenBy, __ATOMIC_ACQUIRE) != 0;
}

void Steps::abandon() {
  std::uint32_t none = 0;
  __atomic_compare_exchange_n(&header_->brokenBy, &none,
                              static_cast<std::uint32_t>(groupRank(rank_)) + 1, false,
                              __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  signal_->ring();
}

void Steps::peerDied(int rank, const std::string& why) {
  int none = -1;
  if (dead_.compare_exchange_strong(none, rank) && !why.empty()) {
    std::lock_guard<std::mutex> lock(deadMutex_);
    deadWhy_ = why;
  }
  // The dead rank cannot mark the channel itself; break it in its name, and say so to the
  // survivors whose own watch has not told them yet.
  std::uint32_t nobody = 0;
  const bool left = why.rfind(core::kClosedByPeer, 0) == 0;
  __atomic_compare_exchange_n(&header_->deadRank, &nobody,
                              (static_cast<std::uint32_t>(rank) + 1) | (left ? layout::kLeftBit : 0),
                              false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  nobody = 0;
  __atomic_compare_exchange_n(&header_->brokenBy, &nobody, static_cast<std::uint32_t>(rank) + 1,
                              false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  signal_->ring();
}

void Steps::stop() {
  stopped_.store(true);
  signal_->ring();  // a runner asleep on the signal re-checks and sees the stop
}

std::uint32_t Steps::Control::*Steps::field(Phase phase) const noexcept {
  switch (phase) {
    case Phase::Arrived:
      return &Control::arrived;
    case Phase::Reduced:
      return &Control::reduced;
    case Phase::Departed:
      return &Control::departed;
  }
  return &Control::departed;
}

char* Steps::slot(std::uint32_t s, int rank) const noexcept {
  const auto r = static_cast<std::size_t>(rank);
  // depth is a power of two (checked at construction): a mask, not a division, per lookup.
  if (stepSmall_[s % kMaxDepth])
    return small_ + ((s & (shape_.depth - 1u)) * shape_.size + r) * smallSlot_;
  return slots_ + ((s & 1u) * shape_.size + r) * shape_.slotBytes;
}

std::uint32_t Steps::beginStep(const Turn& turn, bool small) {
  const std::uint32_t s = ++step_;
  stepSmall_[s % kMaxDepth] = small;
  // The last step that used this step's slots, and (depth <= kMaxDepth) its descriptors.
  waitAll(Phase::Departed, s - (small ? shape_.depth : 2u), turn);
  return s;
}

void Steps::meet(std::uint32_t s, const Turn& turn, bool first) {
  arrive(s, turn, Role::Meet, -1, 0);
  waitAll(Phase::Arrived, s, turn);
  for (int r = 0; r < shape_.size; ++r) checkInStep(s, r, turn);
  if (first) checkAgreement(s, turn, -1);
}

void Steps::lead(std::uint32_t s, const Turn& turn, bool first, std::uint32_t steps) {
  if (first && shape_.checkAll) {
    meet(s, turn, first);
    return;
  }
  arrive(s, turn, Role::Lead, -1, steps);
}

void Steps::follow(std::uint32_t s, const Turn& turn, int from, bool first, std::uint32_t steps) {
  if (first && shape_.checkAll) {
    meet(s, turn, first);
    return;
  }
  arrive(s, turn, Role::Follow, from, steps);
  waitOne(Phase::Arrived, s, from, turn);
  checkInStep(s, from, turn);
  if (first) checkAgreement(s, turn, from);
}

void Steps::mark(Phase phase, std::uint32_t s) {
  __atomic_store_n(&(controls_[rank_].*field(phase)), s, __ATOMIC_SEQ_CST);
  signal_->ring();
}

void Steps::arrive(std::uint32_t s, const Turn& turn, Role role, int from, std::uint32_t steps) {
  Control& mine = controls_[rank_];
  const unsigned set = s % kMaxDepth;
  const Job& job = turn.job;
  mine.role[set] = static_cast<std::uint32_t>(role);
  mine.from[set] = from;
  mine.steps[set] = steps;
  mine.seq[set] = seq_;
  mine.kind[set] = static_cast<std::uint32_t>(job.kind);
  mine.reduce[set] = reduces(job.kind) ? static_cast<std::uint32_t>(job.reduce) : 0;
  mine.root[set] = hasRoot(job.kind) ? job.root : 0;
  mine.dtype[set] = core::typeCode(job.typed());
  mine.count[set] = job.blockCount();
  mark(Phase::Arrived, s);
}

bool Steps::interrupted(const Turn& turn) const {
  return turn.op.finished() || stopped_.load() || broken() ||
         std::chrono::steady_clock::now() >= turn.deadline || leftBefore(turn) >= 0;
}

void Steps::markLeft(int rank, std::uint32_t through, const std::string& why) {
  if (!why.empty()) {
    std::lock_guard<std::mutex> lock(deadMutex_);
    leftWhy_.emplace(rank, why);
  }
  // Of several that left, the earliest `through` stays: every collective from it on lacks
  // that member, and those before it had every member's part (wrap-safe compare).
  const std::uint64_t left = (std::uint64_t{static_cast<std::uint32_t>(rank) + 1} << 32) | through;
  std::uint64_t seen = __atomic_load_n(&header_->left, __ATOMIC_ACQUIRE);
  while ((seen == 0 || static_cast<std::int32_t>(through - static_cast<std::uint32_t>(seen)) < 0) &&
         !__atomic_compare_exchange_n(&header_->left, &seen, left, false, __ATOMIC_SEQ_CST,
                                      __ATOMIC_SEQ_CST)) {
  }
  signal_->ring();
}

int Steps::leftBefore(const Turn& turn) const { return leftBefore(turn.op.sequence()); }

int Steps::leftBefore(std::optional<std::uint32_t> sequence) const noexcept {
  const std::uint64_t left = __atomic_load_n(&header_->left, __ATOMIC_ACQUIRE);
  if (left == 0) return -1;
  const auto through = static_cast<std::uint32_t>(left);
  if (sequence && static_cast<std::int32_t>(*sequence - through) < 0) return -1;
  return static_cast<int>(left >> 32) - 1;
}

// The conditions below capture one reference or a pointer and a step: small enough for
// std::function to hold without allocating (two waits on every small collective's path).
void Steps::waitAll(Phase phase, std::uint32_t s, const Turn& turn) {
  struct Scan {
    const Steps& steps;
    const std::uint32_t Control::*reachedBy;
    std::uint32_t s;
    int next = 0;  // ranks before this one are known to be there
    bool operator()() {
      for (; next < steps.shape_.size; ++next) {
        if (!layout::reached(__atomic_load_n(&(steps.controls_[next].*reachedBy), __ATOMIC_ACQUIRE),
                             s)) {
          return false;
        }
      }
      return true;
    }
  } scan{*this, field(phase), s};
  const bool ok = signal_->waitFor([&scan] { return scan(); }, [&] { return interrupted(turn); });
  if (!ok) leave(turn);
}

void Steps::waitOne(Phase phase, std::uint32_t s, int index, const Turn& turn) {
  const std::uint32_t* word = &(controls_[index].*field(phase));
  const bool ok = signal_->waitFor(
      [word, s] { return layout::reached(__atomic_load_n(word, __ATOMIC_ACQUIRE), s); },
      [&] { return interrupted(turn); });
  if (!ok) leave(turn);
}

void Steps::leave(const Turn& turn) {
  const std::string what = turn.op.description();
  if (const int dead = deadRank(); dead >= 0) {
    // With why this process heard of it (its own watch, or whose notice told it), as the
    // group's other errors say it: which of them a collective ends with is a race.
    COMMUX_FAIL(Backend, "commux: " + what + ": " + lost(dead) +
                             " during this shared-memory collective");
  }
  if (const int left = leftBefore(turn); left >= 0) {
    // Every member fails this collective alike (each sees the mark), and none of those
    // before it: the channel is not broken, so no abandon.
    COMMUX_FAIL(Backend, "commux: " + what + ": " + leftMessage(left));
  }
  const std::uint32_t by = __atomic_load_n(&header_->brokenBy, __ATOMIC_ACQUIRE);
  if (by != 0 && by != static_cast<std::uint32_t>(groupRank(rank_)) + 1) {
    if (__atomic_load_n(&header_->mismatchBy, __ATOMIC_ACQUIRE) == by) {
      COMMUX_FAIL(Backend, "commux: " + what + ": " + brokenBecause(static_cast<int>(by) - 1) +
                               "; create a new group to go on");
    }
    COMMUX_FAIL(Backend, "commux: " + what + ": rank " + std::to_string(by - 1) +
                             " left the shared-memory channel half way (its operation timed out or "
                             "was aborted, or its group was destroyed), so the group's collectives "
                             "are out of step; create a new group to go on");
  }
  // This rank leaves: the others must not wait for it any longer.
  abandon();
  if (!turn.op.finished() && !stopped_.load() &&
      std::chrono::steady_clock::now() >= turn.deadline) {
    throw DeadlineReached{};
  }
  COMMUX_FAIL(Backend,
              "commux: " + what + ": abandoned half way (timed out, aborted or group destroyed)");
}

void Steps::publish(std::uint32_t s, const void* buffer) {
  controls_[rank_].address[s % kMaxDepth] = reinterpret_cast<std::uintptr_t>(buffer);
}

void Steps::readFrom(std::uint32_t s, int rank, std::size_t offset, void* to, std::size_t bytes,
                     const Turn& turn) {
  if (bytes == 0) return;
  const Control& owner = controls_[rank];
  const char* from = reinterpret_cast<const char*>(owner.address[s % kMaxDepth]) + offset;
  if (rank == rank_) {
    std::memmove(to, from, bytes);
    return;
  }
  if (cmaRead(owner.pid, from, to, bytes)) {
    // An owner that leaves half way (timed out, aborted) gets its buffer back at once and
    // may write to it, or free it, while this rank still reads: what was read is only good
    // if the owner had not left by the end of the read. It marks the channel broken before
    // it leaves, so a look after the read tells (the interleaving test found this).
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (broken() || leftBefore(turn) >= 0) {
      mark(Phase::Departed, s);
      leave(turn);
    }
    return;
  }
  const std::string why = std::generic_category().message(errno);
  // Leave the step so nobody waits for this rank, and stop the group's collectives: this
  // rank's result is missing, the others' are not.
  mark(Phase::Departed, s);
  abandon();
  COMMUX_FAIL(Backend,
              "commux: " + turn.op.description() + ": reading " + std::to_string(bytes) +
                  " bytes from rank " + std::to_string(groupRank(rank)) +
                  " (process_vm_readv) failed: " + why +
                  "; set COMMUX_SHM_CMA_BYTES=0 to copy through the shared segment instead");
}

void Steps::checkInStep(std::uint32_t s, int index, const Turn& turn) {
  if (controls_[index].seq[s % kMaxDepth] == seq_) return;
  const std::string why = breakOverMismatch();
  COMMUX_FAIL(Backend,
              "commux: " + turn.op.description() + ": rank " + std::to_string(groupRank(index)) +
                  " reached this step in another collective than this rank: an earlier "
                  "collective was called differently on the ranks (a mismatch that no rank "
                  "could see then, e.g. two ranks that both took themselves for the root); " +
                  why);
}

std::string Steps::breakOverMismatch() {
  const std::uint32_t me = static_cast<std::uint32_t>(groupRank(rank_)) + 1;
  std::uint32_t none = 0;
  __atomic_compare_exchange_n(&header_->mismatchBy, &none, me, false, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  none = 0;
  __atomic_compare_exchange_n(&header_->brokenBy, &none, me, false, __ATOMIC_SEQ_CST,
                              __ATOMIC_SEQ_CST);
  signal_->ring();
  return brokenBecause(groupRank(rank_));
}

void Steps::checkAgreement(std::uint32_t s, const Turn& turn, int from) {
  const unsigned set = s % kMaxDepth;
  const auto same = [&](const Control& a, const Control& b) {
    return a.kind[set] == b.kind[set] && a.root[set] == b.root[set] &&
           a.count[set] == b.count[set] && a.dtype[set] == b.dtype[set] &&
           a.reduce[set] == b.reduce[set];
  };
  const Control& mine = controls_[rank_];
  bool agree = true;
  for (int r = 0; r < shape_.size && agree; ++r) {
    if (from < 0 || r == from) agree = same(controls_[r], mine);
  }
  if (agree) return;
  std::string ranks;
  for (int r = 0; r < shape_.size; ++r) {
    if (from >= 0 && r != from && r != rank_) continue;
    const Control& c = controls_[r];
    const auto kind = static_cast<Kind>(c.kind[set]);
    ranks += (ranks.empty() ? "rank " : "; rank ") + std::to_string(groupRank(r)) + ": " +
             kindName(kind);
    if (hasRoot(kind)) {
      ranks += " root " + std::to_string(c.root[set]);
    }
    ranks += ", " + std::to_string(c.count[set]) + " x " + core::typeCodeName(c.dtype[set]);
    if (reduces(kind)) {
      ranks += std::string(" ") + core::nameOf(static_cast<core::ReduceOp>(c.reduce[set]));
    }
  }
  // Where this rank's part of the collective ends so that the channel stays in step. A
  // rank that meets (waits for every rank and checks them all) fails at this step, as this
  // one does; one that leads (a broadcast's root, a reduce's other ranks) goes on to the
  // end of its own collective; one that follows goes on to its end if it agrees with the
  // rank it follows, else ends where that one ends. So when every rank meets, all fail here
  // (what COMMUX_CHECK_COLLECTIVES makes sure of). A follower that found the mismatch ends
  // where the rank it follows ends. A rank that met them all ends where every rank that
  // does not meet ends, if they all end at the same step. Otherwise the ranks end at
  // different steps (or this rank cannot tell where) and the channel breaks, naming this
  // rank and why.
  const auto role = [&](const Control& c) { return static_cast<Role>(c.role[set]); };
  const auto stepsOf = [&](int r) -> std::uint32_t {  // 0: cannot tell
    const Control& c = controls_[r];
    switch (role(c)) {
      case Role::Meet:
        return 1;
      case Role::Lead:
        return c.steps[set];
      case Role::Follow: {
        const int f = c.from[set];
        if (f < 0 || f >= shape_.size || f == r) return 0;
        const Control& followed = controls_[f];
        if (same(c, followed)) return c.steps[set];
        if (role(followed) == Role::Lead) return followed.steps[set];
        return role(followed) == Role::Meet ? 1 : 0;
      }
    }
    return 0;
  };
  std::uint32_t steps = 1;
  bool inStep = true;
  if (from >= 0) {
    steps = stepsOf(rank_);
  } else {
    std::uint32_t others = 0;  // where the ranks that do not meet end
    for (int r = 0; r < shape_.size && inStep; ++r) {
      if (role(controls_[r]) == Role::Meet) continue;
      const std::uint32_t end = stepsOf(r);
      if (end == 0 || (others != 0 && end != others)) inStep = false;
      others = end;
    }
    if (others != 0) steps = others;
  }
  if (steps == 0) inStep = false;  // all_to_all does not know its steps before it meets
  if (!inStep) {
    breakOverMismatch();
    steps = 1;
  }
  step_ = s + steps - 1;
  mark(Phase::Reduced, step_);
  mark(Phase::Departed, step_);
  COMMUX_FAIL(InvalidArgument, "commux: " + turn.op.description() +
                                   ": the ranks called different collectives or passed different "
                                   "tensors (" +
                                   ranks +
                                   "); every rank must call the same collective, with the same "
                                   "root, op, dtype and number of elements per rank" +
                                   (inStep ? "" : "; " + brokenBecause(groupRank(rank_))));
}

}  // namespace commux::shm
