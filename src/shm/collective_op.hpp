#pragma once
// A collective that runs through the group's shared-memory channel instead of UCX. To the
// engine it is an ordinary Op (so timeouts, abort and coalescing windows treat it like any
// other); starting it only queues it on the channel's lane, which runs the group's
// shared-memory collectives one after another, in issue order, and reports back through
// Engine::finish.
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "engine/op.hpp"
#include "engine/reduce_kernels.hpp"

namespace commux::shm {

class Channel;

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
};

const char* kindName(Kind kind) noexcept;
/// Reduce, broadcast, gather and scatter: the kinds whose root every rank must agree on.
bool hasRoot(Kind kind) noexcept;
/// Allreduce, reduce and reduce_scatter: the kinds whose op every rank must agree on.
bool reduces(Kind kind) noexcept;

/// What one rank brings to a shared-memory collective. Buffers are 1-D, contiguous, on the
/// CPU; which ones a rank passes depends on the collective and on its role:
///  - Allreduce, Reduce, Broadcast: `buffer` in and out (Reduce: the result on the root).
///  - Allgather, Gather: `input` (n elements), `output` (size * n; Gather: root only).
///  - Scatter: `input` (size * n, root only), `output` (n).
///  - ReduceScatter: `input` (size * n), `output` (n); in parts across hosts, the rank that
///    crosses also a private `buffer` (size * n) its host's sum lands in.
///  - Alltoall: `input` and `output` with per-peer element counts, which may differ.
///  - Barrier: nothing.
/// A group that spans hosts runs allreduce, reduce, broadcast, allgather, reduce_scatter and
/// barrier in parts: shared memory among the ranks of each host (this channel) and UCX
/// between hosts (`cross`). The group (c10d/hierarchical_api.cpp) plans the parts; the
/// channel runs them in order.
struct HostParts {
  /// Allreduce only: reduce-scatter here, every rank crosses with its counterparts on the
  /// other hosts for its block, allgather here. Otherwise one rank per host crosses.
  bool parallel = false;
  /// Reduce and broadcast: the root runs on this host (as channel index `localRoot`), so
  /// this host's shared-memory part gathers to it or starts from it. Else `localRoot` is 0.
  bool rootHere = false;
  int localRoot = 0;
  /// Allgather and reduce_scatter, on the rank that crosses: every rank's block, host by
  /// host (this host's blocks, in channel order, from element `hostOffset`); the part
  /// between hosts runs on it.
  at::Tensor hostOrder;
  int64_t hostOffset = 0;
  /// This rank's part between hosts, on `buffer` (blocking; throws on failure; gives up
  /// when `outer` is finished: timed out or aborted). False when it gave up at `deadline`,
  /// that of a waiter running the channel's work (cancelled then). Empty where this rank
  /// does not cross.
  std::function<bool(const at::Tensor& buffer, const engine::Op& outer,
                     std::chrono::steady_clock::time_point deadline)>
      cross;
};

struct Job {
  Kind kind = Kind::Barrier;
  int root = 0;
  engine::ReduceKind reduce = engine::ReduceKind::Sum;
  at::Tensor buffer;
  at::Tensor input;
  at::Tensor output;
  std::vector<std::size_t> sendCounts;
  std::vector<std::size_t> recvCounts;
  /// Set when the group spans hosts (see HostParts).
  std::shared_ptr<const HostParts> hierarchy;

  /// Elements per rank, which every rank must agree on (Alltoall: checked per pair).
  std::uint64_t blockCount() const;
  at::ScalarType dtype() const;
};

class CollectiveOp final : public engine::Op {
 public:
  CollectiveOp(std::weak_ptr<Channel> channel, Job job, std::function<void()> finalize,
               engine::Description description, Done done);

  void start(engine::Engine& engine) override;
  /// Runs the collective on the waiting thread when it is next in line and the lane idles.
  void assist(std::chrono::steady_clock::time_point deadline) override;
  bool usesWorker() const noexcept override { return false; }

  const Job& job() const noexcept { return job_; }
  /// Lane only: the job of the next part of a hierarchical collective.
  void setJob(Job job) { job_ = std::move(job); }
  /// Copies the result out to the user's tensors (lane thread, after the collective).
  void finalize();
  /// The lane is done with it: a failure reported from now on needs no clean-up.
  void markRan() noexcept { ran_.store(true, std::memory_order_release); }

 protected:
  void onComplete(engine::Engine& engine, std::uint32_t slot,
                  const engine::RecvInfo& info) override {}
  /// Timed out or aborted before the lane finished it: the peers must stop waiting for
  /// this rank now, not when the lane next looks.
  void onFailed() override;

 private:
  std::weak_ptr<Channel> channel_;
  Job job_;
  std::function<void()> finalize_;
  std::atomic<bool> ran_{false};
};

}  // namespace commux::shm
