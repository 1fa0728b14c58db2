#pragma once
// commux::ProcessGroupUCX: a c10d backend over UCX tag matching.
//
// Point-to-point calls match exactly on (sender, tag), like MPI; every call returns a Work
// at once while a per-process progress thread moves the data. See README.md for the tag
// layout and the COMMUX_* environment variables.
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
class BlockingTransfer;
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
struct TensorJob;
struct HostLayout;
class DeathRelay;
namespace core {
class GroupHealth;
}  // namespace core
class PeerTable;
class WorkUCX;
class WindowUCX;

class ProcessGroupUCX : public c10d::Backend {
  friend class WindowUCX;

 public:
  static constexpr std::chrono::milliseconds kDefaultTimeout = std::chrono::minutes(30);

  /// Collective over the group: every rank constructs its ProcessGroupUCX with a store
  /// shared by the group (torch hands each group its own prefixed store). The group's
  /// collective set-up (shared memory, the host layout) starts at once on a thread of its
  /// own when `setUpInBackground`, else at the first collective; pass false for a store
  /// whose calls need the caller's lock (one implemented in Python needs the GIL).
  ProcessGroupUCX(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                  std::chrono::milliseconds timeout = kDefaultTimeout,
                  bool setUpInBackground = true);
  ~ProcessGroupUCX() override;

  const std::string getBackendName() const override { return "ucx"; }
  /// Collectives issued so far; equal on every rank of a healthy group (desync checks).
  uint64_t getSequenceNumberForGroup() override { return sequence_.load(); }
  /// Sequence numbers start at 0 on every rank: there is nothing to agree on.
  void setSequenceNumberForGroup() override {}
  std::chrono::milliseconds timeout() const noexcept { return timeout_; }
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
  /// The subgroup of the parent-group ranks `ranks`, or null when this rank is not in it.
  c10::intrusive_ptr<c10d::Backend> split(const c10::intrusive_ptr<c10d::Store>& store,
                                          const std::vector<int>& ranks,
                                          const c10::intrusive_ptr<c10d::Backend::Options>& opts);
  /// The group's options (backend name, timeout), which torch's split_group hands to split().
  c10::intrusive_ptr<c10d::Backend::Options> getBackendOptions();
  /// Cancels every operation in flight; later calls raise.
  void abort();
  /// Later calls raise; operations in flight still finish.
  void shutdown();

  /// What this rank knows of the group's health (see README, "Failures").
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
  /// copy_step_bytes, small_bytes, depth, cma_bytes, crowded (1 when the host's ranks
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
      std::chrono::milliseconds timeout, at::Tensor sendBuffer = {}, int onlyPeer = -1);
  void launch(const c10::intrusive_ptr<WorkUCX>& work, std::shared_ptr<engine::Op> op);
  /// COMMUX_CHECK_COLLECTIVES on the UCX path: every rank compares what it called (operation,
  /// dtype, reduction, elements) with the others' before posting anything; a mismatch
  /// raises ValueError on every rank alike.
  void checkSameCollective(c10d::OpType type, const at::Tensor& work,
                           std::optional<core::ReduceOp> reduce,
                           const engine::Description& description,
                           std::chrono::milliseconds timeout);
  std::uint32_t nextSequence() { return sequence_++; }
  /// This host's shared-memory channel of the group, or null when there is none (the group
  /// cannot use one, this rank is alone on its host, or it broke). Waits for the group's
  /// set-up (running it here unless startSetUp's thread did) and raises its error.
  std::shared_ptr<shm::Channel> shmChannel();
  /// The group's set-up, collective over the group, under shmMutex_; records its outcome
  /// (shm_, layout_, the relay, or setUpError_) and sets shmDecided_. Talks to the store
  /// through `store` (the group's, or a connection of its own on startSetUp's thread).
  void setUp(const std::shared_ptr<core::KeyValueStore>& store);
  /// Runs setUp() on a thread of its own when the group sets up in the background.
  void startSetUp();
  /// Makes a set-up still waiting give up (telling the others why); once it returns, that
  /// thread no longer touches the group.
  void stopSetUp();
  /// The group's channel when this collective goes through shared memory (CPU tensors on a
  /// group whose ranks share a host), else null; every rank decides alike. Raises first
  /// when collectives may not run (an earlier one failed).
  std::shared_ptr<shm::Channel> shmFor(const char* what, bool cpu);
  /// Where a collective runs (collectives/route.hpp): the one decision every entry point
  /// takes. `bytes`: each rank's whole buffer, for the choice of parts; `channel` is set
  /// when the route is the shared-memory channel, else null. Raises first when
  /// collectives may not run, and when a forced algorithm cannot run here.
  collectives::Route routeFor(collectives::Collective collective, const char* what, bool cpu,
                              std::size_t bytes, std::shared_ptr<shm::Channel>& channel);
  /// Whether a collective of `kind` over `bytes` (each rank's whole buffer) runs in parts:
  /// the group spans hosts and some host has several ranks (known once shmFor has run), on
  /// CPU tensors, as COMMUX_HIERARCHY and its thresholds say. Every rank decides alike.
  bool hierarchical(shm::Kind kind, bool cpu, std::size_t bytes) const;
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
  /// How a collective set-up through the store (`what`) hears of this group's deaths,
  /// reading records through `via` (the group's store when null).
  core::SetupDeaths setupDeaths(const char* what,
                                std::shared_ptr<core::KeyValueStore> via = nullptr);
  /// Raises ValueError naming the operation when an operation of this group still in flight
  /// reads or writes `tensor`'s storage (`op` would free or move it under that operation).
  void checkStorageIdle(const char* op, const at::Tensor& tensor);
  /// Keeps `tensor`'s memory until the group is destroyed: peers may still write into it.
  void keepUntilDestroyed(at::Tensor tensor);
  /// True in a child forked after the group was made.
  bool inheritedByFork() const noexcept;
  /// sendBlocking/recvBlocking's wait for a transfer posted on this thread, and its outcome.
  void finishBlocking(engine::BlockingTransfer& transfer, bool isSend, int peer, int tag,
                      std::size_t bytes);
  /// Raises when `work` cannot run: a send to a dead peer, a collective after an earlier
  /// one failed. Returns the error for an operation that involves a dead peer but may
  /// still complete from what already arrived (receives, collectives): it is posted, then
  /// failed unless that completes it. Called under trackMutex_ (see markDead).
  std::string checkHealthy(const WorkUCX& work);
  /// Raises before a collective is staged when an earlier collective failed here (or the
  /// shared-memory channel broke): the ranks may be out of step.
  void checkCollectivesAllowed(const char* what);
  /// A cheap test: false when checkCollectivesAllowed would surely pass.
  bool collectivesMayBeRefused() const;
  /// Watch thread: the peer process at `address` died.
  void onPeerFailed(const std::string& address, const std::string& why);
  /// `rank` died: fail what waits on it, refuse what would, and tell who must hear of it
  /// from this rank (relayDeath). `from`: the rank whose death notice said so, or -1 when
  /// this rank saw it itself.
  void markDead(int rank, const std::string& why, int from = -1);
  /// Before a collective: every member's death must fail it. In a group that spans hosts
  /// the relay covers the members this rank does not watch; otherwise it watches them all.
  void watchMembers();
  /// Once the host layout is known (shmChannel, under shmMutex_): watch this host's ranks
  /// (and, as its leader, the other leaders) and start hearing death notices.
  void startRelay();
  /// Sends `rank`'s death (seen here, or told by `from`) to whoever learns it only from
  /// this rank (death_relay.hpp).
  void relayDeath(int rank, const std::string& why, int from);
  /// Fails the receives still in flight (nothing can complete them once the group is gone).
  void failOrphans(const std::string& why);
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

  std::shared_ptr<engine::Engine> engine_;
  std::uint32_t forkGeneration_;  // engine::forkGeneration() when the group was made
  int creatorPid_;
  std::shared_ptr<core::GroupHealth> health_;
  std::uint64_t failureListener_ = 0;
  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<core::KeyValueStore> keyValueStore_;  // store_, as the core uses it
  std::unique_ptr<PeerTable> peers_;
  std::uint32_t context_;
  std::chrono::milliseconds timeout_;
  std::atomic<std::uint32_t> sequence_{0};
  std::atomic<std::uint64_t> windows_{0};  // windows made so far (collectively, in order)

  enum class State : std::uint8_t { Running, ShutDown, Aborted };
  std::atomic<State> state_{State::Running};
  std::atomic<bool> coalescing_{false};
  // Guards coalesced_ and inflight_.
  std::mutex trackMutex_;
  std::vector<c10::intrusive_ptr<c10d::Work>> coalesced_;
  // COMMUX_GROUP: operations of the open window, posted together at endCoalescing.
  std::vector<std::shared_ptr<engine::Op>> deferredOps_;
  std::vector<c10::intrusive_ptr<WorkUCX>> deferredWorks_;
  // Operations abort() must cancel; completed entries are pruned as the list grows.
  std::vector<c10::weak_intrusive_ptr<WorkUCX>> inflight_;
  // Memory of windows released without every peer's agreement (keepUntilDestroyed).
  std::vector<at::Tensor> keptAlive_;
  std::size_t pruneAt_ = 64;

  const bool setUpInBackground_;
  // Shared with startSetUp's (detached) thread: it works on the group only under `mutex`,
  // and not at all once `cancelled`.
  struct SetUpControl {
    std::mutex mutex;
    bool cancelled = false;
  };
  std::shared_ptr<SetUpControl> setUpControl_;
  std::atomic<bool> setUpStop_{false};  // set once the group goes away: the set-up gives up
  mutable std::mutex shmMutex_;  // held through the set-up
  std::atomic<bool> shmDecided_{false};  // written under shmMutex_; read without it by joinSetUp
  std::exception_ptr setUpError_;        // under shmMutex_: why the set-up failed
  std::atomic<bool> setUpFailed_{false};  // setUpError_ is set
  // Set (before shmDecided_) when the group spans hosts and shares memory inside them.
  std::shared_ptr<const HostLayout> layout_;
  // Set once layout_ is and the relay listens (startRelay); read by markDead on any thread.
  std::unique_ptr<DeathRelay> relay_;
  std::atomic<bool> relayReady_{false};
  // Declared last: destroyed first, so its lane stops while the engine still runs. Read
  // and written with std::atomic_load/store: the watch thread reads it without shmMutex_,
  // which a first allreduce holds through the (blocking) shared-memory set-up.
  std::shared_ptr<shm::Channel> shm_;
};

}  // namespace commux
