#include "halo/neighbour_exchange.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>

#include "core/error.hpp"
#include "core/group_health.hpp"
#include "core/log.hpp"
#include "engine/description.hpp"
#include "engine/done_flag.hpp"
#include "engine/engine.hpp"
#include "engine/p2p_op.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "group/request.hpp"
#include "shm/channel.hpp"
#include "wire/tag.hpp"

namespace commux::halo {
namespace {

// The bytes of a message, checked before anything is sized by them: a sum that wrapped (two
// pieces of 2^63 and 2^63 + 8 bytes "held" 8) sized a staging buffer that packing then
// overran.
std::size_t totalBytes(const std::vector<Piece>& pieces, int rank, const char* side) {
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    COMMUX_CHECK(p.data != nullptr || p.bytes == 0, InvalidArgument,
                 "commux: neighbourhood exchange: ", side, " piece ", i, " for rank ", rank,
                 " holds ", p.bytes, " bytes at a null address");
    std::uintptr_t end = 0;
    COMMUX_CHECK(!__builtin_add_overflow(reinterpret_cast<std::uintptr_t>(p.data), p.bytes, &end),
                 InvalidArgument, "commux: neighbourhood exchange: ", side, " piece ", i,
                 " for rank ", rank, " (", p.bytes, " bytes at ", p.data,
                 ") runs past the end of memory");
    COMMUX_CHECK(!__builtin_add_overflow(bytes, p.bytes, &bytes) && bytes <= kMaxMessageBytes,
                 InvalidArgument, "commux: neighbourhood exchange: the ", side, " pieces for rank ",
                 rank, " add up to more than ", kMaxMessageBytes, " bytes (piece ", i, " holds ",
                 p.bytes, ")");
  }
  return bytes;
}

// Many short pieces cost UCX more per byte than one copy into a staging buffer does.
bool packs(const std::vector<Piece>& pieces, std::size_t bytes, std::size_t packBelow) {
  std::size_t count = 0;  // empty pieces travel in neither form
  for (const auto& p : pieces) count += p.bytes != 0;
  return count > 1 && bytes / count < packBelow;
}

bool sameShape(const std::vector<Rows>& a, const std::vector<Rows>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].bytes != b[i].bytes || a[i].count != b[i].count) return false;
  }
  return true;
}

// This rank's own message: the bytes of `from`, in order, into `to`. Cut alike (a face and
// the ghost cells it fills): row for row; else piece by piece as the cuts fall.
void copyOwn(const std::vector<Rows>& fromRows, const std::vector<Rows>& toRows,
             const std::vector<Piece>& from, const std::vector<Piece>& to) {
  if (sameShape(fromRows, toRows)) {
    for (std::size_t i = 0; i < fromRows.size(); ++i) {
      copyRows(toRows[i].data, toRows[i].stride, fromRows[i].data, fromRows[i].stride,
               fromRows[i].bytes, fromRows[i].count);
    }
    return;
  }
  std::size_t i = 0, iAt = 0;
  for (const auto& out : to) {
    std::size_t done = 0;
    while (done < out.bytes) {
      while (from[i].bytes == iAt) {
        ++i;
        iAt = 0;
      }
      const std::size_t n = std::min(out.bytes - done, from[i].bytes - iAt);
      std::memcpy(static_cast<char*>(out.data) + done, static_cast<const char*>(from[i].data) + iAt,
                  n);
      done += n;
      iAt += n;
    }
  }
}

engine::P2POp::Buffers buffersOf(const std::vector<Piece>& pieces, char* staging,
                                 std::size_t bytes) {
  engine::P2POp::Buffers buffers;
  if (staging != nullptr) {
    buffers.push_back(core::bufferOf(staging, bytes, core::Dtype::UInt8));
    return buffers;
  }
  buffers.reserve(pieces.size());
  for (const auto& p : pieces) {
    buffers.push_back(core::bufferOf(p.data, p.bytes, core::Dtype::UInt8));
  }
  return buffers;
}

// A new exception of the same kind and message: the Request's own is shared with whichever
// thread drops the Request last, and that reference count is not ordered with this
// thread's reads of it (ThreadSanitizer saw the race).
std::exception_ptr freshCopy(const std::exception_ptr& error) {
  const core::ErrorReading reading = core::readError(error);
  return core::makeError(reading.kind, reading.message, {__func__, __FILE__, __LINE__});
}

constexpr const char* kCancelled =
    "commux: neighbourhood exchange: the step was cancelled (timed out, or its exchange "
    "destroyed)";

// Why a wait for the shared part of step `step` must stop (the group's end, the death of a
// neighbour it still waits for, the deadline), or empty. A neighbour that ended its part and
// then left its group (its last step over, it shut down) is no reason: the step may be
// waiting for another, slower one.
std::string sharedInterruption(const group::Group& group, const SharedSides& sides,
                               std::uint64_t step, std::chrono::steady_clock::time_point deadline,
                               std::chrono::milliseconds timeout) {
  const std::string state = group.stateText();
  if (!state.empty()) return "commux: neighbourhood exchange: " + state;
  for (std::size_t i = 0; i < sides.size(); ++i) {
    const int peer = sides.rank(i);
    const std::string why = group.deadWhy(peer);
    // Asked after its death is known: what it did before is visible by then.
    if (!why.empty() && !sides.doneWith(i, step)) {
      return "commux: neighbourhood exchange: " + core::lostMember(peer, why) +
             "; a step with it cannot end";
    }
  }
  if (std::chrono::steady_clock::now() >= deadline) {
    return core::concat(
        "commux: neighbourhood exchange: Timed out: the step's messages on "
        "this host did not arrive or were not read within ",
        timeout.count(), " ms");
  }
  return {};
}

}  // namespace

// What ends a step finished where it ends (finishWhenDone): a count of its messages not
// ended yet, plus one (the hold) while it may still send. Once the hold is released the
// step is this object's alone: it is waited on, aborted and ended through it, never
// through the exchange, which `done` may already have moved on to the next step.
struct NeighbourExchange::StepEnd : std::enable_shared_from_this<StepEnd> {
  StepEnd(NeighbourExchange* owner, std::shared_ptr<engine::Engine> driver)
      : exchange(owner), engine(std::move(driver)) {}

  void messageEnded() {
    if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // The last message ended here, perhaps under the worker lock: the copies and the
    // caller's callback run once this thread lets go of it.
    engine::Engine::afterRelease([self = shared_from_this()] { endStep(self); });
  }

  // Any thread: ends what is still in flight (a timeout).
  void abortAll() {
    std::vector<std::shared_ptr<group::Request>> copy;
    {
      std::lock_guard<std::mutex> lock(mutex);
      copy = requests;
      aborted.store(true, std::memory_order_release);
      if (shared != nullptr) {
        shared->abandon(step);  // neighbours still to read this rank's memory fail instead
        shared->wake();         // its finisher may sleep on the bell
      }
    }
    for (auto& r : copy) {
      if (!r->done()) r->abort();
    }
  }

  std::atomic<int> pending{1};
  std::atomic<bool> held{true};  // sends may still be posted: the step is the exchange's
  std::mutex mutex;              // exchange, requests: the ending against the destructor
  NeighbourExchange* exchange;   // null once the exchange is gone
  std::shared_ptr<engine::Engine> engine;
  std::function<void(std::exception_ptr)> done;           // finishWhenDone's
  std::vector<std::shared_ptr<group::Request>> requests;  // from releaseHold to endStep
  std::vector<std::size_t> unpack;
  engine::DoneFlag finished;
  std::exception_ptr error;  // written before `finished` is set
  // The shared part, finished on the exchange's finisher: its error, and the flag that
  // stops it (a timeout, the exchange's end).
  std::shared_ptr<SharedSides> shared;  // under mutex; null once the exchange is gone
  std::uint64_t step = 0;
  std::exception_ptr sharedError;  // under mutex
  std::atomic<bool> aborted{false};
};

// A message of a step: its end counts towards the step's.
class NeighbourExchange::StepRequest final : public group::Request {
 public:
  StepRequest(Kind kind, engine::Description description, std::chrono::milliseconds timeout,
              std::shared_ptr<engine::Engine> engine, std::shared_ptr<StepEnd> end)
      : group::Request(kind, std::move(description), timeout, std::move(engine)),
        end_(std::move(end)) {}

 private:
  void onDone() override { end_->messageEnded(); }
  std::shared_ptr<StepEnd> end_;
};

NeighbourExchange::NeighbourExchange(group::Group& group, std::vector<NeighbourMessages> neighbours,
                                     int tag, std::chrono::milliseconds timeout,
                                     std::size_t packBelow)
    : group_(group), tag_(tag), timeout_(timeout) {
  COMMUX_CHECK(tag >= 0, InvalidArgument, "commux: neighbourhood exchange: tag must be in [0, ",
               wire::kMaxUserTag, "] (not negative), got ", tag);
  std::vector<bool> named(static_cast<std::size_t>(group.size()), false);
  for (auto& n : neighbours) {
    COMMUX_CHECK(n.rank >= 0 && n.rank < group.size(), InvalidArgument,
                 "commux: neighbourhood exchange: neighbour rank ", n.rank,
                 " is not a rank of this group of ", group.size());
    COMMUX_CHECK(!named[static_cast<std::size_t>(n.rank)], InvalidArgument,
                 "commux: neighbourhood exchange: rank ", n.rank,
                 " is named twice (one entry per neighbour rank, one message each way)");
    named[static_cast<std::size_t>(n.rank)] = true;
    COMMUX_CHECK(n.sends || n.receives, InvalidArgument, "commux: neighbourhood exchange: rank ",
                 n.rank, " neither sends nor receives");
    Side side;
    side.sendBytes = totalBytes(n.send, n.rank, "send");
    side.recvBytes = totalBytes(n.recv, n.rank, "receive");
    side.sendRows = rowsOf(n.send);
    side.recvRows = rowsOf(n.recv);
    if (n.rank == group.rank()) {
      COMMUX_CHECK(n.sends && n.receives && side.sendBytes == side.recvBytes, InvalidArgument,
                   "commux: neighbourhood exchange: this rank (", n.rank,
                   ") is its own neighbour, so what it sends itself (",
                   n.sends ? side.sendBytes : 0, " bytes) must fill what it receives (",
                   n.receives ? side.recvBytes : 0, " bytes)");
    } else {
      const std::size_t below = n.packBelow != 0 ? n.packBelow : packBelow;
      if (n.sends && packs(n.send, side.sendBytes, below)) {
        side.sendStaging.reset(new char[side.sendBytes]);
      }
      if (n.receives && packs(n.recv, side.recvBytes, below)) {
        side.recvStaging.reset(new char[side.recvBytes]);
      }
    }
    side.messages = std::move(n);
    sides_.push_back(std::move(side));
  }
}

NeighbourExchange::~NeighbourExchange() {
  // The shared part of a step stops first: neighbours still to read this rank's memory are
  // told it is gone, and a finisher job copying into it is waited for (not its thread).
  if (end_) end_->aborted.store(true, std::memory_order_release);
  if (shared_) {
    shared_->abandon(step_);
    shared_->wake();
  }
  {
    std::lock_guard<std::mutex> lock(guard_->mutex);
    guard_->gone = true;
  }
  finisher_.reset();
  // A step still in flight reads and writes the caller's memory: end it first.
  for (auto* list : {&requests_, &hellos_}) {
    for (auto& r : *list) {
      if (!r->done()) r->abort();
    }
    for (auto& r : *list) r->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
  }
  if (!end_) return;
  {
    // Waits for an ending that is writing this exchange's memory now; one that comes later
    // finds it gone and fails the step instead.
    std::lock_guard<std::mutex> lock(end_->mutex);
    end_->exchange = nullptr;
    end_->shared = nullptr;
  }
  if (armed_ && end_->held.load(std::memory_order_acquire)) {  // it could never end now
    abandon(end_, core::makeError(core::ErrorKind::Runtime,
                                  "commux: neighbourhood exchange: destroyed during a step",
                                  {__func__, __FILE__, __LINE__}));
  }
}

template <typename Body>
void NeighbourExchange::guarded(Body&& body) {
  try {
    body();
  } catch (...) {
    // Nothing half-posted is left behind: what went out is ended, and the step closed,
    // before the error returns.
    for (auto& r : requests_) r->abort();
    for (auto& r : requests_) r->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
    requests_.clear();
    queued_.clear();  // never launched: nothing to end
    queuedOps_.clear();
    if (shared_) shared_->abandon(step_);
    stepOpen_.store(false, std::memory_order_release);
    if (armed_ && end_->held.load(std::memory_order_acquire)) {
      abandon(end_, freshCopy(std::current_exception()));
    }
    throw;
  }
}

void NeighbourExchange::startReceives() {
  openStep();
  guarded([&] {
    postReceives();
    flush();
  });
}

void NeighbourExchange::openStep() {
  COMMUX_CHECK(!stepOpen_, Runtime,
               "commux: neighbourhood exchange: start() while a step is in flight (wait() first)");
  group_.checkUsable();
  const int me = group_.rank();
  // A dead neighbour fails the step before any of it is posted (nothing half-sent).
  for (const auto& s : sides_) {
    const int peer = s.messages.rank;
    if (peer == me) continue;
    group_.peers().get(peer, "a neighbourhood exchange with it");  // watched from now on
    const std::string why = group_.deadWhy(peer);
    COMMUX_CHECK(why.empty(), Backend,
                 "commux: neighbourhood exchange: ", core::lostMember(peer, why),
                 "; a step with it cannot run");
  }
  if (setUpError_) std::rethrow_exception(freshCopy(setUpError_));
  if (greeted_ && !connected_) connectShared();
  requests_.clear();
  requests_.reserve(2 * sides_.size());
  unpack_.clear();
  if (end_ && !armed_ && end_.use_count() == 1) {
    // The last step ended in wait() and nothing holds its end any more (its Requests are
    // gone): reused, one allocation less a step (the small steps' cost is in such things).
    end_->pending.store(1, std::memory_order_relaxed);
    end_->aborted.store(false, std::memory_order_relaxed);
  } else {
    end_ = std::make_shared<StepEnd>(this, group_.sharedEngine());
  }
  armed_ = false;
  ++step_;
  unsent_ = 0;
  // This rank's own message counts as unsent too, until it is marked ready (ready(), or
  // what start() and wait() send): a step that ends by itself would otherwise end, and
  // copy its own faces, before they were computed.
  for (auto& s : sides_) {
    s.sent = !s.messages.sends;
    unsent_ += !s.sent;
  }
  if (!greeted_) greet();  // the greetings are the first step's first messages
  stepOpen_.store(true, std::memory_order_release);
}

void NeighbourExchange::postReceives() {
  const int me = group_.rank();
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    auto& s = sides_[i];
    const auto& n = s.messages;
    if (!n.receives || n.rank == me || (shared_ && shared_->receivesShared(i))) continue;
    launchMessage(engine::P2POp::Kind::Recv, n.rank, s.recvBytes, n.recv.size(),
                  buffersOf(n.recv, s.recvStaging.get(), s.recvBytes), nullptr,
                  wire::p2pTag(group_.context(), static_cast<std::uint32_t>(n.rank),
                               static_cast<std::uint32_t>(tag_)));
    if (s.recvStaging) unpack_.push_back(i);
  }
}

void NeighbourExchange::flush() {
  if (queued_.empty()) return;
  // Counted before they start: one may end inside launchAll.
  end_->pending.fetch_add(static_cast<int>(queued_.size()), std::memory_order_relaxed);
  group_.launchAll(queued_, std::move(queuedOps_));
  queuedOps_.clear();
  requests_.insert(requests_.end(), queued_.begin(), queued_.end());
  queued_.clear();
}

void NeighbourExchange::launchMessage(engine::P2POp::Kind kind, int peer, std::size_t bytes,
                                      std::size_t pieces, engine::P2POp::Buffers buffers,
                                      std::shared_ptr<const engine::Route> route, wire::Tag tag) {
  const bool send = kind == engine::P2POp::Kind::Send;
  auto request = std::make_shared<StepRequest>(
      send ? group::Request::Kind::Send : group::Request::Kind::Recv,
      engine::Description::p2p(send ? "neighbourhood send" : "neighbourhood receive",
                               send ? "to" : "from", peer, tag_, bytes, pieces),
      timeout_, group_.sharedEngine(), end_);
  request->setPeer(peer);
  queuedOps_.push_back(std::make_shared<engine::P2POp>(kind, std::move(buffers), std::move(route),
                                                       tag, wire::kExactMask, /*pack=*/true,
                                                       request->parts(), request->completer()));
  queued_.push_back(std::move(request));
}

void NeighbourExchange::postSend(Side& s) {
  const auto& n = s.messages;
  if (n.rank == group_.rank()) {
    // Nothing goes: marked ready, copied at the step's end (after the network's messages,
    // which a copy in start() held up: docs/halo.md).
    s.sent = true;
    --unsent_;
    return;
  }
  const auto index = static_cast<std::size_t>(&s - sides_.data());
  if (shared_ && shared_->sendsShared(index)) {
    shared_->markReady(index, step_);  // the neighbour copies it out
    s.sent = true;
    --unsent_;
    return;
  }
  if (s.sendStaging) gather(s.sendRows, s.sendStaging.get());
  auto route = group_.peers().get(n.rank, "a send to it");
  const wire::Tag tag = wire::p2pTag(route->context, static_cast<std::uint32_t>(group_.rank()),
                                     static_cast<std::uint32_t>(tag_), /*packed=*/true);
  s.sent = true;
  --unsent_;
  launchMessage(engine::P2POp::Kind::Send, n.rank, s.sendBytes, n.send.size(),
                buffersOf(n.send, s.sendStaging.get(), s.sendBytes), std::move(route), tag);
}

void NeighbourExchange::sendRest() {
  for (auto& s : sides_) {
    if (!s.sent) postSend(s);
  }
  flush();
}

void NeighbourExchange::releaseHold() {
  if (!armed_ || unsent_ != 0 || !end_->held.load(std::memory_order_relaxed)) return;
  auto end = end_;
  {
    std::lock_guard<std::mutex> lock(end->mutex);
    end->requests = requests_;
    end->unpack = unpack_;
  }
  if (shared_ && shared_->active()) finishSharedLater(end);
  end->held.store(false, std::memory_order_release);
  if (end->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) endStep(end);
}

void NeighbourExchange::writeReceived(const std::vector<std::size_t>& unpack) {
  const int me = group_.rank();
  for (const auto& s : sides_) {
    if (s.messages.rank == me) copyOwn(s.sendRows, s.recvRows, s.messages.send, s.messages.recv);
  }
  for (std::size_t i : unpack) scatter(sides_[i].recvStaging.get(), sides_[i].recvRows);
}

void NeighbourExchange::endStep(const std::shared_ptr<StepEnd>& end) {
  std::exception_ptr first;
  std::function<void(std::exception_ptr)> done;
  std::vector<std::shared_ptr<group::Request>> requests;  // they hold `end`: dropped below
  {
    std::lock_guard<std::mutex> lock(end->mutex);
    requests.swap(end->requests);
    for (const auto& r : requests) {
      if (auto error = r->error()) {
        first = freshCopy(error);
        break;
      }
    }
    if (!first && end->sharedError) first = end->sharedError;
    if (end->exchange == nullptr) {
      if (!first) {
        first = core::makeError(core::ErrorKind::Runtime,
                                "commux: neighbourhood exchange: destroyed during a step",
                                {__func__, __FILE__, __LINE__});
      }
    } else {
      if (!first) end->exchange->writeReceived(end->unpack);
      // From here on the owner may start the next step: nothing below touches the exchange.
      end->exchange->stepOpen_.store(false, std::memory_order_release);
    }
    done = std::move(end->done);
    end->error = first;
  }
  report(*end, first, done);
}

void NeighbourExchange::report(StepEnd& end, const std::exception_ptr& error,
                               const std::function<void(std::exception_ptr)>& done) {
  end.engine->setDone(end.finished);
  if (!done) return;
  try {
    done(error);
  } catch (...) {
    // The caller's callback: nothing here to report it to, and this thread may be the
    // progress thread.
  }
}

void NeighbourExchange::abandon(const std::shared_ptr<StepEnd>& end, std::exception_ptr error) {
  std::function<void(std::exception_ptr)> done;
  {
    std::lock_guard<std::mutex> lock(end->mutex);
    done = std::move(end->done);
    end->error = error;
  }
  end->held.store(false, std::memory_order_release);
  report(*end, error, done);
}

std::shared_ptr<NeighbourExchange::StepEnd> NeighbourExchange::finishWhenDone(
    std::function<void(std::exception_ptr)> done) {
  COMMUX_CHECK(inFlight() && end_->held.load(std::memory_order_relaxed), Runtime,
               "commux: neighbourhood exchange: finishWhenDone() outside a step (start first)");
  COMMUX_CHECK(!armed_, Runtime,
               "commux: neighbourhood exchange: finishWhenDone() twice in one step");
  armed_ = true;
  auto end = end_;
  end->done = std::move(done);
  releaseHold();
  return end;
}

bool NeighbourExchange::stepEnded(const std::shared_ptr<StepEnd>& step) noexcept {
  return step->finished.done();
}

void NeighbourExchange::start() {
  openStep();
  guarded([&] {  // the receives first, then the sends: one submission
    postReceives();
    sendRest();
  });
}

void NeighbourExchange::ready(int rank) {
  // Once every send of a step that ends by itself went (its hold released), the step may
  // end at any moment: a ready() then can only name a message that went, or none. While
  // the hold is kept nothing but this thread can end the step.
  const bool allSent = end_ && armed_ && !end_->held.load(std::memory_order_acquire);
  COMMUX_CHECK(allSent || inFlight(), Runtime,
               "commux: neighbourhood exchange: ready() outside a step (start first)");
  Side* side = nullptr;
  for (auto& s : sides_) {
    if (s.messages.rank == rank) side = &s;
  }
  COMMUX_CHECK(side != nullptr, InvalidArgument, "commux: neighbourhood exchange: rank ", rank,
               " is not a neighbour of this exchange");
  if (!side->messages.sends) return;  // nothing goes
  // This rank's own message marked again: harmless (the C API promised nothing happens).
  if (side->messages.rank == group_.rank() && (allSent || side->sent)) return;
  COMMUX_CHECK(!allSent && !side->sent, Runtime,
               "commux: neighbourhood exchange: the message to rank ", rank,
               " was already sent this step");
  guarded([&] {
    postSend(*side);
    flush();
  });
  releaseHold();
}

void NeighbourExchange::wait() {
  // A step that ends by itself with every send gone is its end's alone (see StepEnd).
  // A step that ends by itself: waitStep() sends what is left while it is this exchange's,
  // and otherwise waits on its end alone (see StepEnd).
  if (end_ && armed_) return waitStep(end_);
  COMMUX_CHECK(inFlight(), Runtime, "commux: neighbourhood exchange: wait() without start()");
  guarded([&] { sendRest(); });  // what was not marked ready goes now
  auto requests = std::move(requests_);
  requests_.clear();
  stepOpen_.store(false, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::exception_ptr first;
  const bool shared = shared_ && shared_->active();
  if (shared) {
    try {
      shared_->advance(step_);  // what is ready already, before the network's
    } catch (...) {
      first = std::current_exception();
    }
  }
  for (auto& r : requests) {
    if (first) {  // the step failed: end the rest rather than wait for each to time out
      if (!r->done()) r->abort();
      r->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
      continue;
    }
    try {
      // One timeout for the whole step, not one per message.
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      r->wait(std::max(left, std::chrono::milliseconds(0)));
    } catch (...) {
      r->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
      first = std::current_exception();
      continue;
    }
    if (auto error = r->error()) first = error;
  }
  if (shared && !first) {
    try {
      shared_->finish(
          step_, [&] { return sharedInterruption(group_, *shared_, step_, deadline, timeout_); });
      if (step_ == firstShared_) shared_->withdraw();  // every neighbour has it mapped
    } catch (...) {
      first = std::current_exception();
    }
  }
  if (first && shared_) shared_->abandon(step_);
  if (first) {
    // A fresh exception, not the Request's: the Requests' last owner may be another thread
    // (a death's handler), and the shared one's reference count is not ordered with this
    // thread's reads of it (ThreadSanitizer saw the race).
    const core::ErrorReading reading = core::readError(first);
    first = nullptr;
    core::fail(reading.kind, reading.message, {__func__, __FILE__, __LINE__});
  }
  // This rank's own message last, once the network's are done. Copied in start(), with the
  // messages under way, a long copy (a column of a large grid) made a 2-D 4096^2 step at 2
  // ranks 25% slower: its peer's rendezvous waited, and the progress thread, woken by the
  // arriving messages, took turns on the copying core (docs/performance.md). Polling the
  // worker between chunks of the copy did not help.
  writeReceived(unpack_);
}

bool NeighbourExchange::test() {
  COMMUX_CHECK(end_ && (inFlight() || armed_), Runtime,
               "commux: neighbourhood exchange: test() without start()");
  auto end = end_;  // the step tested, whatever its end's `done` starts next
  if (end->held.load(std::memory_order_acquire)) {
    guarded([&] { sendRest(); });  // what was not marked ready goes now, as in wait()
    if (armed_) {
      releaseHold();
    } else {
      finishWhenDone(nullptr);  // from now on the step ends where it ends
    }
  }
  if (!end->finished.done()) end->engine->tryProgress();
  if (!end->finished.done()) return false;
  if (end->error) std::rethrow_exception(freshCopy(end->error));
  return true;
}

void NeighbourExchange::waitStep(const std::shared_ptr<StepEnd>& step) {
  COMMUX_CHECK(step != nullptr, InvalidArgument, "commux: neighbourhood exchange: no step");
  if (step->held.load(std::memory_order_acquire)) {
    // Sends left to post: the step is this exchange's current one, and nothing but this
    // thread can end it.
    COMMUX_CHECK(step == end_ && inFlight(), Runtime,
                 "commux: neighbourhood exchange: waitStep() of a step that is not in flight");
    guarded([&] { sendRest(); });
    releaseHold();
  }
  // From here on only the step's end is used: its `done` may have started the next step.
  engine::Engine& engine = *step->engine;
  if (!engine.wait(step->finished, std::chrono::steady_clock::now() + timeout_)) {
    step->abortAll();
    engine.wait(step->finished, std::chrono::steady_clock::now() + group::kCancelWait);
    COMMUX_CHECK(step->finished.done(), Runtime,
                 "commux: neighbourhood exchange: a step's messages did not end within ",
                 group::kCancelWait.count(), " s of being cancelled");
    core::fail(core::ErrorKind::Backend,
               core::concat("commux: neighbourhood exchange: Timed out: the step did not end "
                            "within ",
                            timeout_.count(), " ms; its messages were cancelled"),
               {__func__, __FILE__, __LINE__});
  }
  if (step->error) std::rethrow_exception(freshCopy(step->error));
}

void NeighbourExchange::greet() {
  greeted_ = true;
  // The host's channel as this rank sees it now: a set-up run in the background is waited
  // for (every rank runs it anyway); one due at the group's first collective is not run
  // here (only the neighbours take part in a step). The greetings make the view both
  // ranks' of a pair.
  std::shared_ptr<shm::Channel> channel;
  try {
    channel = group_.setsUpInBackground() ? group_.channel() : group_.currentChannel();
  } catch (const std::exception&) {
    // A failed set-up: the group's collectives report it; the exchange goes through UCX.
  }
  shm::CmaRange range;  // none: nothing shared
  std::chrono::microseconds spin{0};
  std::chrono::nanoseconds poll{0};
  if (channel) {
    range = channel->shape().cma[shm::CmaUse::Neighbours];
    spin = channel->shape().spin;
    poll = channel->shape().poll;
  }
  const int me = group_.rank();
  std::vector<SharedSides::Neighbour> list;
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    auto& s = sides_[i];
    const int peer = s.messages.rank;
    if (peer == me) continue;
    const bool local = channel && channel->hosts(peer);
    // A neighbour on the host: its record (the process the greeting must name) is read now,
    // as the greeting's send would read it anyway.
    if (local) group_.peers().get(peer, "a neighbourhood exchange's greeting");
    list.push_back({i, peer, local, s.messages.sends, s.messages.receives,
                    s.sendBytes, s.recvBytes, &s.sendRows, &s.recvRows,
                    group_.peers().localPidOf(peer)});
  }
  if (list.empty()) return;
  try {
    shared_ = std::make_shared<SharedSides>(list, range, spin, poll);
  } catch (const std::exception& e) {
    // No segment (memory, descriptors): greetings that share nothing keep the pairs agreed.
    core::log(core::LogLevel::Warning,
              std::string("commux: neighbourhood exchange: no shared memory with the "
                          "neighbours on this host (") +
                  e.what() + "); its messages go through UCX");
    shared_ = std::make_shared<SharedSides>(std::move(list), shm::CmaRange{}, spin, poll);
  }
  // One greeting each way, ahead of this step's messages on the same tag (so each side's
  // first message from the other is its greeting), and part of the step: it ends once the
  // neighbours' greetings are here, and none is left behind for a later exchange.
  const std::size_t n = shared_->size();
  theirHellos_.assign(n, Hello{});
  for (std::size_t k = 0; k < 2 * n; ++k) {
    const bool send = k >= n;
    const std::size_t i = k % n;
    const int peer = shared_->rank(i);
    engine::P2POp::Buffers buffers;
    std::shared_ptr<const engine::Route> route;
    wire::Tag tag;
    if (send) {
      buffers.push_back(core::bufferOf(const_cast<Hello*>(&shared_->hello(i)), sizeof(Hello),
                                       core::Dtype::UInt8));
      route = group_.peers().get(peer, "a send to it");
      tag = wire::p2pTag(route->context, static_cast<std::uint32_t>(me),
                         static_cast<std::uint32_t>(tag_), /*packed=*/true);
    } else {
      buffers.push_back(core::bufferOf(&theirHellos_[i], sizeof(Hello), core::Dtype::UInt8));
      tag = wire::p2pTag(group_.context(), static_cast<std::uint32_t>(peer),
                         static_cast<std::uint32_t>(tag_));
    }
    launchMessage(send ? engine::P2POp::Kind::Send : engine::P2POp::Kind::Recv, peer, sizeof(Hello),
                  1, std::move(buffers), std::move(route), tag);
    hellos_.push_back(queued_.back());
  }
  try {
    flush();
  } catch (...) {
    hellos_.clear();
    setUpError_ = freshCopy(std::current_exception());
    throw;
  }
}

void NeighbourExchange::connectShared() {
  connected_ = true;
  if (!shared_) return;
  try {
    // The first step ended with its greetings; a failed one leaves the pair undecided.
    for (auto& r : hellos_) {
      COMMUX_CHECK(r->done(), Runtime,
                   "commux: neighbourhood exchange: the first step did not end (its greetings "
                   "are still under way)");
      if (auto error = r->error()) std::rethrow_exception(freshCopy(error));
    }
    hellos_.clear();
    shared_->connect(theirHellos_);
    theirHellos_ = {};  // read once
  } catch (...) {
    // The pair may be half set up: this exchange cannot run another step.
    setUpError_ = freshCopy(std::current_exception());
    throw;
  }
  if (!shared_->active()) {
    shared_.reset();
    return;
  }
  firstShared_ = step_ + 1;
}

void NeighbourExchange::finishSharedLater(const Step& end) {
  end->pending.fetch_add(1, std::memory_order_relaxed);  // the shared part: one more to end
  {
    std::lock_guard<std::mutex> lock(end->mutex);
    end->shared = shared_;
    end->step = step_;
  }
  if (!finisher_) finisher_ = std::make_unique<StepFinisher>();
  // The job holds what it uses: the exchange may be gone by the time it runs or ends.
  finisher_->post([sides = shared_, guard = guard_, group = &group_, end, step = step_,
                   first = firstShared_, timeout = timeout_] {
    std::exception_ptr error;
    {
      std::lock_guard<std::mutex> lock(guard->mutex);
      const auto cancelled = [&] {
        return guard->gone || end->aborted.load(std::memory_order_acquire);
      };
      try {
        COMMUX_CHECK(!cancelled(), Backend, kCancelled);
        sides->finish(step, [&]() -> std::string {
          if (cancelled()) return kCancelled;
          // The group outlives the exchange, which cannot be gone while this lock is held.
          return sharedInterruption(*group, *sides, step,
                                    std::chrono::steady_clock::time_point::max(), timeout);
        });
        if (step == first) sides->withdraw();
      } catch (...) {
        error = freshCopy(std::current_exception());
        sides->abandon(step);
      }
    }
    if (error) {
      std::lock_guard<std::mutex> lock(end->mutex);
      end->sharedError = error;
    }
    end->messageEnded();
  });
}

}  // namespace commux::halo
