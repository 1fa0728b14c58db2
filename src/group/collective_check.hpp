#pragma once
// COMMUX_CHECK_COLLECTIVES for calls that run as UCX schedules: before anything of a call is
// posted, every rank's signature of it (the operation, the element type, the reduction, the
// elements) goes round in an allgather of its own, and a mismatch raises InvalidArgument
// on every rank alike, so the group goes on. An all-to-all with counts per rank is checked
// pairwise as well: each rank's send count to a peer must be the peer's receive count from
// it (a short or long message would otherwise fail only the receiver, while the others wait
// for their timeout). (The shared-memory channel checks the same at its first step.)
// Without it, ranks that called different collectives exchange messages of the wrong size
// or wait for each other until the deadline.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/description.hpp"

namespace commux::group {

class Group;

/// What every rank's call must agree on; -1 for a field the call does not have (an
/// all-to-all's buffers differ with uneven splits: it leaves `count` out and brings its
/// counts per rank instead).
struct CallSignature {
  std::int64_t operation = -1;  // the front end's number of the operation
  std::int64_t type = -1;       // the front end's number of the element type
  std::int64_t reduce = -1;     // core::ReduceOp
  std::int64_t count = -1;      // elements of the buffer it runs over
  /// An all-to-all with counts per rank (both the group's size long; empty otherwise): the
  /// elements this rank sends to each rank and makes room for from each. Rank s's
  /// sendCounts[d] must equal rank d's recvCounts[s].
  std::vector<std::size_t> sendCounts;
  std::vector<std::size_t> recvCounts;
};

/// Names a signature in the error ("ALLREDUCE of 8 x Float, reduction 0").
using DescribeCall = std::function<std::string(const CallSignature&)>;

/// Runs the check for the call `description` (which every rank is about to post) and
/// raises InvalidArgument naming rank 0's call and the first that differs, or, for counts
/// per rank, the first pair whose counts differ (the same error on every rank). Its
/// collectives (an allgather; with counts, an all-to-all of them and an allgather of what
/// each rank found) take collective sequence numbers of their own and fail as a collective
/// does (a death, the `timeout`, which bounds the whole check).
void checkSameCall(Group& group, const CallSignature& mine, const engine::Description& description,
                   std::chrono::milliseconds timeout, const DescribeCall& describe);

}  // namespace commux::group
