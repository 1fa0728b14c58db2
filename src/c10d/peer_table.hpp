#pragma once
// Who the other ranks of a group are. Each rank publishes its worker address and its
// local context id for the group under "commux/peer/<rank>" in the group's store; the
// others read it the first time they talk to that rank, so connecting is lazy and a
// group of p ranks costs nothing for pairs that never communicate.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>
#include <mutex>
#include <vector>

#include "engine/route.hpp"

namespace commux {

class PeerTable {
 public:
  PeerTable(c10::intrusive_ptr<c10d::Store> store, int rank, int size);

  void publish(const std::string& address, std::uint32_t context);
  /// The route to `rank`; blocks on the store the first time (caller threads only).
  std::shared_ptr<const engine::Route> get(int rank);
  /// Routes for a set of ranks, indexed by rank (others left empty).
  std::vector<std::shared_ptr<const engine::Route>> get(const std::vector<int>& ranks);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  int rank_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<const engine::Route>> routes_;
};

}  // namespace commux
