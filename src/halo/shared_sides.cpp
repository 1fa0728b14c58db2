#include "halo/shared_sides.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/log.hpp"
#include "shm/cma.hpp"
#include "shm/segment.hpp"

namespace commux::halo {
namespace {

// A counter or the bell alone on its cache line: the two ranks of a pair write different
// ones, and a line written by both would travel between their cores at every write.
constexpr std::size_t kLine = 64;
// Counters of a segment: its bell, then per neighbour its message's "ready" and "read".
constexpr std::size_t kMaxNeighbours = 1u << 16;

// The kernel pins the pages of every piece of the other process's memory it copies, one
// piece at a time, and copies into every piece of this one's with a call of its own
// (process_vm_readv): at 2 ranks a 3-D 32^3 step whose faces (32 rows of 256 bytes) were
// read as they lie took 21 us against 11 through UCX; packed by the sender and read into
// one piece, then unpacked, still 12 against 11 (the system call, the pinning and three
// copies). A message whose pieces average less than this is staged instead: the sender
// packs it into its segment, which the receiver has mapped, and the receiver unpacks it
// from there (two copies, no system call); one of long rows is read where it lies, one
// copy (docs/performance-log.md, 2026-12-07 06:40).
constexpr std::size_t kReadPiecesFrom = 4096;
// A segment larger than this is refused (the sizes are the sender's messages).
constexpr std::uint64_t kMaxSegmentBytes = std::uint64_t{1} << 40;
// Set in a "ready" counter (with the step) by a sender that gave its step up.
constexpr std::uint64_t kAbandoned = std::uint64_t{1} << 63;

std::size_t piecesOf(const std::vector<Rows>& rows) {
  std::size_t pieces = 0;
  for (const auto& r : rows) pieces += r.count;
  return pieces;
}

// Read where it lies: few pieces, long ones.
bool readInPlace(const std::vector<Rows>& rows, std::size_t bytes) {
  const std::size_t pieces = piecesOf(rows);
  return pieces != 0 && rows.size() <= Hello::kMaxRows && bytes / pieces >= kReadPiecesFrom;
}

std::size_t linesBytes(std::size_t neighbours) { return kLine * (1 + 2 * neighbours); }

std::uint64_t* counter(char* base, std::size_t index, bool taken) {
  return reinterpret_cast<std::uint64_t*>(base + kLine * (1 + 2 * index + (taken ? 1 : 0)));
}

void appendRows(const std::vector<Rows>& rows, std::vector<iovec>& out) {
  for (const auto& r : rows) {
    for (std::size_t k = 0; k < r.count; ++k) {
      out.push_back(iovec{r.data + r.stride * static_cast<std::ptrdiff_t>(k), r.bytes});
    }
  }
}

// A nameless segment of process `pid` (shm::Segment), in a fixed field of a greeting.
bool isSegmentOf(const char* name, std::size_t capacity, std::int32_t pid) {
  const std::size_t length = ::strnlen(name, capacity);
  return length < capacity && shm::Segment::wellFormedName(std::string(name, length), pid);
}

}  // namespace

SharedSides::SharedSides(std::vector<Neighbour> neighbours, shm::CmaRange range,
                         std::chrono::microseconds spin, std::chrono::nanoseconds poll)
    : range_(range) {
  COMMUX_ASSERT(neighbours.size() < kMaxNeighbours);
  const bool any = range.from != 0 && std::any_of(neighbours.begin(), neighbours.end(),
                                                  [](const Neighbour& n) { return n.local; });
  // The segment: the bell, each neighbour's counters, then the staged messages.
  std::vector<std::size_t> stagedAt(neighbours.size(), 0);
  std::size_t bytes = linesBytes(neighbours.size());
  for (std::size_t i = 0; i < neighbours.size(); ++i) {
    const Neighbour& n = neighbours[i];
    if (any && n.local && n.sends && n.sendBytes != 0 && !readInPlace(*n.sendRows, n.sendBytes)) {
      stagedAt[i] = bytes;
      // The callers' sizes: a sum that wrapped would make a segment smaller than what is
      // packed into it, one past kMaxSegmentBytes a greeting the neighbours refuse. Refused
      // here, the exchange greets without a segment and its messages go through UCX.
      const std::size_t staged = n.sendBytes / kLine * kLine;
      std::size_t rounded = 0;
      COMMUX_CHECK(!__builtin_add_overflow(staged, staged == n.sendBytes ? 0 : kLine, &rounded) &&
                       !__builtin_add_overflow(bytes, rounded, &bytes) && bytes <= kMaxSegmentBytes,
                   InvalidArgument, "commux: neighbourhood exchange: staged messages of more than ",
                   kMaxSegmentBytes, " bytes");
    }
  }
  std::string name;
  if (any) {
    segment_ = shm::Segment::create(bytes, /*nameless=*/true);
    bell_ = std::make_unique<shm::Bell>(reinterpret_cast<shm::BellWords*>(segment_->data()), spin,
                                        poll);
    name = segment_->name();
    COMMUX_ASSERT(name.size() < sizeof(Hello::segment));
  }
  peers_.resize(neighbours.size());
  for (std::size_t i = 0; i < neighbours.size(); ++i) {
    Peer& p = peers_[i];
    p.n = neighbours[i];
    if (bySide_.size() <= p.n.side) bySide_.resize(p.n.side + 1, -1);
    bySide_[p.n.side] = static_cast<int>(i);
    Hello& h = p.mine;
    h.magic = Hello::kMagic;
    h.shares = any && p.n.local;
    h.rangeFrom = range.from;
    h.rangeBelow = range.below;
    h.sends = p.n.sends;
    h.receives = p.n.receives;
    h.sendBytes = p.n.sends ? p.n.sendBytes : 0;
    h.recvBytes = p.n.receives ? p.n.recvBytes : 0;
    if (!h.shares) continue;
    p.myReady = counter(segment_->data(), i, false);
    p.myTaken = counter(segment_->data(), i, true);
    h.pid = static_cast<std::int32_t>(::getpid());
    h.index = static_cast<std::uint32_t>(i);
    h.segmentBytes = segment_->size();
    std::memcpy(h.segment, name.c_str(), name.size() + 1);
    if (stagedAt[i] != 0) {
      p.packInto = segment_->data() + stagedAt[i];
      h.stagedAt = stagedAt[i];
    } else if (p.n.sends) {
      for (const auto& r : *p.n.sendRows) {
        h.rows[h.rowCount++] = {reinterpret_cast<std::uintptr_t>(r.data), r.bytes,
                                static_cast<std::int64_t>(r.stride), r.count};
      }
    }
  }
}

SharedSides::~SharedSides() = default;

void SharedSides::check(const Peer& p, const Hello& h) const {
  const int rank = p.n.rank;
  std::uint64_t stagedEnd = 0;
  const bool staging =
      h.stagedAt == 0 ||
      (h.rowCount == 0 && h.stagedAt % kLine == 0 &&
       h.stagedAt >= linesBytes(h.index + std::uint64_t{1}) &&
       !__builtin_add_overflow(h.stagedAt, h.sendBytes, &stagedEnd) && stagedEnd <= h.segmentBytes);
  COMMUX_CHECK(
      h.magic == Hello::kMagic && h.rowCount <= Hello::kMaxRows &&
          (h.shares == 0 || (h.shares == 1 && h.pid > 0 && h.index < kMaxNeighbours &&
                             h.segmentBytes >= linesBytes(h.index + std::uint64_t{1}) &&
                             h.segmentBytes <= kMaxSegmentBytes && h.rowCount <= Hello::kMaxRows &&
                             staging && isSegmentOf(h.segment, sizeof(h.segment), h.pid))),
      Backend, "commux: neighbourhood exchange: the first message from rank ", rank,
      " is not an exchange's greeting (another exchange with the same tag on the same "
      "ranks?)");
  COMMUX_CHECK(p.n.sends == (h.receives != 0), InvalidArgument,
               "commux: neighbourhood exchange: this rank ",
               p.n.sends ? "sends to" : "sends nothing to", " rank ", rank, ", which ",
               h.receives ? "receives from" : "receives nothing from", " it");
  COMMUX_CHECK(p.n.receives == (h.sends != 0), InvalidArgument,
               "commux: neighbourhood exchange: this rank ",
               p.n.receives ? "receives from" : "receives nothing from", " rank ", rank, ", which ",
               h.sends ? "sends to" : "sends nothing to", " it");
  COMMUX_CHECK(!p.n.sends || p.n.sendBytes == h.recvBytes, InvalidArgument,
               "commux: neighbourhood exchange: this rank sends ", p.n.sendBytes,
               " bytes a step to rank ", rank, ", which receives ", h.recvBytes, " from it");
  COMMUX_CHECK(!p.n.receives || p.n.recvBytes == h.sendBytes, InvalidArgument,
               "commux: neighbourhood exchange: this rank receives ", p.n.recvBytes,
               " bytes a step from rank ", rank, ", which sends ", h.sendBytes, " to it");
  std::uint64_t total = 0;
  std::uint64_t pieces = 0;
  for (std::uint32_t k = 0; k < h.rowCount; ++k) {
    const Hello::Row& r = h.rows[k];
    std::uint64_t bytes = 0;
    COMMUX_CHECK(r.bytes != 0 && r.count != 0 &&
                     !__builtin_mul_overflow(r.bytes, r.count, &bytes) &&
                     !__builtin_add_overflow(total, bytes, &total) &&
                     !__builtin_add_overflow(pieces, r.count, &pieces),
                 Backend, "commux: neighbourhood exchange: rank ", rank,
                 " described its message with an impossible row");
  }
  // A message read where it lies has long pieces (readInPlace): as many iovecs as the
  // sender's policy allows, never one per byte of this rank's buffer.
  COMMUX_CHECK(pieces <= h.sendBytes / kReadPiecesFrom + 1, Backend,
               "commux: neighbourhood exchange: rank ", rank, " described its message of ",
               h.sendBytes, " bytes in ", pieces, " pieces");
  COMMUX_CHECK(h.shares == 0 || h.stagedAt != 0 || total == h.sendBytes, Backend,
               "commux: neighbourhood exchange: rank ", rank, " described ", total,
               " bytes of its message of ", h.sendBytes);
}

void SharedSides::connect(const std::vector<Hello>& theirs) {
  COMMUX_ASSERT(theirs.size() == peers_.size());
  for (std::size_t i = 0; i < peers_.size(); ++i) check(peers_[i], theirs[i]);
  for (std::size_t i = 0; i < peers_.size(); ++i) {
    Peer& p = peers_[i];
    const Hello& h = theirs[i];
    // Both ranks see the same sizes (checked above), and share only where both can and
    // the host's one range covers them: they agree.
    // The greeting's pid must be the one the peer record names: the process this rank
    // would read from and open a segment of is the one the group watches, not any other
    // process a greeting could name.
    const bool sameProcess = p.n.pid > 0 && h.pid == p.n.pid;
    if (p.mine.shares != 0 && h.shares != 0 && !sameProcess) {
      core::log(core::LogLevel::Warning,
                core::concat("commux: neighbourhood exchange: rank ", p.n.rank, "'s greeting names "
                             "process ", h.pid, ", its peer record ", p.n.pid,
                             "; its messages go through UCX"));
    }
    const bool both = p.mine.shares != 0 && h.shares != 0 && sameProcess &&
                      h.rangeFrom == range_.from && h.rangeBelow == range_.below;
    p.sendShared = both && p.n.sends && range_.covers(p.n.sendBytes);
    p.recvShared = both && p.n.receives && range_.covers(p.n.recvBytes);
    if (!p.sendShared && !p.recvShared) continue;
    p.pid = static_cast<pid_t>(h.pid);
    p.theirs = shm::Segment::open(h.segment, h.segmentBytes);
    p.theirReady = counter(p.theirs->data(), h.index, false);
    p.theirTaken = counter(p.theirs->data(), h.index, true);
    p.theirBell = std::make_unique<shm::Bell>(reinterpret_cast<shm::BellWords*>(p.theirs->data()),
                                              std::chrono::microseconds(0));
    if (p.recvShared && h.stagedAt != 0) {
      p.stagedFrom = p.theirs->data() + h.stagedAt;
    } else if (p.recvShared) {
      // Into this rank's rows as they lie where they are long, else into one piece and
      // unpacked (the kernel's copy into short pieces costs more than the unpacking).
      if (readInPlace(*p.n.recvRows, p.n.recvBytes)) {
        appendRows(*p.n.recvRows, p.local);
      } else {
        p.ownRecvStaging.reset(new char[p.n.recvBytes]);
        p.unpackFrom = p.ownRecvStaging.get();
        p.local.push_back(iovec{p.unpackFrom, p.n.recvBytes});
      }
      for (std::uint32_t k = 0; k < h.rowCount; ++k) {
        const Hello::Row& r = h.rows[k];
        for (std::uint64_t j = 0; j < r.count; ++j) {
          // Addresses in the neighbour's memory, computed modulo 2^64 (a negative stride
          // wraps); a bad one fails the copy, it cannot touch this process.
          const std::uint64_t at = r.address + static_cast<std::uint64_t>(r.stride) * j;
          p.remote.push_back(iovec{reinterpret_cast<void*>(static_cast<std::uintptr_t>(at)),
                                   static_cast<std::size_t>(r.bytes)});
        }
      }
    }
    active_ = true;
  }
}

bool SharedSides::sendsShared(std::size_t side) const noexcept {
  return side < bySide_.size() && bySide_[side] >= 0 &&
         peers_[static_cast<std::size_t>(bySide_[side])].sendShared;
}

bool SharedSides::receivesShared(std::size_t side) const noexcept {
  return side < bySide_.size() && bySide_[side] >= 0 &&
         peers_[static_cast<std::size_t>(bySide_[side])].recvShared;
}

void SharedSides::markReady(std::size_t side, std::uint64_t step) {
  Peer& p = peers_.at(static_cast<std::size_t>(bySide_.at(side)));
  if (p.packInto != nullptr) gather(*p.n.sendRows, p.packInto);
  __atomic_store_n(p.myReady, step, __ATOMIC_RELEASE);
  p.theirBell->ring();
}

bool SharedSides::advance(std::uint64_t step) {
  bool all = true;
  for (auto& p : peers_) {
    if (p.recvShared && p.read < step) {
      const std::uint64_t ready = __atomic_load_n(p.theirReady, __ATOMIC_ACQUIRE);
      if ((ready & kAbandoned) != 0 && (ready & ~kAbandoned) >= step) failAbandoned(p);
      if (ready >= step) {
        if (p.stagedFrom != nullptr) {
          scatter(p.stagedFrom, *p.n.recvRows);
        } else if (!shm::cmaReadv(p.pid, p.local.data(), p.local.size(), p.remote.data(),
                                  p.remote.size())) {
          const int error = errno;
          core::fail(
              core::ErrorKind::Backend,
              error == ESRCH
                  ? core::concat("commux: neighbourhood exchange: rank ", p.n.rank,
                                 "'s process is gone (it died during the step)")
                  : core::concat("commux: neighbourhood exchange: could not copy rank ", p.n.rank,
                                 "'s message out of its memory: ", std::strerror(error)),
              {__func__, __FILE__, __LINE__});
        }
        // The copy is whole only if they did not give the step up while it ran.
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        // (Nothing else moves the counter before this rank marks the message read.)
        if (__atomic_load_n(p.theirReady, __ATOMIC_RELAXED) != ready) failAbandoned(p);
        if (p.unpackFrom != nullptr) scatter(p.unpackFrom, *p.n.recvRows);
        __atomic_store_n(p.theirTaken, step, __ATOMIC_RELEASE);
        p.theirBell->ring();
        p.read = step;
      } else {
        all = false;
      }
    }
    if (p.sendShared && __atomic_load_n(p.myTaken, __ATOMIC_ACQUIRE) < step) all = false;
  }
  return all;
}

bool SharedSides::doneWith(std::size_t i, std::uint64_t step) const {
  const Peer& p = peers_.at(i);
  return (!p.recvShared || p.read >= step) &&
         (!p.sendShared || __atomic_load_n(p.myTaken, __ATOMIC_ACQUIRE) >= step);
}

void SharedSides::finish(std::uint64_t step, const std::function<std::string()>& interrupted) {
  std::string why;
  if (bell_->waitFor([&] { return advance(step); },
                     [&] {
                       why = interrupted();
                       return !why.empty();
                     })) {
    return;
  }
  core::fail(core::ErrorKind::Backend, why, {__func__, __FILE__, __LINE__});
}

void SharedSides::failAbandoned(const Peer& p) const {
  core::fail(core::ErrorKind::Backend,
             core::concat("commux: neighbourhood exchange: rank ", p.n.rank,
                          " gave the step up (it failed there) before this rank had read its "
                          "message"),
             {__func__, __FILE__, __LINE__});
}

void SharedSides::abandon(std::uint64_t step) noexcept {
  for (auto& p : peers_) {
    if (!p.sendShared) continue;
    std::uint64_t marked = step;
    // Only a message marked ready for this step and not read yet.
    if (__atomic_load_n(p.myTaken, __ATOMIC_ACQUIRE) < step &&
        __atomic_compare_exchange_n(p.myReady, &marked, step | kAbandoned, false, __ATOMIC_SEQ_CST,
                                    __ATOMIC_RELAXED)) {
      p.theirBell->ring();
    }
  }
}

void SharedSides::wake() {
  if (bell_) bell_->ring();
}

void SharedSides::withdraw() {
  if (segment_) segment_->unlink();
}

}  // namespace commux::halo
