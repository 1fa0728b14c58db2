#pragma once
// What one rank brings to a collective through a shared-memory channel.
#include <cstdint>
#include <memory>
#include <vector>

#include "core/buffer.hpp"
#include "core/reduce.hpp"
#include "engine/done_flag.hpp"

namespace commux::shm {

enum class Kind : std::uint32_t {
  Allreduce,
  Reduce,
  Broadcast,
  Allgather,
  Gather,
  Scatter,
  ReduceScatter,
  Alltoall,
  Barrier,
  /// No steps: holds the channel's order around the part of a collective that spans hosts
  /// between hosts (group/hierarchical_op.hpp), waiting for its gate if it has one.
  Hold,
};

const char* kindName(Kind kind) noexcept;
/// Reduce, broadcast, gather and scatter: the kinds whose root every rank must agree on.
bool hasRoot(Kind kind) noexcept;
/// Allreduce, reduce and reduce_scatter: the kinds whose op every rank must agree on.
bool reduces(Kind kind) noexcept;

/// Buffers are contiguous host memory, of one type; which ones a rank passes (present())
/// depends on the collective and on its role:
///  - Allreduce, Reduce, Broadcast: `buffer` in and out (Reduce: the result on the root).
///  - Allgather, Gather: `input` (n elements), `output` (size * n; Gather: root only).
///  - Scatter: `input` (size * n, root only), `output` (n).
///  - ReduceScatter: `input` (size * n), `output` (n).
///  - Alltoall: `input` and `output` with per-peer element counts, which may differ.
///  - Barrier, Hold: nothing.
struct Job {
  Kind kind = Kind::Barrier;
  int root = 0;
  core::ReduceOp reduce = core::ReduceOp::Sum;
  core::Buffer buffer;
  core::Buffer input;
  core::Buffer output;
  std::vector<std::size_t> sendCounts;
  std::vector<std::size_t> recvCounts;
  /// A part of a collective that spans hosts which must wait for the part between hosts
  /// (group/hierarchical_op.hpp): the channel waits for this flag before the first step. The
  /// job keeps its place in the channel's order meanwhile, so every rank of the host still
  /// runs the host's collectives in one order.
  std::shared_ptr<engine::DoneFlag> gate;

  /// Elements per rank, which every rank must agree on (Alltoall: checked per pair).
  std::uint64_t blockCount() const;
  /// The first buffer present, whose type is the job's (core::Buffer{} when none is).
  const core::Buffer& typed() const noexcept;
};

}  // namespace commux::shm
