#pragma once
// Deciding, together, whether a group's collectives may use shared memory.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

namespace commux {
namespace engine {
class Engine;
}
namespace shm {
class Channel;
}

/// Collective over the group (every rank calls it at the same point): the group's channel
/// when every rank runs on this host, has COMMUX_SHM on and mapped the segment; else null,
/// on every rank alike.
std::shared_ptr<shm::Channel> connectShm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, std::shared_ptr<engine::Engine> engine);

}  // namespace commux
