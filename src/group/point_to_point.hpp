#pragma once
// Tagged messages between the ranks of a core Group over plain buffers, for front ends
// without tensors: a send to a rank, a receive from a rank or from any rank, matched by
// (sender, tag) in order per pair as MPI does. Each checks its arguments before anything
// moves and returns the Request the Group tracks (a send to a dead rank is refused at the
// call; a receive from a rank that dies fails unless what it sent before completes it).
// Host or device memory: a device buffer's operation starts once `after` (the stream that
// produces or will read it) has run what is queued on it now.
//
// The caller keeps the buffer alive and leaves it alone until the Request is done.
#include <chrono>
#include <memory>
#include <optional>

#include "core/buffer.hpp"
#include "core/stream.hpp"
#include "group/request.hpp"

namespace commux::group {

class Group;

/// Any rank, for recv's `from`.
inline constexpr int kAnySource = -1;

/// Sends `buffer` to rank `to` with `tag` (0 .. 2^31 - 1).
std::shared_ptr<Request> send(Group& group, const core::Buffer& buffer, int to, int tag,
                              std::chrono::milliseconds timeout,
                              const std::optional<core::Stream>& after = std::nullopt);
/// Receives into `buffer` the next message with `tag` from rank `from` (or kAnySource:
/// Request::sourceRank() says who sent it). The message must fill the buffer exactly.
std::shared_ptr<Request> recv(Group& group, const core::Buffer& buffer, int from, int tag,
                              std::chrono::milliseconds timeout,
                              const std::optional<core::Stream>& after = std::nullopt);

}  // namespace commux::group
