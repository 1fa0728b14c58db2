#include "c10d/peer_table.hpp"

#include <c10/util/Exception.h>

#include <cstdlib>
#include <cstring>

namespace commux {
namespace {

// Record layout (little endian): magic, format version, context id, pid, start ticks (u64),
// length of the PID-space id, the PID-space id, then the worker address bytes.
constexpr std::uint32_t kMagic = 0x584d4d43;  // "CMMX"
constexpr std::uint32_t kFormat = 2;

void putU32(std::vector<uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::uint32_t getU32(const std::vector<uint8_t>& in, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[at + i]) << (8 * i);
  return v;
}

}  // namespace

std::string storeKeyPrefix() {
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return std::string("commux/") + (restart != nullptr && *restart != '\0' ? restart : "0") + "/";
}

PeerTable::PeerTable(c10::intrusive_ptr<c10d::Store> store, int rank, int size,
                     OnResolved onResolved)
    : store_(std::move(store)),
      rank_(rank),
      onResolved_(std::move(onResolved)),
      prefix_(storeKeyPrefix() + "peer/"),
      routes_(static_cast<std::size_t>(size)),
      known_(new std::atomic<bool>[static_cast<std::size_t>(size)]) {
  for (int r = 0; r < size; ++r) known_[r].store(false, std::memory_order_relaxed);
}

void PeerTable::publish(const std::string& address, std::uint32_t context) {
  const auto self = engine::ProcessId::self();
  std::vector<uint8_t> record;
  putU32(record, kMagic);
  putU32(record, kFormat);
  putU32(record, context);
  putU32(record, static_cast<std::uint32_t>(self.pid));
  putU32(record, static_cast<std::uint32_t>(self.startTicks));
  putU32(record, static_cast<std::uint32_t>(self.startTicks >> 32));
  putU32(record, static_cast<std::uint32_t>(self.pidSpace.size()));
  record.insert(record.end(), self.pidSpace.begin(), self.pidSpace.end());
  record.insert(record.end(), address.begin(), address.end());
  store_->set(prefix_ + std::to_string(rank_), record);
  std::lock_guard<std::mutex> lock(mutex_);
  routes_[rank_] = std::make_shared<engine::Route>(engine::Route{address, context});
  known_[rank_].store(true, std::memory_order_release);
}

std::shared_ptr<const engine::Route> PeerTable::get(int rank) {
  TORCH_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < routes_.size(), "commux: rank ", rank,
              " is outside the group");
  if (known_[rank].load(std::memory_order_acquire)) return routes_[rank];
  const std::vector<uint8_t> record = store_->get(prefix_ + std::to_string(rank));
  TORCH_CHECK(record.size() >= 28 && getU32(record, 0) == kMagic,
              "commux: rank ", rank, " published an unreadable peer record; "
              "is every rank running commux on the same process group?");
  TORCH_CHECK(getU32(record, 4) == kFormat, "commux: rank ", rank,
              " runs a commux with peer-record format ", getU32(record, 4), ", this rank uses ",
              kFormat, "; install the same commux version on every rank");
  engine::ProcessId process;
  process.pid = static_cast<std::int32_t>(getU32(record, 12));
  process.startTicks = getU32(record, 16) | (std::uint64_t{getU32(record, 20)} << 32);
  const std::size_t spaceLength = getU32(record, 24);
  TORCH_CHECK(record.size() > 28 + spaceLength, "commux: rank ", rank,
              " published a truncated peer record");
  process.pidSpace.assign(record.begin() + 28, record.begin() + 28 + spaceLength);
  auto route = std::make_shared<engine::Route>(engine::Route{
      std::string(record.begin() + 28 + spaceLength, record.end()), getU32(record, 8)});
  // Watch first: an operation on this route may only start once a death would be seen.
  if (onResolved_) onResolved_(rank, *route, process);
  std::lock_guard<std::mutex> lock(mutex_);
  if (!routes_[rank]) {
    routes_[rank] = std::move(route);
    known_[rank].store(true, std::memory_order_release);
  }
  return routes_[rank];
}

std::vector<std::shared_ptr<const engine::Route>> PeerTable::get(const std::vector<int>& ranks) {
  std::vector<std::shared_ptr<const engine::Route>> out(routes_.size());
  for (int r : ranks) out.at(r) = get(r);
  return out;
}

void PeerTable::resolveAll() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (allResolved_) return;
  }
  for (int r = 0; r < static_cast<int>(routes_.size()); ++r) get(r);
  std::lock_guard<std::mutex> lock(mutex_);
  allResolved_ = true;
}

std::vector<int> PeerTable::ranksAt(const std::string& address) const {
  std::vector<int> ranks;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t r = 0; r < routes_.size(); ++r) {
    if (routes_[r] && routes_[r]->address == address) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace commux
