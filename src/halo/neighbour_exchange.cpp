#include "halo/neighbour_exchange.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "core/group_health.hpp"
#include "engine/description.hpp"
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

}  // namespace

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
    stepOpen_ = false;
    throw;
  }
}

void NeighbourExchange::startReceives() {
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
  requests_.reserve(2 * sides_.size());
  unpack_.clear();
  stepOpen_ = true;
  for (auto& s : sides_) s.sent = !s.messages.sends || s.messages.rank == me;
  guarded([&] {
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
  });
}

void NeighbourExchange::launchMessage(engine::P2POp::Kind kind, int peer, std::size_t bytes,
                                      std::size_t pieces, engine::P2POp::Buffers buffers,
                                      std::shared_ptr<const engine::Route> route, wire::Tag tag) {
  const bool send = kind == engine::P2POp::Kind::Send;
  auto request = std::make_shared<group::Request>(
      send ? group::Request::Kind::Send : group::Request::Kind::Recv,
      engine::Description::p2p(send ? "neighbourhood send" : "neighbourhood receive",
                               send ? "to" : "from", peer, tag_, bytes, pieces),
      timeout_, group_.sharedEngine());
  request->setPeer(peer);
  group_.launch(request,
                std::make_shared<engine::P2POp>(kind, std::move(buffers), std::move(route), tag,
                                                wire::kExactMask, /*pack=*/true, request->parts(),
                                                request->completer()),
                std::nullopt);
  requests_.push_back(std::move(request));
}

void NeighbourExchange::postSend(Side& s) {
  const auto& n = s.messages;
  if (s.sendStaging) gather(s.sendRows, s.sendStaging.get());
  auto route = group_.peers().get(n.rank, "a send to it");
  const wire::Tag tag = wire::p2pTag(route->context, static_cast<std::uint32_t>(group_.rank()),
                                     static_cast<std::uint32_t>(tag_), /*packed=*/true);
  s.sent = true;
  launchMessage(engine::P2POp::Kind::Send, n.rank, s.sendBytes, n.send.size(),
                buffersOf(n.send, s.sendStaging.get(), s.sendBytes), std::move(route), tag);
}

void NeighbourExchange::start() {
  startReceives();
  guarded([&] {
    for (auto& s : sides_) {
      if (!s.sent) postSend(s);
    }
  });
}

void NeighbourExchange::ready(int rank) {
  COMMUX_CHECK(stepOpen_, Runtime,
               "commux: neighbourhood exchange: ready() outside a step (start first)");
  Side* side = nullptr;
  for (auto& s : sides_) {
    if (s.messages.rank == rank) side = &s;
  }
  COMMUX_CHECK(side != nullptr, InvalidArgument, "commux: neighbourhood exchange: rank ", rank,
               " is not a neighbour of this exchange");
  if (side->messages.rank == group_.rank() || !side->messages.sends) return;  // nothing goes
  COMMUX_CHECK(!side->sent, Runtime, "commux: neighbourhood exchange: the message to rank ",
               rank, " was already sent this step");
  guarded([&] { postSend(*side); });
}

void NeighbourExchange::wait() {
  COMMUX_CHECK(stepOpen_, Runtime, "commux: neighbourhood exchange: wait() without start()");
  guarded([&] {  // what was not marked ready goes now
    for (auto& s : sides_) {
      if (!s.sent) postSend(s);
    }
  });
  auto requests = std::move(requests_);
  requests_.clear();
  stepOpen_ = false;
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

}  // namespace commux::halo
