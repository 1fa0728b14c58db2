#pragma once
// A collective algorithm, seen from one rank, as a list of steps. Each step posts its sends
// and receives together; the step ends when all of them complete, and only then do
// Reduce-mode receives get folded into the work buffer and the next step starts.
//
// Schedules are plain data (no torch, no UCX) so the algorithms can be unit tested alone.
// Offsets and counts are in elements of the work buffer. `round` is the id both ends of a
// transfer agree on; it goes into the UCX tag (see wire/tag.hpp).
//
// An executor may also hold a send buffer (an all-to-all's input, read in place). Sends read
// from it when it exists and their step's sendSource is Source::Send (the default), and so
// do copies whose source is Source::Send; without one, both read the work buffer.
#include <cstddef>
#include <cstdint>
#include <vector>

namespace commux::collectives {

struct Transfer {
  int peer = 0;
  std::uint32_t round = 0;
  std::size_t offset = 0;
  std::size_t count = 0;
};

enum class RecvMode : std::uint8_t {
  Copy,    // receive straight into work[offset, offset+count)
  Reduce,  // receive into scratch, then work[offset..] = work[offset..] (op) scratch
};

enum class Source : std::uint8_t {
  Send,  // the executor's send buffer when it has one, else the work buffer
  Work,  // always the work buffer
};

/// A local copy of `count` elements into work[to, to+count).
struct Copy {
  std::size_t from = 0;
  std::size_t to = 0;
  std::size_t count = 0;
  Source source = Source::Work;
};

struct Step {
  std::vector<Transfer> sends;
  std::vector<Transfer> recvs;
  RecvMode recvMode = RecvMode::Copy;
  /// Run in order when the step starts, before its sends are posted (Bruck's packing). CPU
  /// work buffers only. A step may hold copies alone; it ends as soon as they are done.
  std::vector<Copy> copies;
  Source sendSource = Source::Send;
};

struct Schedule {
  std::vector<Step> steps;
  /// Scratch elements the executor must provide: the largest sum of Reduce-mode receive
  /// counts in any one step (receives of a step land side by side in scratch).
  std::size_t scratchElements = 0;
  /// The work buffer must hold at least this many elements: schedules that keep data of
  /// their own past the caller's layout (Bruck's pack areas) say how far. 0 = no such data.
  std::size_t workElements = 0;

  /// Ranks this rank exchanges messages with (sorted, unique).
  std::vector<int> peers() const;
  void add(Step step);
};

/// [offset, offset+count) of block `index` when `count` elements are split into `parts`
/// near-equal blocks; the first (count % parts) blocks get one element more.
struct Range {
  std::size_t offset;
  std::size_t count;
};
Range blockRange(std::size_t count, int parts, int index);

/// Chunk `index` of a buffer of `count` elements cut into `chunk`-element pieces, as a
/// transfer to or from `peer` whose round is the chunk index (the pipelined chains).
Transfer chunkTransfer(std::size_t count, std::size_t chunk, std::size_t index, int peer);
/// Number of chunks of a pipelined chain; at least 1, so empty buffers still synchronise.
std::size_t chunkCount(std::size_t count, std::size_t chunk);

/// floor(log2(x)) for x >= 1.
int floorLog2(std::uint64_t x);

/// Ring allgather over a buffer holding one block per rank (blocks may differ in size):
/// rank r contributes blocks[r] and ends with all of them.
Schedule allgatherRing(int rank, int size, const std::vector<Range>& blocks,
                       std::uint32_t firstRound = 0);
/// Ring reduce-scatter: rank r ends with the reduction of blocks[r] over all ranks. With
/// `chunk` > 0 each ring step moves and folds its block in pieces of `chunk` elements.
Schedule reduceScatterRing(int rank, int size, const std::vector<Range>& blocks,
                           std::uint32_t firstRound = 0, std::size_t chunk = 0);
/// The chunks per ring step reduceScatterRing uses (rounds it takes = (p-1) * this).
std::size_t ringChunks(const std::vector<Range>& blocks, std::size_t chunk);
/// `count` elements split into `parts` near-equal blocks (see blockRange).
std::vector<Range> evenBlocks(std::size_t count, int parts);

Schedule allreduceRecursiveDoubling(int rank, int size, std::size_t count);
Schedule allreduceRing(int rank, int size, std::size_t count, std::size_t chunk = 0);
Schedule broadcastBinomial(int rank, int size, int root, std::size_t count);
Schedule broadcastChain(int rank, int size, int root, std::size_t count, std::size_t chunk);
Schedule reduceBinomial(int rank, int size, int root, std::size_t count);
Schedule reduceChain(int rank, int size, int root, std::size_t count, std::size_t chunk);
Schedule barrierDissemination(int rank, int size);
/// Binomial-tree gather of `count` elements per rank. The buffer holds p blocks in the
/// order of ranks relative to the root (block v belongs to rank (root + v) mod p); each
/// rank starts with its own block at v = (rank - root) mod p, the root ends with all.
Schedule gatherBinomial(int rank, int size, int root, std::size_t count);
/// The reverse: the root starts with all blocks (same layout), every rank ends with its own.
Schedule scatterBinomial(int rank, int size, int root, std::size_t count);
/// Pairwise all-to-all: in step k rank r sends sendBlocks[(r+k) mod p] to rank r+k and
/// receives recvBlocks[(r-k) mod p] from rank r-k (offsets into one buffer holding both).
/// The block for itself is not part of the schedule (copied locally).
Schedule alltoallPairwise(int rank, int size, const std::vector<Range>& sendBlocks,
                          const std::vector<Range>& recvBlocks);
/// Bruck's all-to-all of `count` elements per block (alltoall_bruck.cpp): ceil(log2 p)
/// steps; in step k rank r sends to r + 2^k one message packing every block whose index
/// relative to r has bit k set. Rank r's blocks for ranks 0..p-1 lie side by side from
/// `sendOffset` on the send side (Source::Send), the blocks it receives from ranks 0..p-1
/// from `recvOffset` in the work buffer, and the schedule packs in two areas of
/// alltoallBruckWorkspace(p, count) elements in all from `workspaceOffset` (workElements
/// says where they end). As with pairwise, the block for itself is the caller's to copy.
Schedule alltoallBruck(int rank, int size, std::size_t count, std::size_t sendOffset,
                       std::size_t recvOffset, std::size_t workspaceOffset);
/// Elements of the pack areas alltoallBruck needs: twice the most blocks one step moves.
std::size_t alltoallBruckWorkspace(int size, std::size_t count);
/// Blocks Bruck's step k moves: the indices in [1, p) with bit k set.
std::size_t alltoallBruckBlocks(int size, int step);


// Logarithmic algorithms for large groups (halving_doubling.cpp). The block lists must be
// contiguous (block i+1 starts where block i ends); blocks land at their final offsets.
// Rounds stay below 2 * log2(p) + 2 (at most 34 at the 65,536 ranks the tag can name), far
// inside the tag's 12-bit round field (wire/tag.hpp).

bool isPowerOfTwo(int size);
/// Recursive-doubling allgather: log2(p) pairwise exchanges of doubling ranges. Power-of-two
/// groups only (throws std::invalid_argument otherwise).
Schedule allgatherRecursiveDoubling(int rank, int size, const std::vector<Range>& blocks,
                                    std::uint32_t firstRound = 0);
/// Dissemination (Bruck) allgather for any p: ceil(log2 p) steps, rank r sends to r - 2^k
/// and receives from r + 2^k; a range that wraps around the buffer is two transfers.
Schedule allgatherDissemination(int rank, int size, const std::vector<Range>& blocks,
                                std::uint32_t firstRound = 0);
/// Recursive-halving reduce-scatter: rank r ends with the reduction of blocks[r]. Any p
/// (the first 2 * (p - pof2) ranks fold in pairs before and get their block back after).
Schedule reduceScatterRecursiveHalving(int rank, int size, const std::vector<Range>& blocks,
                                       std::uint32_t firstRound = 0);
/// Rabenseifner's allreduce: recursive-halving reduce-scatter of pof2 segments, then a
/// recursive-doubling allgather of them. Any p (same fold as allreduceRecursiveDoubling).
Schedule allreduceRabenseifner(int rank, int size, std::size_t count);
/// Broadcast for large buffers in large groups (van de Geijn): binomial scatter of p
/// segments, then a dissemination allgather of them; about 2 log2(p) steps and twice the
/// buffer through each rank, against log2(p) whole buffers (binomial) or p-2+chunks chunk
/// steps (chain).
Schedule broadcastScatterAllgather(int rank, int size, int root, std::size_t count);
/// The largest round a schedule uses (to check it against the tag's round field).
std::uint32_t maxRound(const Schedule& s);

}  // namespace commux::collectives
