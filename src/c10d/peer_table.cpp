#include "c10d/peer_table.hpp"

#include <c10/util/Exception.h>

#include <cstring>

namespace commux {
namespace {

// Record layout: magic, format version, context id, then the worker address bytes.
constexpr std::uint32_t kMagic = 0x584d4d43;  // "CMMX"
constexpr std::uint32_t kFormat = 1;

std::string key(int rank) { return "commux/peer/" + std::to_string(rank); }

void putU32(std::vector<uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::uint32_t getU32(const std::vector<uint8_t>& in, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[at + i]) << (8 * i);
  return v;
}

}  // namespace

PeerTable::PeerTable(c10::intrusive_ptr<c10d::Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), routes_(static_cast<std::size_t>(size)) {}

void PeerTable::publish(const std::string& address, std::uint32_t context) {
  std::vector<uint8_t> record;
  putU32(record, kMagic);
  putU32(record, kFormat);
  putU32(record, context);
  record.insert(record.end(), address.begin(), address.end());
  store_->set(key(rank_), record);
  std::lock_guard<std::mutex> lock(mutex_);
  routes_[rank_] = std::make_shared<engine::Route>(engine::Route{address, context});
}

std::shared_ptr<const engine::Route> PeerTable::get(int rank) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (routes_.at(rank)) return routes_[rank];
  }
  const std::vector<uint8_t> record = store_->get(key(rank));
  TORCH_CHECK(record.size() > 12 && getU32(record, 0) == kMagic,
              "commux: rank ", rank, " published an unreadable peer record; "
              "is every rank running commux on the same process group?");
  TORCH_CHECK(getU32(record, 4) == kFormat, "commux: rank ", rank,
              " runs a commux with peer-record format ", getU32(record, 4), ", this rank uses ",
              kFormat, "; install the same commux version on every rank");
  auto route = std::make_shared<engine::Route>(engine::Route{
      std::string(record.begin() + 12, record.end()), getU32(record, 8)});
  std::lock_guard<std::mutex> lock(mutex_);
  if (!routes_[rank]) routes_[rank] = std::move(route);
  return routes_[rank];
}

std::vector<std::shared_ptr<const engine::Route>> PeerTable::get(const std::vector<int>& ranks) {
  std::vector<std::shared_ptr<const engine::Route>> out(routes_.size());
  for (int r : ranks) out.at(r) = get(r);
  return out;
}

}  // namespace commux
