#pragma once
// The collectives of a shared-memory channel, each a sequence of steps of shm/steps.hpp:
//  - allreduce, small buffers (<= COMMUX_SHM_SMALL_BYTES): each rank copies its data into
//    its slot; every rank folds all slots itself, in rank order, so the results agree bit
//    for bit. One synchronisation per allreduce. Reduce: only the root folds.
//  - allreduce, larger ones, in chunks of COMMUX_SHM_SLOT_BYTES: each rank copies its chunk
//    in; rank r folds block r of every slot into slot 0 and reports; every rank copies slot
//    0 out. Each byte is reduced once, by one rank, and the copies run in parallel.
//  - broadcast: the root fills all slots of the step, the others copy them out.
//  - allgather, gather: each rank fills its slot with a chunk of its block; readers copy
//    every slot out. scatter: the root fills every rank's slot with its block's chunk.
//  - reduce_scatter, all_to_all: each rank's slot holds one piece per destination rank; the
//    destination folds (reduce_scatter, in rank order) or copies its piece out of every
//    slot. all_to_all pieces may differ in size: each slot starts with the rank's send and
//    receive counts, which every rank checks against each other in the first step.
//  - from a size per kind (ChannelShape::cma: COMMUX_SHM_CMA_BYTES, or the leader's choice),
//    broadcast, (all)gather, scatter and all_to_all publish their buffers' addresses
//    instead and the readers copy straight out of the owner's memory (process_vm_readv,
//    shm/cma.hpp): one copy, all readers at once. The owner leaves once every reader has.
//    all_to_all decides per pair (the pair's count, the same on both sides): its large
//    pieces go direct, the others through the slots.
#include "shm/steps.hpp"

namespace commux::shm {

/// Runs `turn`'s collective through `steps` on the calling thread (the one that runs the
/// steps); returns when this rank's part is done, throws on failure (DeadlineReached when
/// the turn's deadline passed).
void runCollective(Steps& steps, const Turn& turn);

}  // namespace commux::shm
