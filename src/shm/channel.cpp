#include "shm/channel.hpp"

#include <unistd.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "collectives/schedule.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/channel_layout.hpp"
#include "shm/collective_op.hpp"

namespace commux::shm {
namespace {

struct DeadlineReached {};

}  // namespace

std::size_t Channel::controlsOffset() { return layout::roundUp(sizeof(Header), layout::kLine); }

std::size_t Channel::slotsOffset(int size) {
  return layout::roundUp(controlsOffset() + static_cast<std::size_t>(size) * sizeof(Control), layout::kPage);
}

std::size_t Channel::segmentBytes(const ChannelShape& shape) {
  return slotsOffset(shape.size) + 2 * static_cast<std::size_t>(shape.size) * shape.slotBytes;
}

Channel::Channel(std::unique_ptr<Segment> segment, int rank, const ChannelShape& shape,
                 bool initialise, std::shared_ptr<engine::Engine> engine,
                 std::vector<int> members)
    : segment_(std::move(segment)),
      rank_(rank),
      shape_(shape),
      members_(std::move(members)),
      header_(reinterpret_cast<Header*>(segment_->data())),
      controls_(reinterpret_cast<Control*>(segment_->data() + controlsOffset())),
      slots_(segment_->data() + slotsOffset(shape.size)),
      bell_(&header_->bell, shape.spin),
      engine_(std::move(engine)),
      lane_([this](const std::shared_ptr<CollectiveOp>& op, std::chrono::steady_clock::time_point deadline,
                   bool onLane, bool mine) { return runOne(op, deadline, onLane, mine); },
            "commux-shm") {
  TORCH_CHECK(segment_->size() >= segmentBytes(shape), "commux: shared-memory segment ",
              segment_->name(), " is too small for ", shape.size, " ranks");
  if (initialise) {
    header_->size = static_cast<std::uint32_t>(shape.size);
    header_->slotBytes = shape.slotBytes;
    header_->cmaBytes = shape.cmaBytes;
    __atomic_store_n(&header_->magic, layout::kMagic, __ATOMIC_RELEASE);
  } else {
    TORCH_CHECK(__atomic_load_n(&header_->magic, __ATOMIC_ACQUIRE) == layout::kMagic &&
                    header_->size == static_cast<std::uint32_t>(shape.size) &&
                    header_->slotBytes == shape.slotBytes && header_->cmaBytes == shape.cmaBytes,
                "commux: shared-memory segment ", segment_->name(),
                " does not match this rank's layout (", shape.size, " ranks, ", shape.slotBytes,
                "-byte slots, CMA from ", shape.cmaBytes, " bytes); do all ranks run the same "
                "commux with the same COMMUX_SHM_* settings?");
  }
  controls_[rank_].pid = static_cast<std::int32_t>(::getpid());
  // The engine's hand-off: the lane's thread takes over what no waiter ran.
  hook_ = engine_->addHandOffHook([this] { lane_.wake(); });
}

Channel::~Channel() {
  engine_->removeHandOffHook(hook_);
  // Queued operations still run when the group goes away: their waits end at once
  // (stopFlag_), which marks the channel broken for the peers.
  stopFlag_.store(true);
  bell_.ring();  // a holder asleep on the bell re-checks and sees the stop
  // The lane may drop the last reference to a tensor owned by a Python object, which needs
  // the GIL; a group destroyed from Python holds it here.
  lane_.stop([](std::thread& thread) {
    engine::Engine::runBlocking([](void* t) { static_cast<std::thread*>(t)->join(); }, &thread);
  });
}

int Channel::deadRank() const noexcept {
  if (const int dead = dead_.load(); dead >= 0) return dead;
  return static_cast<int>(__atomic_load_n(&header_->deadRank, __ATOMIC_ACQUIRE)) - 1;
}

std::string Channel::brokenReason() const {
  if (const int dead = deadRank(); dead >= 0) {
    return "rank " + std::to_string(dead) + " died";
  }
  const std::uint32_t by = __atomic_load_n(&header_->brokenBy, __ATOMIC_ACQUIRE);
  if (by == 0) return "";
  return "rank " + std::to_string(by - 1) +
         " left a shared-memory collective half way (timed out, aborted or group destroyed), so "
         "the group's collectives are out of step";
}

bool Channel::broken() const noexcept {
  return __atomic_load_n(&header_->brokenBy, __ATOMIC_ACQUIRE) != 0;
}

void Channel::abandon() {
  std::uint32_t none = 0;
  __atomic_compare_exchange_n(&header_->brokenBy, &none,
                              static_cast<std::uint32_t>(groupRank(rank_)) + 1,
                              false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  bell_.ring();
}

void Channel::peerDied(int rank) {
  int none = -1;
  dead_.compare_exchange_strong(none, rank);
  // The dead rank cannot mark the channel itself; break it in its name, and say so to the
  // survivors whose own watch has not told them yet.
  std::uint32_t nobody = 0;
  __atomic_compare_exchange_n(&header_->deadRank, &nobody, static_cast<std::uint32_t>(rank) + 1,
                              false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  nobody = 0;
  __atomic_compare_exchange_n(&header_->brokenBy, &nobody, static_cast<std::uint32_t>(rank) + 1,
                              false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
  bell_.ring();
}

void Channel::enqueue(std::shared_ptr<CollectiveOp> op) {
  // A caller that waits right away runs the operation itself (runFromWaiter), which saves
  // waking the lane's thread and handing the result back; the engine's hand-off wakes it
  // for operations nobody waits on, as it does for UCX operations. An operation started by
  // another thread (the progress thread or a parked waiter ran its queued start: the
  // worker lock was taken, or it waited for a CUDA stream) may already have a waiter that
  // looked for it and went to sleep: the lane's thread runs it now.
  lane_.push(std::move(op), !engine::Engine::startingForCaller());
}

void Channel::runFromWaiter(const std::shared_ptr<CollectiveOp>& op,
                            std::chrono::steady_clock::time_point deadline) {
  lane_.runFromWaiter(op, deadline);
}

std::function<void()> Channel::runOne(const std::shared_ptr<CollectiveOp>& op,
                                      std::chrono::steady_clock::time_point deadline,
                                      bool onLane, bool mine) {
  // Buffers may be views of tensors that require grad; communication is not autograd's
  // business (grad mode is per thread: a waiter's may be on, and a new thread's is).
  const at::NoGradGuard noGrad;
  // The lane's thread never drives the worker, so never runs a user callback or future.
  std::optional<engine::Engine::NeverDrives> neverDrives;
  if (onLane) neverDrives.emplace();
  deadline_ = deadline;
  std::exception_ptr error;
  try {
    run(*op);
    op->markRan();
    if (!op->finished()) op->finalize();
  } catch (const DeadlineReached&) {
    if (mine) return {};  // the waiter's own timeout reports it
    op->markRan();
    error = engine::commError("commux: " + op->description() +
                              ": abandoned half way: a later collective ran it on a waiting "
                              "thread whose wait timed out");
  } catch (...) {
    op->markRan();
    error = std::current_exception();
  }
  // The waiter's own operation is reported on its thread once it let go of the lane (the
  // report may run future callbacks that wait for a later collective of this channel);
  // others' by the driver, as the lane's thread does.
  auto report = [engine = engine_, op, error](engine::Engine::Drive drive) {
    try {
      engine->finish(op, error, drive);
    } catch (...) {
      // The engine has shut down; it failed the operation already.
    }
  };
  if (onLane || !mine) {
    report(engine::Engine::Drive::Never);
    return {};
  }
  return [report] { report(engine::Engine::Drive::IfFree); };
}

// Here, not in channel_hierarchy.cpp: it ends the way a wait in the channel ends.
void Channel::runCross(const HostParts& hierarchy, const at::Tensor& buffer, CollectiveOp& op) {
  // The waiter running this ran out of time, as a wait in the channel would (waitAll).
  if (!hierarchy.cross(buffer, op, deadline_)) throw DeadlineReached{};
}

char* Channel::slot(std::uint32_t s, int rank) const noexcept {
  return slots_ + ((s & 1u) * shape_.size + static_cast<std::size_t>(rank)) * shape_.slotBytes;
}

void Channel::mark(std::uint32_t Control::*field, std::uint32_t s) {
  __atomic_store_n(&(controls_[rank_].*field), s, __ATOMIC_SEQ_CST);
  bell_.ring();
}

void Channel::arrive(std::uint32_t s, const CollectiveOp& op) {
  Control& mine = controls_[rank_];
  const unsigned parity = s & 1u;
  const Job& job = op.job();
  mine.kind[parity] = static_cast<std::uint32_t>(job.kind);
  mine.reduce[parity] = reduces(job.kind) ? static_cast<std::uint32_t>(job.reduce) : 0;
  mine.root[parity] = hasRoot(job.kind) ? job.root : 0;
  mine.dtype[parity] = static_cast<std::uint32_t>(job.dtype());
  mine.count[parity] = job.blockCount();
  mark(&Control::arrived, s);
}

void Channel::waitAll(std::uint32_t Control::*field, std::uint32_t s, CollectiveOp& op) {
  int next = 0;  // ranks before this one are known to be there
  const bool ok = bell_.waitFor(
      [&] {
        for (; next < shape_.size; ++next) {
          if (!layout::reached(__atomic_load_n(&(controls_[next].*field), __ATOMIC_ACQUIRE), s)) {
            return false;
          }
        }
        return true;
      },
      [&] {
        return op.finished() || stopFlag_.load() || broken() ||
               std::chrono::steady_clock::now() >= deadline_;
      });
  if (ok) return;
  if (const int dead = deadRank(); dead >= 0) {
    C10_THROW_ERROR(DistBackendError, "commux: " + op.description() + ": rank " +
                                          std::to_string(dead) +
                                          " died during this shared-memory collective");
  }
  const std::uint32_t by = __atomic_load_n(&header_->brokenBy, __ATOMIC_ACQUIRE);
  if (by != 0 && by != static_cast<std::uint32_t>(groupRank(rank_)) + 1) {
    C10_THROW_ERROR(DistBackendError,
                    "commux: " + op.description() + ": rank " + std::to_string(by - 1) +
                        " left the shared-memory channel half way (its operation timed out or "
                        "was aborted, or its group was destroyed), so the group's collectives "
                        "are out of step; create a new group to go on");
  }
  // This rank leaves: the others must not wait for it any longer.
  abandon();
  if (!op.finished() && !stopFlag_.load() && std::chrono::steady_clock::now() >= deadline_) {
    throw DeadlineReached{};
  }
  C10_THROW_ERROR(DistBackendError, "commux: " + op.description() +
                                        ": abandoned half way (timed out, aborted or group "
                                        "destroyed)");
}

void Channel::checkAgreement(std::uint32_t s, CollectiveOp& op) {
  const unsigned parity = s & 1u;
  const Control& first = controls_[0];
  bool agree = true;
  for (int r = 1; r < shape_.size && agree; ++r) {
    const Control& c = controls_[r];
    agree = c.kind[parity] == first.kind[parity] && c.root[parity] == first.root[parity] &&
            c.count[parity] == first.count[parity] && c.dtype[parity] == first.dtype[parity] &&
            c.reduce[parity] == first.reduce[parity];
  }
  if (agree) return;
  // Every rank sees the same descriptors and fails the same step, so the channel stays in
  // step and the group keeps working.
  std::string ranks;
  for (int r = 0; r < shape_.size; ++r) {
    const Control& c = controls_[r];
    const auto kind = static_cast<Kind>(c.kind[parity]);
    ranks += (r ? "; rank " : "rank ") + std::to_string(groupRank(r)) + ": " + kindName(kind);
    if (hasRoot(kind)) {
      ranks += " root " + std::to_string(c.root[parity]);
    }
    ranks += ", " + std::to_string(c.count[parity]) + " x " +
             c10::toString(static_cast<c10::ScalarType>(c.dtype[parity]));
    if (reduces(kind)) {
      ranks += std::string(" ") +
               engine::reduceKindName(static_cast<engine::ReduceKind>(c.reduce[parity]));
    }
  }
  mark(&Control::reduced, s);
  mark(&Control::departed, s);
  C10_THROW_ERROR(ValueError, "commux: " + op.description() +
                                  ": the ranks called different collectives or passed different "
                                  "tensors (" + ranks +
                                  "); every rank must call the same collective, with the same "
                                  "root, op, dtype and number of elements per rank");
}

}  // namespace commux::shm
