#include "shm/channel.hpp"

#include <pthread.h>

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cstring>

#include "collectives/schedule.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "shm/allreduce_op.hpp"

namespace commux::shm {
namespace {

constexpr std::uint32_t kMagic = 0x4d48534d;  // "MSHM"
constexpr std::size_t kLine = 64;
constexpr std::size_t kPage = 4096;

struct DeadlineReached {};

std::size_t roundUp(std::size_t x, std::size_t to) { return (x + to - 1) / to * to; }

// Wrap-safe "a is at or past b" for step numbers.
bool reached(std::uint32_t a, std::uint32_t b) { return static_cast<std::int32_t>(a - b) >= 0; }

}  // namespace

struct alignas(kLine) Channel::Header {
  std::uint32_t magic;
  std::uint32_t size;
  std::uint64_t slotBytes;
  std::uint32_t brokenBy;  // 0, or 1 + the rank that abandoned a collective
  std::uint32_t deadRank;  // 0, or 1 + a rank some survivor found dead
  alignas(kLine) BellWords bell;
};

// One per rank, on its own cache line. Steps a rank has reached in each phase, and what it
// brought to the step (per parity, so a fast rank's next step never overwrites a
// descriptor a slow rank still compares).
struct alignas(kLine) Channel::Control {
  std::uint32_t arrived;
  std::uint32_t reduced;
  std::uint32_t departed;
  std::uint32_t kind[2];
  std::uint32_t dtype[2];
  std::uint64_t count[2];
};

std::size_t Channel::controlsOffset() { return roundUp(sizeof(Header), kLine); }

std::size_t Channel::slotsOffset(int size) {
  return roundUp(controlsOffset() + static_cast<std::size_t>(size) * sizeof(Control), kPage);
}

std::size_t Channel::segmentBytes(const ChannelShape& shape) {
  return slotsOffset(shape.size) + 2 * static_cast<std::size_t>(shape.size) * shape.slotBytes;
}

Channel::Channel(std::unique_ptr<Segment> segment, int rank, const ChannelShape& shape,
                 bool initialise, std::shared_ptr<engine::Engine> engine)
    : segment_(std::move(segment)),
      rank_(rank),
      shape_(shape),
      header_(reinterpret_cast<Header*>(segment_->data())),
      controls_(reinterpret_cast<Control*>(segment_->data() + controlsOffset())),
      slots_(segment_->data() + slotsOffset(shape.size)),
      bell_(&header_->bell, shape.spin),
      engine_(std::move(engine)) {
  TORCH_CHECK(segment_->size() >= segmentBytes(shape), "commux: shared-memory segment ",
              segment_->name(), " is too small for ", shape.size, " ranks");
  if (initialise) {
    header_->size = static_cast<std::uint32_t>(shape.size);
    header_->slotBytes = shape.slotBytes;
    __atomic_store_n(&header_->magic, kMagic, __ATOMIC_RELEASE);
  } else {
    TORCH_CHECK(__atomic_load_n(&header_->magic, __ATOMIC_ACQUIRE) == kMagic &&
                    header_->size == static_cast<std::uint32_t>(shape.size) &&
                    header_->slotBytes == shape.slotBytes,
                "commux: shared-memory segment ", segment_->name(),
                " does not match this rank's layout (", shape.size, " ranks, ", shape.slotBytes,
                "-byte slots); do all ranks run the same commux with the same COMMUX_SHM_* "
                "settings?");
  }
  lane_ = std::thread([this] { runLane(); });
  hook_ = engine_->addHandOffHook([this] { kick(); });
}

Channel::~Channel() {
  engine_->removeHandOffHook(hook_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stopFlag_.store(true);
  cv_.notify_all();
  bell_.ring();  // a lane asleep on the bell re-checks and sees the stop
  // The lane may drop the last reference to a tensor owned by a Python object, which needs
  // the GIL; a group destroyed from Python holds it here.
  engine::Engine::runBlocking([](void* lane) { static_cast<std::thread*>(lane)->join(); }, &lane_);
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
  __atomic_compare_exchange_n(&header_->brokenBy, &none, static_cast<std::uint32_t>(rank_) + 1,
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

void Channel::enqueue(std::shared_ptr<AllreduceOp> op) {
  // No wake-up here: a caller that waits right away runs the operation itself (assist),
  // which saves waking the lane and handing the result back. The engine's hand-off (kick)
  // wakes the lane for operations nobody waits on, as it does for UCX operations.
  std::lock_guard<std::mutex> lock(mutex_);
  queue_.push_back(std::move(op));
}

void Channel::kick() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (queue_.empty() || kicked_) return;
    kicked_ = true;
    // A waiter running operations inline hands the rest to the lane when it stops (see
    // runFromWaiter); a kick it did not see would otherwise be lost.
    if (busy_) return;
  }
  cv_.notify_one();
}

void Channel::runFromWaiter(std::shared_ptr<AllreduceOp> op,
                            std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (busy_ || stopping_ || std::find(queue_.begin(), queue_.end(), op) == queue_.end()) return;
  busy_ = true;
  // Grad mode is per thread: the caller's may be on.
  const at::NoGradGuard noGrad;
  for (bool mine = false; !mine;) {
    auto next = std::move(queue_.front());
    queue_.pop_front();
    mine = next == op;
    lock.unlock();
    runOne(next, deadline, mine, /*drive=*/true);
    lock.lock();
  }
  busy_ = false;
  const bool more = !queue_.empty() && kicked_;
  lock.unlock();
  if (more) cv_.notify_one();
}

void Channel::runLane() {
  pthread_setname_np(pthread_self(), "commux-shm");
  // Buffers may be views of tensors that require grad; communication is not autograd's
  // business (grad mode is per thread, and on by default on a new one).
  const at::NoGradGuard noGrad;
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    if (!busy_ && !queue_.empty() && (kicked_ || stopping_)) {
      auto op = std::move(queue_.front());
      queue_.pop_front();
      busy_ = true;
      lock.unlock();
      // Queued operations still run when the group goes away: their waits end at once
      // (stopFlag_), which marks the channel broken for the peers.
      runOne(op, std::chrono::steady_clock::time_point::max(), false, /*drive=*/false);
      op.reset();
      lock.lock();
      busy_ = false;
      continue;
    }
    if (queue_.empty()) kicked_ = false;
    if (stopping_ && queue_.empty() && !busy_) return;
    cv_.wait(lock);
  }
}

bool Channel::runOne(const std::shared_ptr<AllreduceOp>& op,
                     std::chrono::steady_clock::time_point deadline, bool mine, bool drive) {
  deadline_ = deadline;
  std::exception_ptr error;
  try {
    allreduce(*op);
    op->markRan();
    if (!op->finished()) op->finalize();
  } catch (const DeadlineReached&) {
    if (mine) return false;  // the waiter's own timeout reports it
    op->markRan();
    error = engine::commError("commux: " + op->description() +
                              ": abandoned half way: a later allreduce ran it on a waiting thread "
                              "whose wait timed out");
  } catch (...) {
    op->markRan();
    error = std::current_exception();
  }
  try {
    engine_->finish(op, error, drive);
  } catch (...) {
    // The engine has shut down; it failed the operation already.
  }
  return true;
}

char* Channel::slot(std::uint32_t s, int rank) const noexcept {
  return slots_ + ((s & 1u) * shape_.size + static_cast<std::size_t>(rank)) * shape_.slotBytes;
}

void Channel::mark(std::uint32_t Control::*field, std::uint32_t s) {
  __atomic_store_n(&(controls_[rank_].*field), s, __ATOMIC_SEQ_CST);
  bell_.ring();
}

void Channel::arrive(std::uint32_t s, const AllreduceOp& op) {
  Control& mine = controls_[rank_];
  const unsigned parity = s & 1u;
  mine.count[parity] = static_cast<std::uint64_t>(op.work().numel());
  mine.dtype[parity] = static_cast<std::uint32_t>(op.work().scalar_type());
  mine.kind[parity] = static_cast<std::uint32_t>(op.kind());
  mark(&Control::arrived, s);
}

void Channel::waitAll(std::uint32_t Control::*field, std::uint32_t s, AllreduceOp& op) {
  int next = 0;  // ranks before this one are known to be there
  const bool ok = bell_.waitFor(
      [&] {
        for (; next < shape_.size; ++next) {
          if (!reached(__atomic_load_n(&(controls_[next].*field), __ATOMIC_ACQUIRE), s)) {
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
  if (by != 0 && by != static_cast<std::uint32_t>(rank_) + 1) {
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

void Channel::checkAgreement(std::uint32_t s, AllreduceOp& op) {
  const unsigned parity = s & 1u;
  const Control& first = controls_[0];
  bool agree = true;
  for (int r = 1; r < shape_.size && agree; ++r) {
    const Control& c = controls_[r];
    agree = c.count[parity] == first.count[parity] && c.dtype[parity] == first.dtype[parity] &&
            c.kind[parity] == first.kind[parity];
  }
  if (agree) return;
  // Every rank sees the same descriptors and fails the same step, so the channel stays in
  // step and the group keeps working.
  std::string ranks;
  for (int r = 0; r < shape_.size; ++r) {
    const Control& c = controls_[r];
    ranks += (r ? ", rank " : "rank ") + std::to_string(r) + ": " +
             std::to_string(c.count[parity]) + " x " +
             c10::toString(static_cast<c10::ScalarType>(c.dtype[parity])) + " " +
             engine::reduceKindName(static_cast<engine::ReduceKind>(c.kind[parity]));
  }
  mark(&Control::reduced, s);
  mark(&Control::departed, s);
  C10_THROW_ERROR(ValueError, "commux: " + op.description() +
                                  ": the ranks passed different tensors or operations (" + ranks +
                                  "); every rank must allreduce the same number of elements of "
                                  "the same dtype with the same op");
}

void Channel::allreduce(AllreduceOp& op) {
  if (broken()) C10_THROW_ERROR(DistBackendError, "commux: " + op.description() + ": " + brokenReason());
  const std::size_t bytes = static_cast<std::size_t>(op.work().numel()) * op.work().element_size();
  if (bytes <= shape_.smallBytes) {
    allreduceSmall(op);
  } else {
    allreduceChunked(op);
  }
}

namespace {

at::Tensor view(char* data, std::size_t count, const at::Tensor& like) {
  return at::from_blob(data, {static_cast<int64_t>(count)}, like.options());
}

}  // namespace

void Channel::allreduceSmall(AllreduceOp& op) {
  const at::Tensor& work = op.work();
  const std::size_t count = static_cast<std::size_t>(work.numel());
  const std::size_t bytes = count * work.element_size();
  const std::uint32_t s = ++step_;
  waitAll(&Control::departed, s - 2, op);
  if (bytes != 0) std::memcpy(slot(s, rank_), work.data_ptr(), bytes);
  arrive(s, op);
  waitAll(&Control::arrived, s, op);
  checkAgreement(s, op);
  if (count != 0) {
    work.copy_(view(slot(s, 0), count, work));
    for (int q = 1; q < shape_.size; ++q) {
      engine::reduceInto(work, view(slot(s, q), count, work), op.kind());
    }
  }
  mark(&Control::departed, s);
}

void Channel::allreduceChunked(AllreduceOp& op) {
  const at::Tensor& work = op.work();
  const std::size_t count = static_cast<std::size_t>(work.numel());
  const std::size_t elementSize = work.element_size();
  const std::size_t chunk = shape_.slotBytes / elementSize;
  char* const base = static_cast<char*>(work.data_ptr());
  for (std::size_t offset = 0; offset < count; offset += chunk) {
    const std::size_t len = std::min(chunk, count - offset);
    const std::uint32_t s = ++step_;
    waitAll(&Control::departed, s - 2, op);
    std::memcpy(slot(s, rank_), base + offset * elementSize, len * elementSize);
    arrive(s, op);
    waitAll(&Control::arrived, s, op);
    if (offset == 0) checkAgreement(s, op);
    const auto block = collectives::blockRange(len, shape_.size, rank_);
    if (block.count != 0) {
      const at::Tensor acc = view(slot(s, 0) + block.offset * elementSize, block.count, work);
      for (int q = 1; q < shape_.size; ++q) {
        engine::reduceInto(acc, view(slot(s, q) + block.offset * elementSize, block.count, work),
                           op.kind());
      }
    }
    mark(&Control::reduced, s);
    waitAll(&Control::reduced, s, op);
    std::memcpy(base + offset * elementSize, slot(s, 0), len * elementSize);
    mark(&Control::departed, s);
  }
}

}  // namespace commux::shm
