#pragma once
// commux::ProcessGroupUCX: a c10d backend over UCX tag matching.
//
// Point-to-point calls match exactly on (sender, tag), like MPI; every call returns a Work
// at once while a per-process progress thread moves the data. See docs/semantics.md for
// the tag layout and docs/settings.md for the COMMUX_* environment variables.
#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <exception>
#include <mutex>
#include <string>

namespace commux {
namespace core {
struct SetupDeaths;
class KeyValueStore;
enum class ReduceOp : std::uint8_t;
}  // namespace core
namespace engine {
class Engine;
class Op;
class Description;
}  // namespace engine
namespace collectives {
struct Schedule;
struct Route;
enum class Collective : std::uint8_t;
}  // namespace collectives
namespace shm {
class Channel;
enum class Kind : std::uint32_t;
}  // namespace shm
namespace group {
class Group;
}  // namespace group
struct TensorJob;
class PeerTable;
class WorkUCX;
class WindowUCX;
class BackendHooks;

class ProcessGroupUCX : public c10d::Backend {
  friend class WindowUCX;

 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

  /// Collective over the group: every rank constructs its ProcessGroupUCX with a store
  /// shared by the group (torch hands each group its own prefixed store). The group's
  /// collective set-up (shared memory, the host layout) starts at once on a thread of its
  /// own when `setUpInBackground`, else at the first collective; pass false for a store
  /// whose calls need the caller's lock (one implemented in Python needs the GIL).
  /// `unconfigured` (torch's enable_reconfigure): the group has no members yet and refuses
  /// every operation ("not initialized") until reconfigure() gives it its members; it
  /// writes nothing under the store's keys for `rank` until then.
  ProcessGroupUCX(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout = kDefaultTimeout,
                  bool setUpInBackground = true, bool unconfigured = false);
  ~ProcessGroupUCX() override;

  const std::string getBackendName() const override { return "ucx"; }
  /// Collectives issued so far; equal on every rank of a healthy group (desync checks).
  uint64_t getSequenceNumberForGroup() override;
  /// Sequence numbers start at 0 on every rank: there is nothing to agree on.
  void setSequenceNumberForGroup() override {}
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
  /// The core group underneath, for core features torch has no call for (the
  /// neighbourhood exchange, halo/neighbour_exchange.hpp); it lives as long as this.
  group::Group& coreGroup() const noexcept { return *group_; }
  // Not marked override: c10d::Backend only declares setTimeout from torch 2.6 on; there
  // it overrides, before it is a plain member.
  void setTimeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // supportsCoalescing, split, getBackendOptions, abort and shutdown are not marked
  // override: torch 2.5's Backend does not declare them; from the torch that does, they
  // override.
  bool supportsCoalescing() const { return true; }
  /// Everything issued until endCoalescing() is also tracked by the one Work that
  /// endCoalescing() returns (batch_isend_irecv, the coalescing manager). With
  /// COMMUX_GROUP=1 it is also posted only then, all at once.
  void startCoalescing() override;
  c10::intrusive_ptr<c10d::Work> endCoalescing() override;

  bool supportsSplitting() const override { return true; }
#ifdef COMMUX_TORCH_HAS_IS_INITIALIZED
  /// False while a group made with enable_reconfigure waits for its first reconfigure (or
  /// after one that failed).
  bool isInitialized() override;
#endif
#ifdef C10D_BACKEND_HAS_RECONFIGURE
  /// torch's fault-tolerance membership change (src/c10d/reconfigure.cpp). Not while
  /// another thread issues or waits on this group's operations.
  bool supportsReconfigure() const override { return true; }
  /// "ucx:<rank>:<uuid>:<instance>": this group as its peers name it in reconfigure();
  /// exchanged out of band, and changed by every reconfigure.
  c10d::ReconfigureHandle get_reconfigure_handle() const override;
  /// The members are the processes whose handles `opts.handles` holds (ranks in list order,
  /// or sorted handles for a set); every one calls it with the same handles and uuid. What
  /// is in flight on the old membership is aborted (its members hear that this one left);
  /// returns once every member has joined, within `opts.timeout` (the group's timeout by
  /// default), else raises and the group stays not initialized until a reconfigure
  /// succeeds. Meets over this group's store under the uuid's own prefix: a reused uuid
  /// is refused on every member.
  c10::intrusive_ptr<c10d::Work> reconfigure(const c10d::ReconfigureOptions& opts) override;
#endif
  /// The subgroup of the parent-group ranks `ranks`, or null when this rank is not in it.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts);
#ifdef COMMUX_TORCH_HAS_MERGE
  /// torch's merge_remote_group: a new group of `size` ranks over `store`, shared by the
  /// processes that merge (each calls it once, torch numbers them in their order of
  /// arrival), on this process's UCX worker. A store serves one merge; a rank outside
  /// [0, size), as when more processes merge than `size`, is refused.
  c10::intrusive_ptr<c10d::Backend> merge(const c10::intrusive_ptr<c10d::Store>& store,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts,
                                          const int& rank, const int& size) override;
#endif
#ifdef COMMUX_TORCH_HAS_SHRINK
  bool supportsShrinking() const override { return true; }
  /// The group of every rank but `ranksToExclude` (torch's shrink_group), numbered in the
  /// old order, for the survivors of a failure: only they call it, every one with the same
  /// ranks and in the same order among their shrinks. It meets over this group's store,
  /// under a prefix of its own, on the process's UCX worker (no new port), with a
  /// shared-memory channel of its own (the old one may hold a dead rank's half-finished
  /// steps). Flag 1 (torch's SHRINK_ABORT) first aborts what is in flight in this group.
  c10::intrusive_ptr<c10d::Backend> shrink(
      const std::vector<int64_t>& ranksToExclude, int shrinkFlags = 0,
      const c10::intrusive_ptr<c10d::Backend::Options>& optsOverride = nullptr) override;
#endif
  /// Waits until every member has made the group, at most `timeout` (the group's when
  /// negative), and watches them all from then on; raises naming the missing ranks ("connect
  /// timeout after"). A group otherwise meets its peers at its first operation.
  void connect(std::chrono::milliseconds timeout = std::chrono::milliseconds(-1));
#ifdef COMMUX_TORCH_HAS_EAGER_CONNECT
  /// init_process_group(device_id=...): connect() within the group's timeout.
  void eagerConnectSingleDevice(at::Device) override { connect(); }
#endif
  /// The group's options (backend name, timeout), which torch's split_group hands to split().
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions();
  /// Runs the abort hooks, then cancels every operation in flight; later calls raise.
  void abort();
#ifdef C10D_BACKEND_HAS_HOOKS
  /// Run by abort() (and shrink's SHRINK_ABORT) before anything is cancelled: commux never
  /// aborts a group on its own (a failed collective fails, and the group refuses later
  /// ones), so these run only when someone aborts it.
  bool supportsAbortHooks() const override { return true; }
  void registerAbortHook(int64_t hookId, c10d::AbortHook hook) override;
  void unregisterAbortHook(int64_t hookId) override;
#endif
#ifdef COMMUX_TORCH_HAS_COMPLETION_HOOKS
  /// Run once per operation that completes successfully (Work::getCompletionKey), on the
  /// thread that completes it, under the worker lock: short, and without the GIL.
  bool supportsCompletionHooks() const override { return true; }
  void registerCompletionHook(int64_t hookId, c10d::CompletionHook hook) override;
  void unregisterCompletionHook(int64_t hookId) override;
#endif
#ifdef COMMUX_TORCH_HAS_EPHEMERAL_TIMEOUT
  /// `timeout` more for every operation made from now on, until the first of them
  /// completes; calls add up, each ending on its own.
  void addEphemeralTimeout(const std::chrono::milliseconds& timeout) override;
#endif
#ifdef COMMUX_TORCH_HAS_TIME_ESTIMATION
  /// torch's dist._time_estimator. Between start and end, this group's collectives and
  /// messages run nothing: after the checks of a real call they return a completed Work,
  /// their tensors untouched, and add what the models say the call takes on the path and
  /// schedule it would take (collectives/estimate.hpp). Local to this rank: the others need
  /// not estimate, and no sequence number is used. End returns microseconds.
  bool supportsTimeEstimation() const override { return true; }
  void startTimeEstimate() override;
  float endTimeEstimate() override;
#endif
  /// Later calls raise; operations in flight still finish.
  void shutdown();

  /// What this rank knows of the group's health (see docs/failures.md).
  struct Health {
    /// False once the group cannot run collectives: a member died, a collective failed on
    /// this rank, or the group was aborted or shut down. Point-to-point operations with
    /// live peers still work unless the group was aborted or shut down.
    bool healthy = true;
    /// Members known to be dead.
    std::vector<int> deadRanks;
    /// Why it is not healthy; empty when it is.
    std::string reason;
  };
  Health health() const;

  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dstRank,
                                      int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int srcRank,
                                      int tag) override;
  /// Blocking point-to-point for callers that wait at once, as MPI_Send / MPI_Recv do:
  /// the same matching, order, errors, timeout (the group's) and dead-peer handling as
  /// send(...)->wait(), without the Work. A contiguous CPU tensor is posted and completed
  /// on the calling thread when no other thread drives the worker; anything else (a CUDA
  /// or strided tensor, another thread driving, inside a coalescing window) takes the
  /// ordinary path. A receive that times out is cancelled before it raises.
  void sendBlocking(const at::Tensor& tensor, int dstRank, int tag);
  void recvBlocking(const at::Tensor& tensor, int srcRank, int tag);
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                               int tag) override;

  c10::intrusive_ptr<c10d::Work> allreduce(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  /// SUM of a sparse COO tensor (allreduce forwards sparse tensors here).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceOptions& opts = c10d::AllreduceOptions()) override;
  /// Each tensor is reduced on its own (unlike allreduce's list), in one collective.
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors,
      const c10d::AllreduceCoalescedOptions& opts = c10d::AllreduceCoalescedOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce(
      std::vector<at::Tensor>& tensors,
      const c10d::ReduceOptions& opts = c10d::ReduceOptions()) override;
  c10::intrusive_ptr<c10d::Work> broadcast(
      std::vector<at::Tensor>& tensors,
      const c10d::BroadcastOptions& opts = c10d::BroadcastOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather(
      std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputTensors,
      std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> gather(
      std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
#ifdef COMMUX_TORCH_HAS_GATHER_SINGLE
  /// gather into one flat buffer on the root (world size x the input's elements; torch's
  /// gather_single and gather_into_tensor).
  c10::intrusive_ptr<c10d::Work> gather_single(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer,
      const c10d::GatherOptions& opts = c10d::GatherOptions()) override;
#endif
  c10::intrusive_ptr<c10d::Work> scatter(
      std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
      const c10d::ScatterOptions& opts = c10d::ScatterOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(
      at::Tensor& outputBuffer, at::Tensor& inputBuffer, std::vector<int64_t>& outputSplitSizes,
      std::vector<int64_t>& inputSplitSizes,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> alltoall(
      std::vector<at::Tensor>& outputTensors, std::vector<at::Tensor>& inputTensors,
      const c10d::AllToAllOptions& opts = c10d::AllToAllOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& outputTensorLists,
      std::vector<at::Tensor>& inputTensors,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts = c10d::AllgatherOptions()) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts = c10d::ReduceScatterOptions()) override;
  /// The group's ranks by host (see HostLayout) once its first collective found that it
  /// spans hosts and shares memory inside them; empty otherwise.
  std::vector<std::vector<int>> hosts() const;
  /// This host's shared-memory channel as its leader shaped it: ranks, slot_bytes,
  /// copy_step_bytes, small_bytes, depth, where single-copy reads start per kind
  /// (cma_broadcast_from, cma_broadcast_below, cma_gather_scatter_from, cma_allgather_from,
  /// cma_alltoall_from, cma_neighbours_from; 0: never, or no end), crowded (1 when the host's ranks
  /// outnumber the CPUs they may run on together), and this process's poll_ns. Empty
  /// before the group's first collective set it up, and when the group has none.
  std::map<std::string, std::int64_t> sharedMemoryShape() const;
  /// The ranks whose records this rank has read (itself included), ascending: those it
  /// watches for death itself, unless COMMUX_FAILURE_DETECTION=off. Once the group spans
  /// hosts, the others' deaths reach it through the host leaders.
  std::vector<int> knownRanks() const;
#ifdef C10D_BACKEND_HAS_WINDOW
  /// One-sided windows (dist._new_window): commux/window_ucx.hpp.
  bool supportsWindow() const override { return true; }
  c10::intrusive_ptr<c10d::Window> new_window(
      const std::optional<at::Tensor>& tensor = std::nullopt) override;
#endif

  c10::intrusive_ptr<c10d::Work> barrier(
      const c10d::BarrierOptions& opts = c10d::BarrierOptions()) override;
  /// A barrier through rank 0 that names the ranks that did not arrive in time (all of
  /// them with `waitAllRanks`, else the first).
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks = false) override;

  /// Raises in a child forked after the group was made: the group's UCX worker, connections,
  /// store client and shared memory are the parent's, and its threads exist only there.
  void checkSameProcess() const;
  /// Every operation's first check: checkSameProcess, and a group waiting for its first
  /// reconfigure raises "not initialized" before its arguments are looked at.
  void checkEntry() const;
  /// Every collective's first step, before it validates its arguments: the group's
  /// collective set-up (shared memory) at its first collective, so that a rank whose
  /// arguments are refused still takes part and the others never wait for it there (they
  /// wait in the collective itself, under its timeout).
  void joinSetUp();

 private:
  c10::intrusive_ptr<WorkUCX> makeWork(c10d::OpType type, std::vector<at::Tensor> outputs,
                                       engine::Description description,
                                       std::chrono::milliseconds timeout);
  /// Runs `schedule` over the flat buffer `work`; `finalize` runs on completion.
  c10::intrusive_ptr<c10d::Work> launchCollective(
      c10d::OpType type, std::uint32_t sequence, engine::Description description,
      std::vector<at::Tensor> outputs, collectives::Schedule schedule, at::Tensor work,
      std::optional<core::ReduceOp> reduce, std::function<void()> finalize,
      std::chrono::milliseconds timeout, at::Tensor sendBuffer = {}, int onlyPeer = -1,
      bool callChecked = false);
  /// Launches `op` for `work` on the caller's CUDA stream when it has one; `collective`: an
  /// operation of every member (group::launchCollective: any death fails it, its failure
  /// refuses later collectives).
  void launch(const c10::intrusive_ptr<WorkUCX>& work, std::shared_ptr<engine::Op> op,
              bool collective = false);
  /// COMMUX_CHECK_COLLECTIVES on the UCX path: every rank compares what it called (operation,
  /// dtype, reduction, elements) with the others' before posting anything; a mismatch
  /// raises ValueError on every rank alike. An all-to-all brings its counts per rank
  /// (`sendCounts`, `recvCounts`), checked pair by pair (its own block included).
  void checkSameCollective(c10d::OpType type, const at::Tensor& work,
                           std::optional<core::ReduceOp> reduce,
                           const engine::Description& description,
                           std::chrono::milliseconds timeout,
                           const std::vector<std::size_t>* sendCounts = nullptr,
                           const std::vector<std::size_t>* recvCounts = nullptr);
  /// Whether a collective of every member runs the call check (COMMUX_CHECK_COLLECTIVES).
  bool checksCalls() const;
  std::uint32_t nextSequence();
  /// Where a collective runs: the group's one route (group::Group::route).
  collectives::Route routeFor(collectives::Collective collective, const char* what, bool cpu,
                              std::size_t bytes, std::shared_ptr<shm::Channel>& channel);
  /// `job` (as for a channel, with group ranks as roots and a dense buffer) in parts: shared
  /// memory inside hosts, UCX between them (hierarchical_api.cpp). `sequence` numbers its
  /// UCX part.
  c10::intrusive_ptr<c10d::Work> launchHierarchical(c10d::OpType type, TensorJob&& job,
                                                    engine::Description description,
                                                    std::vector<at::Tensor> outputs,
                                                    std::function<void()> finalize,
                                                    std::chrono::milliseconds timeout,
                                                    std::uint32_t sequence);
  /// `job` on this host's `channel` when the group shares one host, else in parts across
  /// hosts (launchHierarchical); described as `op` on `described` with `detail`.
  c10::intrusive_ptr<c10d::Work> launchShared(c10d::OpType type,
                                              const std::shared_ptr<shm::Channel>& channel,
                                              TensorJob&& job, const char* op,
                                              c10::ArrayRef<at::Tensor> described,
                                              std::string detail, std::vector<at::Tensor> outputs,
                                              std::function<void()> finalize,
                                              std::chrono::milliseconds timeout);
  /// Runs `job` on `channel`; `finalize` copies the results out when it completes.
  c10::intrusive_ptr<c10d::Work> launchShm(c10d::OpType type, engine::Description description,
                                           std::vector<at::Tensor> outputs,
                                           const std::shared_ptr<shm::Channel>& channel,
                                           TensorJob&& job, std::function<void()> finalize,
                                           std::chrono::milliseconds timeout);
  /// Raises once the group was aborted or shut down, or in a child forked after it was made.
  void checkUsable() const;
  /// Raises ValueError naming the operation when an operation of this group still in flight
  /// reads or writes `tensor`'s storage (`op` would free or move it under that operation).
  void checkStorageIdle(const char* op, const at::Tensor& tensor);
  /// Keeps `tensor`'s memory until the group is destroyed: peers may still write into it.
  void keepUntilDestroyed(at::Tensor tensor);
  /// all_to_all_single between contiguous tensors, with no staging. `uniform`: every
  /// rank's blocks are known to be of one size, the same on all ranks (collectives::
  /// planAlltoall may then choose Bruck).
  c10::intrusive_ptr<c10d::Work> alltoallDirect(const at::Tensor& input, const at::Tensor& output,
                                                std::vector<std::size_t> sendCounts,
                                                std::vector<std::size_t> recvCounts, bool uniform,
                                                std::chrono::milliseconds timeout,
                                                const char* schedule = nullptr);
  /// All-to-all over one buffer [input | output] with per-peer element counts.
  c10::intrusive_ptr<c10d::Work> alltoallFlat(c10d::OpType type, const char* name, at::Tensor input,
                                              std::vector<std::size_t> sendCounts,
                                              std::vector<std::size_t> recvCounts,
                                              std::vector<at::Tensor> outputs,
                                              std::function<void(const at::Tensor&)> unpack,
                                              bool uniform, std::chrono::milliseconds timeout,
                                              const char* schedule = nullptr);

  /// True between startTimeEstimate and endTimeEstimate: each operation, once its
  /// arguments are checked and before it stages or moves anything, returns estimated(...)
  /// instead.
  bool estimating() const noexcept { return estimating_.load(std::memory_order_acquire); }
  /// Adds the estimate of `collective` taking `route` over `count` elements like `like`'s
  /// (the buffer collectives::EstimateRequest names; elements of `elementSize` bytes when
  /// not 0) and returns a completed Work.
  c10::intrusive_ptr<c10d::Work> estimated(c10d::OpType type, collectives::Collective collective,
                                           const collectives::Route& route, const at::Tensor& like,
                                           std::size_t count, int root,
                                           std::vector<at::Tensor> outputs,
                                           std::size_t elementSize = 0);
  /// The same for a tagged message of `bytes`.
  c10::intrusive_ptr<c10d::Work> estimatedMessage(c10d::OpType type, std::size_t bytes,
                                                  std::vector<at::Tensor> tensors);
  /// Adds `seconds` to the estimate; a completed Work of `outputs`.
  c10::intrusive_ptr<c10d::Work> addEstimate(double seconds, c10d::OpType type,
                                             std::vector<at::Tensor> outputs);

  /// 16 hex digits that tell this group apart from any other process's or group's.
  static std::string makeInstanceId();

  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  const std::string instanceId_ = makeInstanceId();
  std::int64_t reconfigureUuid_ = -1;  // of the last successful reconfigure
  std::atomic<std::uint64_t> windows_{0};  // windows made so far (collectively, in order)
  std::atomic<std::uint64_t> shrinks_{0};  // groups shrunk from this one, in order
  std::atomic<bool> estimating_{false};
  std::mutex estimateMutex_;
  double estimatedSeconds_ = 0;  // under estimateMutex_
  // Guards coalesced_ and keptAlive_.
  std::mutex trackMutex_;
  // Memory of windows released without every peer's agreement (keepUntilDestroyed): freed
  // only after the group (declared before it).
  std::vector<at::Tensor> keptAlive_;
  // The Works of the open coalescing window, which endCoalescing's Work tracks.
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  // Abort and completion hooks, ephemeral timeouts (c10d/backend_hooks.hpp).
  std::shared_ptr<BackendHooks> hooks_;
  // What a group is (members, health, set-up, route, operations in flight): the core's.
  std::unique_ptr<group::Group> group_;
};

}  // namespace commux
