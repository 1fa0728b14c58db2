#pragma once
// COMMUX_CHECK_COLLECTIVES for calls that run as UCX schedules: before anything of a call is
// posted, every rank's signature of it (the operation, the element type, the reduction, the
// elements) goes round in an allgather of its own, and a mismatch raises InvalidArgument
// on every rank alike, so the group goes on. (The shared-memory channel checks the same
// at its first step.) Without it, ranks that called different collectives exchange
// messages of the wrong size or wait for each other until the deadline.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "engine/description.hpp"

namespace commux::group {

class Group;

/// What every rank's call must agree on; -1 for a field the call does not have (an
/// all-to-all's buffers differ with uneven splits: it leaves `count` out).
struct CallSignature {
  std::int64_t operation = -1;  // the front end's number of the operation
  std::int64_t type = -1;       // the front end's number of the element type
  std::int64_t reduce = -1;     // core::ReduceOp
  std::int64_t count = -1;      // elements of the buffer it runs over
};

/// Names a signature in the error ("ALLREDUCE of 8 x Float, reduction 0").
using DescribeCall = std::function<std::string(const CallSignature&)>;

/// Runs the check for the call `description` (which every rank is about to post) and
/// raises InvalidArgument naming rank 0's call and the first that differs. Its allgather
/// takes a collective sequence number of its own and fails as a collective does (a death,
/// the `timeout`).
void checkSameCall(Group& group, const CallSignature& mine, const engine::Description& description,
                   std::chrono::milliseconds timeout, const DescribeCall& describe);

}  // namespace commux::group
