#pragma once
// What every UCX collective of a group, or UCX part of a hierarchical one, starts from.
#include <cstdint>
#include <optional>

#include "collectives/schedule.hpp"
#include "engine/collective_op.hpp"
#include "engine/description.hpp"

namespace commux {

class PeerTable;

/// `schedule` with routes to its peers and this rank's tag fields (`context`, `rank`, the
/// `sequence` modulo COMMUX_SEQUENCE_WRAP). Refuses, before anything is sent, a schedule
/// whose rounds the tag cannot tell apart (the error names the collective and the `ranks`
/// the schedule runs among).
engine::CollectiveOp::Setup collectiveSetup(PeerTable& peers, collectives::Schedule schedule,
                                            std::optional<core::ReduceOp> reduce,
                                            std::uint32_t context, int rank,
                                            std::uint32_t sequence,
                                            const engine::Description& description, int ranks);

}  // namespace commux
