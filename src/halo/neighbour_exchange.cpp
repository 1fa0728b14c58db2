#include "halo/neighbour_exchange.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "core/group_health.hpp"
#include "engine/description.hpp"
#include "engine/done_flag.hpp"
#include "engine/engine.hpp"
#include "engine/p2p_op.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "group/request.hpp"
#include "wire/tag.hpp"

namespace commux::halo {
namespace {

std::size_t totalBytes(const std::vector<Piece>& pieces) {
  std::size_t bytes = 0;
  for (const auto& p : pieces) bytes += p.bytes;
  return bytes;
}

// Many short pieces cost UCX more per byte than one copy into a staging buffer does.
bool packs(const std::vector<Piece>& pieces, std::size_t bytes, std::size_t packBelow) {
  std::size_t count = 0;  // empty pieces travel in neither form
  for (const auto& p : pieces) count += p.bytes != 0;
  return count > 1 && bytes / count < packBelow;
}

// `count` rows of `bytes`, `srcStride` apart, to rows `dstStride` apart. A face's rows are
// often one element (a column of a row-major grid): a fixed-size copy the compiler turns
// into one load and one store, where memcpy's call would cost more than the bytes.
template <std::size_t N>
void copyFixedRows(char* dst, std::ptrdiff_t dstStride, const char* src,
                   std::ptrdiff_t srcStride, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i, dst += dstStride, src += srcStride) {
    std::memcpy(dst, src, N);
  }
}

void copyRows(char* dst, std::ptrdiff_t dstStride, const char* src, std::ptrdiff_t srcStride,
              std::size_t bytes, std::size_t count) {
  switch (bytes) {
    case 1: return copyFixedRows<1>(dst, dstStride, src, srcStride, count);
    case 2: return copyFixedRows<2>(dst, dstStride, src, srcStride, count);
    case 4: return copyFixedRows<4>(dst, dstStride, src, srcStride, count);
    case 8: return copyFixedRows<8>(dst, dstStride, src, srcStride, count);
    case 16: return copyFixedRows<16>(dst, dstStride, src, srcStride, count);
    default:
      for (std::size_t i = 0; i < count; ++i, dst += dstStride, src += srcStride) {
        std::memcpy(dst, src, bytes);
      }
  }
}

void gather(const std::vector<Rows>& rows, char* out) {
  for (const auto& r : rows) {
    copyRows(out, static_cast<std::ptrdiff_t>(r.bytes), r.data, r.stride, r.bytes, r.count);
    out += r.bytes * r.count;
  }
}

void scatter(const char* in, const std::vector<Rows>& rows) {
  for (const auto& r : rows) {
    copyRows(r.data, r.stride, in, static_cast<std::ptrdiff_t>(r.bytes), r.bytes, r.count);
    in += r.bytes * r.count;
  }
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

}  // namespace

// What ends a step finished where it ends (finishWhenDone): a count of its messages not
// ended yet, plus one (the hold) while it may still send.
struct NeighbourExchange::StepEnd : std::enable_shared_from_this<StepEnd> {
  explicit StepEnd(NeighbourExchange* owner) : exchange(owner) {}

  void messageEnded() {
    if (pending.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
    // The last message ended here, perhaps under the worker lock: the copies and the
    // caller's callback run once this thread lets go of it.
    engine::Engine::afterRelease(
        [self = shared_from_this()] { self->exchange->finishStep(*self); });
  }

  NeighbourExchange* exchange;  // the destructor waits for `finished`
  std::atomic<int> pending{1};
  std::function<void(std::exception_ptr)> done;           // finishWhenDone's
  std::vector<std::shared_ptr<group::Request>> requests;  // from releaseHold to finishStep
  std::vector<std::size_t> unpack;
  engine::DoneFlag finished;
  std::exception_ptr error;  // written before `finished` is set
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

std::vector<Rows> rowsOf(const std::vector<Piece>& pieces) {
  std::vector<Rows> rows;
  for (const auto& p : pieces) {
    if (p.bytes == 0) continue;
    char* at = static_cast<char*>(p.data);
    if (!rows.empty()) {
      Rows& r = rows.back();
      if (r.bytes == p.bytes) {
        if (r.count == 1) {
          r.stride = at - r.data;
          r.count = 2;
          continue;
        }
        if (at == r.data + r.stride * static_cast<std::ptrdiff_t>(r.count)) {
          ++r.count;
          continue;
        }
      }
    }
    rows.push_back(Rows{at, p.bytes, static_cast<std::ptrdiff_t>(p.bytes), 1});
  }
  return rows;
}

NeighbourExchange::NeighbourExchange(group::Group& group,
                                     std::vector<NeighbourMessages> neighbours, int tag,
                                     std::chrono::milliseconds timeout, std::size_t packBelow)
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
    for (const auto* list : {&n.send, &n.recv}) {
      for (const auto& p : *list) {
        COMMUX_CHECK(p.data != nullptr || p.bytes == 0, InvalidArgument,
                     "commux: neighbourhood exchange: a piece for rank ", n.rank, " holds ",
                     p.bytes, " bytes at a null address");
      }
    }
    Side side;
    side.sendBytes = totalBytes(n.send);
    side.recvBytes = totalBytes(n.recv);
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
  // A step still in flight reads and writes the caller's memory: end it first.
  for (auto& r : requests_) {
    if (!r->done()) r->abort();
  }
  for (auto& r : requests_) r->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
  if (armed_ && held_) {
    abandonStep(core::makeError(core::ErrorKind::Runtime,
                                "commux: neighbourhood exchange: destroyed during a step",
                                {__func__, __FILE__, __LINE__}));
  } else if (armed_ && end_) {
    // Its messages ended; the step's finishing (which writes this exchange's memory) may
    // still be running on the thread that ended the last one.
    group_.sharedEngine()->wait(end_->finished,
                                std::chrono::steady_clock::now() + group::kCancelWait);
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
    stepOpen_.store(false, std::memory_order_release);
    if (armed_) abandonStep(std::current_exception());
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
    COMMUX_CHECK(why.empty(), Backend, "commux: neighbourhood exchange: ",
                 core::lostMember(peer, why), "; a step with it cannot run");
  }
  requests_.clear();
  requests_.reserve(2 * sides_.size());
  unpack_.clear();
  if (end_ && !armed_ && end_.use_count() == 1) {
    // The last step ended in wait() and nothing holds its end any more (its Requests are
    // gone): reused, one allocation less a step (the small steps' cost is in such things).
    end_->pending.store(1, std::memory_order_relaxed);
  } else {
    end_ = std::make_shared<StepEnd>(this);
  }
  armed_ = false;
  held_ = true;
  unsent_ = 0;
  for (auto& s : sides_) {
    s.sent = !s.messages.sends || s.messages.rank == me;
    unsent_ += !s.sent;
  }
  steps_.fetch_add(1, std::memory_order_acq_rel);
  stepOpen_.store(true, std::memory_order_release);
}

void NeighbourExchange::postReceives() {
  const int me = group_.rank();
  for (std::size_t i = 0; i < sides_.size(); ++i) {
    auto& s = sides_[i];
    const auto& n = s.messages;
    if (!n.receives || n.rank == me) continue;
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
  if (s.sendStaging) gather(s.sendRows, s.sendStaging.get());
  auto route = group_.peers().get(n.rank, "a send to it");
  const wire::Tag tag = wire::p2pTag(route->context, static_cast<std::uint32_t>(group_.rank()),
                                     static_cast<std::uint32_t>(tag_), /*packed=*/true);
  s.sent = true;
  --unsent_;
  launchMessage(engine::P2POp::Kind::Send, n.rank, s.sendBytes, n.send.size(),
                buffersOf(n.send, s.sendStaging.get(), s.sendBytes), std::move(route), tag);
}

void NeighbourExchange::releaseHold() {
  if (!armed_ || !held_ || unsent_ != 0) return;
  held_ = false;
  end_->requests = requests_;
  end_->unpack = unpack_;
  auto end = end_;
  if (end->pending.fetch_sub(1, std::memory_order_acq_rel) == 1) finishStep(*end);
}

void NeighbourExchange::finishStep(StepEnd& end) {
  std::exception_ptr first;
  for (const auto& r : end.requests) {
    if (auto error = r->error()) {
      first = freshCopy(error);
      break;
    }
  }
  end.requests.clear();  // they hold `end`
  if (!first) {
    const int me = group_.rank();
    for (const auto& s : sides_) {
      if (s.messages.rank == me) copyOwn(s.sendRows, s.recvRows, s.messages.send, s.messages.recv);
    }
    for (std::size_t i : end.unpack) scatter(sides_[i].recvStaging.get(), sides_[i].recvRows);
  }
  // From here on the owner may start the next step, or (once `finished` is set) destroy
  // this exchange: nothing below touches it.
  auto done = std::move(end.done);
  auto engine = group_.sharedEngine();
  end.error = first;
  stepOpen_.store(false, std::memory_order_release);
  engine->setDone(end.finished);
  if (done) {
    try {
      done(first);
    } catch (...) {
      // The caller's callback: nothing here to report it to, and this thread may be the
      // progress thread.
    }
  }
}

void NeighbourExchange::abandonStep(std::exception_ptr error) {
  held_ = false;
  auto end = end_;
  auto done = std::move(end->done);
  end->error = error;
  group_.sharedEngine()->setDone(end->finished);
  if (done) {
    try {
      done(error);
    } catch (...) {
    }
  }
}

void NeighbourExchange::finishWhenDone(std::function<void(std::exception_ptr)> done) {
  COMMUX_CHECK(inFlight(), Runtime,
               "commux: neighbourhood exchange: finishWhenDone() outside a step (start first)");
  COMMUX_CHECK(!armed_, Runtime,
               "commux: neighbourhood exchange: finishWhenDone() twice in one step");
  armed_ = true;
  end_->done = std::move(done);
  releaseHold();
}

void NeighbourExchange::start() {
  openStep();
  guarded([&] {  // the receives first, then the sends: one submission
    postReceives();
    for (auto& s : sides_) {
      if (!s.sent) postSend(s);
    }
    flush();
  });
}

void NeighbourExchange::ready(int rank) {
  // A step finished where it ends may end as soon as its last send went: a ready() for a
  // message that went, or for none, is still in that step.
  const bool endedItself = !inFlight() && armed_ && !held_;
  COMMUX_CHECK(inFlight() || endedItself, Runtime,
               "commux: neighbourhood exchange: ready() outside a step (start first)");
  Side* side = nullptr;
  for (auto& s : sides_) {
    if (s.messages.rank == rank) side = &s;
  }
  COMMUX_CHECK(side != nullptr, InvalidArgument, "commux: neighbourhood exchange: rank ", rank,
               " is not a neighbour of this exchange");
  if (side->messages.rank == group_.rank() || !side->messages.sends) return;  // nothing goes
  COMMUX_CHECK(!endedItself && !side->sent, Runtime, "commux: neighbourhood exchange: the message to rank ",
               rank, " was already sent this step");
  guarded([&] {
    postSend(*side);
    flush();
  });
  releaseHold();
}

void NeighbourExchange::wait() {
  if (!inFlight() && armed_ && end_ && !held_) {
    // It ended where it ended (finishWhenDone) before this wait: its outcome, once the
    // finishing, which closed the step just before, has run to the end.
    group_.sharedEngine()->wait(end_->finished,
                                std::chrono::steady_clock::now() + group::kCancelWait);
    if (end_->error) std::rethrow_exception(freshCopy(end_->error));
    return;
  }
  COMMUX_CHECK(inFlight(), Runtime, "commux: neighbourhood exchange: wait() without start()");
  guarded([&] {  // what was not marked ready goes now
    for (auto& s : sides_) {
      if (!s.sent) postSend(s);
    }
    flush();
  });
  if (armed_) return waitForEnd();
  auto requests = std::move(requests_);
  requests_.clear();
  stepOpen_.store(false, std::memory_order_release);
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::exception_ptr first;
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
  const int me = group_.rank();
  for (const auto& s : sides_) {
    if (s.messages.rank == me) copyOwn(s.sendRows, s.recvRows, s.messages.send, s.messages.recv);
  }
  for (std::size_t i : unpack_) scatter(sides_[i].recvStaging.get(), sides_[i].recvRows);
}

bool NeighbourExchange::test() {
  if (inFlight()) {
    guarded([&] {  // what was not marked ready goes now, as in wait()
      for (auto& s : sides_) {
        if (!s.sent) postSend(s);
      }
      flush();
    });
    if (armed_) {
      releaseHold();
    } else {
      finishWhenDone(nullptr);  // from now on the step ends where it ends
    }
    group_.sharedEngine()->tryProgress();
    if (inFlight()) return false;
  }
  wait();  // it ended: its outcome (or, with no step, the error wait() gives)
  return true;
}

void NeighbourExchange::waitForEnd() {
  // Taken before the hold goes: once the step ends, its `done` may start the next one.
  auto end = end_;
  auto requests = requests_;
  releaseHold();
  const auto deadline = std::chrono::steady_clock::now() + timeout_;
  std::exception_ptr first;
  for (auto& r : requests) {
    if (first) {  // end the rest: the step's finishing runs once all have ended
      if (!r->done()) r->abort();
      continue;
    }
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      r->wait(std::max(left, std::chrono::milliseconds(0)));
    } catch (...) {
      first = std::current_exception();  // a timeout: the message was cancelled
    }
  }
  auto& engine = *group_.sharedEngine();
  engine.wait(end->finished, std::chrono::steady_clock::now() + group::kCancelWait);
  COMMUX_CHECK(end->finished.done(), Runtime,
               "commux: neighbourhood exchange: the step's messages ended but its finishing did "
               "not run within ", group::kCancelWait.count(), " s");
  if (!first) first = end->error;
  if (first) {
    auto fresh = freshCopy(first);
    first = nullptr;
    std::rethrow_exception(fresh);
  }
}

}  // namespace commux::halo
