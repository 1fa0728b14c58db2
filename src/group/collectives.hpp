#pragma once
// The collectives of a core Group over plain buffers, for front ends that hold pointers
// and byte counts rather than tensors (the C API, C++ and Rust engines): each checks its
// arguments before anything moves, takes the Group's one route (Group::route) to the
// host's shared-memory channel or a UCX schedule, and returns the Request the Group tracks
// (wait on it; a member's death, an abort or its deadline fails it). The c10d adapter
// stages tensors its own way and shares the launch underneath (scheduleSetup,
// launchCollective).
//
// A group that spans hosts runs them in parts where the route says so (shared memory in
// each host, a schedule between hosts: group/hierarchical.hpp), as the adapter does. Host
// memory only for now: a device buffer needs a fold on the device, which the c10d adapter
// brings (TensorScheduleOp). Gather, scatter and all-to-all stay flat across hosts.
//
// The caller keeps every buffer alive and leaves it alone until the Request is done (a
// Buffer's `owner`, when set, is held until then too).
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "collectives/schedule.hpp"
#include "collectives/selection.hpp"
#include "core/buffer.hpp"
#include "core/reduce.hpp"
#include "core/stream.hpp"
#include "engine/schedule_op.hpp"
#include "engine/description.hpp"
#include "group/request.hpp"

namespace commux::group {

class Group;

/// Host or device memory (allreduce, reduce, broadcast, allgather, reduce_scatter; device
/// memory where the build has the device operations, cuda/device_ops.hpp): a device
/// collective starts once `after` (the legacy default stream when empty) has run what is
/// queued on it now, its own copies go on that stream, and its result is there in that
/// stream's order. Device memory never takes the shared-memory channel.
///
/// `input` (allreduce, reduce and broadcast): when present and not `buffer` itself, what
/// the call runs over, copied into `buffer` (the caller's output: same size, kind of
/// memory, no overlap) only once the call's arguments and COMMUX_CHECK_COLLECTIVES passed,
/// so a refused call leaves the output as it was.
///
/// Reduces `buffer` with `op` across the group, in place on every rank.
std::shared_ptr<Request> allreduce(Group& group, const core::Buffer& buffer, core::ReduceOp op,
                                   std::chrono::milliseconds timeout,
                                   const std::optional<core::Stream>& after = std::nullopt,
                                   const core::Buffer& input = {});
/// Rank `root`'s `buffer` ends with the reduction; the others' buffers keep their values.
std::shared_ptr<Request> reduce(Group& group, const core::Buffer& buffer, core::ReduceOp op,
                                int root, std::chrono::milliseconds timeout,
                                const std::optional<core::Stream>& after = std::nullopt,
                                const core::Buffer& input = {});
/// Every rank's `buffer` ends with rank `root`'s.
std::shared_ptr<Request> broadcast(Group& group, const core::Buffer& buffer, int root,
                                   std::chrono::milliseconds timeout,
                                   const std::optional<core::Stream>& after = std::nullopt,
                                   const core::Buffer& input = {});
/// `output` (size x input's elements, input's type) ends with every rank's `input`, in rank
/// order. `input` may be this rank's own block of `output`.
std::shared_ptr<Request> allgather(Group& group, const core::Buffer& input,
                                   const core::Buffer& output, std::chrono::milliseconds timeout,
                                   const std::optional<core::Stream>& after = std::nullopt);
/// `output` ends with block `rank` (output's elements each) of the reduction with `op` of
/// every rank's `input` (size x output's elements); `input` keeps its values.
std::shared_ptr<Request> reduceScatter(Group& group, const core::Buffer& input,
                                       const core::Buffer& output, core::ReduceOp op,
                                       std::chrono::milliseconds timeout,
                                       const std::optional<core::Stream>& after = std::nullopt);
/// Rank `root`'s `output` (size x input's elements) ends with every rank's `input`, in rank
/// order; `output` is read only on the root.
std::shared_ptr<Request> gather(Group& group, const core::Buffer& input, const core::Buffer& output,
                                int root, std::chrono::milliseconds timeout);
/// Every rank's `output` ends with block `rank` of rank `root`'s `input` (size x output's
/// elements); `input` is read only on the root.
std::shared_ptr<Request> scatter(Group& group, const core::Buffer& input,
                                 const core::Buffer& output, int root,
                                 std::chrono::milliseconds timeout);
/// Block d of `input` goes to rank d, and block s of `output` comes from rank s: blocks of
/// `sendCounts[d]` and `recvCounts[s]` elements, in rank order (both empty: equal blocks,
/// size of them in each buffer). Rank s's sendCounts[d] must equal rank d's recvCounts[s];
/// a rank's own block is copied locally, so its two counts for itself must be equal.
std::shared_ptr<Request> alltoall(Group& group, const core::Buffer& input,
                                  const core::Buffer& output, std::vector<std::size_t> sendCounts,
                                  std::vector<std::size_t> recvCounts,
                                  std::chrono::milliseconds timeout);
/// Done once every rank has entered it.
std::shared_ptr<Request> barrier(Group& group, std::chrono::milliseconds timeout);

// --- The launch underneath, shared with the c10d adapter ------------------------------

/// The selection's settings from the process's configuration (COMMUX_* thresholds) for a
/// buffer in device memory or not; `forced`: the schedule the call's route forces, or null.
collectives::Thresholds thresholds(bool deviceMemory, const char* forced = nullptr);
/// `schedule` with routes to its peers and this rank's tag fields (the group's context, its
/// rank, `sequence` modulo COMMUX_SEQUENCE_WRAP). Raises InvalidArgument, before anything
/// is sent, for a schedule whose rounds the tag cannot tell apart (the error names the
/// collective and the `ranks` the schedule runs among).
engine::ScheduleOp::Setup scheduleSetup(Group& group, collectives::Schedule schedule,
                                          std::optional<core::ReduceOp> reduce,
                                          std::uint32_t sequence,
                                          const engine::Description& description, int ranks);
/// Launches `op`, a collective of every member, for `request`: any member's death fails
/// it (also one this rank does not talk to: its partners would wait for it), and its
/// failure makes the group refuse later collectives (the ranks may be out of step).
void launchCollective(Group& group, const std::shared_ptr<Request>& request,
                      std::shared_ptr<engine::Op> op,
                      const std::optional<core::Stream>& stream = std::nullopt);

}  // namespace commux::group
