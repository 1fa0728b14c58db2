#pragma once
// Run-time configuration of commux, read once from COMMUX_* environment variables.
// docs/settings.md's table documents each one; UCX's own UCX_* variables pass
// through to UCX untouched.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace commux {

/// How peer deaths are found (COMMUX_FAILURE_DETECTION).
enum class FailureDetection {
  /// A peer on this host (same kernel and PID namespace) is watched through a pidfd;
  /// any other through UCX's peer error handling on its endpoint.
  Auto,
  /// Every peer through UCX's peer error handling (also on this host).
  Ucx,
  /// Not at all: a dead peer shows as a timeout.
  Off,
};

enum class Hierarchy { Auto, Leader, Parallel, Off };

/// How large pieces are written into shared-memory slots (COMMUX_SHM_STREAM).
enum class ShmStream { Auto, Off, On };

struct Config {
  /// COMMUX_PROGRESS_SPIN_US: how long the progress thread keeps polling UCX after its last
  /// event before it sleeps on the worker's event fd. Callers and waiters drive the worker
  /// themselves, so a spinning progress thread mostly steals CPU from them.
  std::chrono::microseconds progressSpin{0};
  /// COMMUX_WAIT_SPIN_US: how long Work::wait drives the worker itself before it sleeps.
  /// Then the first waiter to sleep parks on the worker's event fd, still driving it, so a
  /// completion wakes it directly (the progress thread stands by); any other sleeps on its
  /// operation, which the parked waiter or the progress thread completes
  /// (src/engine/waker.hpp).
  std::chrono::microseconds waitSpin{100};
  /// COMMUX_HANDOFF_DELAY_US: how long after a caller stops driving the worker (it posted
  /// an operation and returned, or its wait ended) the progress thread takes over what is
  /// still in flight: Waker::deferHandOff (from Engine::submit and Waker::driverLeft),
  /// pushed back by the caller's next operation, so a loop of short operations never wakes
  /// it; 0 wakes it at once.
  std::chrono::microseconds handOffDelay{1000};
  /// COMMUX_COALESCE: a send/recv of several tensors travels as ONE UCX message (an IOV
  /// list) instead of one message per tensor. It changes the wire format: every rank must
  /// agree, and a receiver that meets the other format raises an error naming it.
  bool coalesce = false;
  /// COMMUX_GROUP: operations issued inside a coalescing window (startCoalescing ..
  /// endCoalescing, as batch_isend_irecv does) are posted together at endCoalescing, like
  /// ncclGroupStart/End, instead of one by one as they are issued.
  bool group = false;
  /// COMMUX_ALLREDUCE_RING_MIN_BYTES: allreduce uses the ring from this size up,
  /// recursive doubling below it.
  std::size_t allreduceRingMinBytes = 256 * 1024;
  /// COMMUX_CHAIN_MIN_BYTES: broadcast and reduce use pipelined chains from this size up
  /// (on 3+ ranks), binomial trees below it.
  std::size_t chainMinBytes = 512 * 1024;
  /// COMMUX_PIPELINE_CHUNK_BYTES: chunk size of the pipelined chains, and the piece size in
  /// which ring reduce-scatter steps move and fold their blocks.
  std::size_t pipelineChunkBytes = 512 * 1024;
  /// COMMUX_CUDA_CHUNK_BYTES: the same for CUDA buffers. Each piece there costs a trip
  /// through a CUDA stream (the fold, then a host function), so pieces are far larger.
  std::size_t cudaChunkBytes = 16 * 1024 * 1024;
  /// COMMUX_LOG_ALGORITHMS_MIN_RANKS: from this group size on, allgather, reduce-scatter,
  /// allreduce and broadcast pick logarithmic algorithms (recursive doubling/halving,
  /// dissemination, Rabenseifner, scatter+allgather) by the cost model; smaller groups keep
  /// the rings and trees measured on one host (docs/design.md, "Algorithms at scale").
  int logAlgorithmsMinRanks = 9;
  /// COMMUX_ALGORITHM_<COLLECTIVE> (ALLREDUCE, REDUCE, BROADCAST, ALLGATHER, REDUCE_SCATTER,
  /// GATHER, SCATTER, ALL_TO_ALL, BARRIER), indexed by collectives::Collective: the
  /// algorithm that collective always takes, by its name in the collective's table
  /// (src/collectives/route.cpp); empty: chosen by size and group. Same on every rank.
  std::string algorithms[9];
  /// COMMUX_RING_MIN_BLOCK_BYTES: from this many bytes per rank's block the rings stay.
  std::size_t ringMinBlockBytes = 256 * 1024;

  /// COMMUX_SHM: collectives between ranks on one host (allreduce, reduce, broadcast,
  /// allgather, reduce_scatter, gather, scatter, all_to_all, barrier; CPU tensors) go
  /// through a shared-memory segment instead of UCX; in a group that spans hosts, each
  /// host's part of the host-aware collectives does (COMMUX_HIERARCHY). The ranks agree on
  /// it at the group's first collective: it is used only if every rank has it on and could
  /// map the segment.
  bool shm = true;
  /// COMMUX_WINDOW_SHARE: a window's owning tensor_register (dist._new_window(tensor))
  /// moves the tensor's storage into shared memory, in place, as tensor.share_memory_()
  /// does (the tensor and its views follow; a raw pointer taken before does not), so that
  /// every peer on its host writes into it directly (the "mapped" path) instead of through
  /// process_vm_writev or messages: on one host that is the difference between 0.5 and
  /// 2.5x MPI RMA's time (docs/performance.md). Only storage from torch's own CPU
  /// allocator moves (not torch.from_numpy's or from_blob's, whose owner keeps reading the
  /// old memory), and never for tensor_register(tensor, owning=False). 0 turns it off.
  bool windowShare = true;
  /// COMMUX_SHM_SLOT_BYTES: bytes each rank stages per step of a shared-memory collective
  /// (rounded up to 4 KiB); the segment holds two of these per rank. 0 (the default): rank
  /// 0 picks 256 KiB, or, when the group's ranks outnumber its cores, 16 MiB / ranks within
  /// [256 KiB, 1 MiB]: fewer, larger steps, since every step waits for every rank and an
  /// oversubscribed rank may be off its core (docs/performance.md).
  std::size_t shmSlotBytes = 0;
  /// COMMUX_SHM_DEPTH: sets of small slots (COMMUX_SHM_SMALL_BYTES per rank each), i.e. how
  /// many small collectives a rank may run ahead of the slowest: 2, 4, 8 or 16. 0 (the
  /// default): 2, or 8 when the group's ranks outnumber its cores, so that a rank that has
  /// its core runs several small collectives while the others wait for theirs.
  std::uint32_t shmDepth = 0;
  /// COMMUX_SHM_SMALL_BYTES: up to this size a shared-memory allreduce takes one step, with
  /// every rank folding the whole buffer; above it, each rank folds its own block. Also the
  /// size of a small slot (COMMUX_SHM_DEPTH).
  std::size_t shmSmallBytes = 16 * 1024;
  /// COMMUX_SHM_CMA_BYTES: from this many bytes per rank, broadcast, (all)gather, scatter
  /// and all-to-all read the other ranks' buffers directly (process_vm_readv), one copy
  /// instead of two through the slots; 0 turns it off. Unset (the default): while the host's
  /// ranks have a core each, allgather from 32 KiB, all-to-all from 32 KiB pieces and
  /// broadcast from 64 KiB up to 1 MiB; when they outnumber the cores, all-to-all from
  /// 64 KiB pieces only; never gather and scatter (docs/performance.md).
  /// Used only when every rank could read its neighbour when the group set shared memory
  /// up; only a set, nonzero value lets any process of the user read this one's memory
  /// (PR_SET_PTRACER) where Yama would otherwise refuse.
  std::optional<std::size_t> shmCmaBytes;
  /// COMMUX_CHECK_COLLECTIVES: every rank of a shared-memory collective meets every other
  /// at its first step and compares what they called, so that mismatched calls fail every
  /// rank alike and the group goes on. Off: rooted collectives do not wait for ranks they
  /// need nothing from, and a mismatch is found by the ranks that read from another (the
  /// debugging aid costs a round trip). Default: on when TORCH_DISTRIBUTED_DEBUG=DETAIL.
  /// The host's leader decides for its channel.
  bool checkCollectives = false;
  /// COMMUX_SHM_SPIN_US: how long a shared-memory wait polls before it sleeps (futex).
  std::chrono::microseconds shmSpin{50};
  /// COMMUX_SHM_POLL_NS: how long a shared-memory wait polls without yielding its core before
  /// the spin above (which yields between polls). A yield is a system call, about as long as
  /// a whole small step, and it delays seeing the other rank's answer; a rank that has a core
  /// to itself loses nothing by keeping it. Unset: 2 us when the host's ranks have a core
  /// each, else 0 (polling would keep a rank that cannot answer off the core).
  std::optional<std::chrono::nanoseconds> shmPoll;
  /// COMMUX_SHM_STREAM: pieces of 64 KiB and more go into the slots with streaming
  /// (non-temporal) stores (on), through the cache (off), or whichever each process
  /// currently times faster (auto; shm/slot_copy.hpp says why).
  ShmStream shmStream = ShmStream::Auto;
  /// The C API's meeting point (COMMUX_BOOTSTRAP, host:port), the address its unique ids
  /// name (COMMUX_BOOTSTRAP_ADDRESS), and the job's secret for an init from the environment
  /// (COMMUX_BOOTSTRAP_SECRET); empty when unset.
  std::string bootstrap;
  std::string bootstrapAddress;
  std::string bootstrapSecret;
  /// How long a C API init waits for its bootstrap store (to connect, for the other
  /// ranks' records), in seconds (COMMUX_BOOTSTRAP_TIMEOUT).
  int bootstrapTimeoutSeconds = 1800;
  /// COMMUX_RANK, COMMUX_SIZE: the C API's init from the environment; -1 when unset.
  int rank = -1;
  int size = -1;
  /// COMMUX_HOST: ranks share memory only if this is equal on them too (empty by default).
  /// Splits one machine into several "hosts", so the host-aware collectives can be tried on
  /// one machine; it never joins ranks that do not share a kernel and /dev/shm.
  std::string host;
  /// COMMUX_HIERARCHY: how a group that spans hosts runs allreduce, reduce, broadcast,
  /// allgather, reduce_scatter and barrier (CPU tensors): shared memory inside each host
  /// and UCX between hosts (leader: one rank per host crosses; parallel, allreduce only:
  /// every rank crosses with its counterparts for its block), or off: flat UCX between all
  /// ranks. parallel needs every host to hold as many ranks (else leader). auto: parallel
  /// from COMMUX_HIERARCHY_PARALLEL_MIN_BYTES, else leader; broadcast and reduce in parts
  /// only from COMMUX_HIERARCHY_MIN_BYTES (below it their flat trees are as fast or faster).
  /// Rank 0's values count for the whole group.
  Hierarchy hierarchy = Hierarchy::Auto;
  std::size_t hierarchyParallelMinBytes = 256 * 1024;
  std::size_t hierarchyMinBytes = 1024 * 1024;

  /// COMMUX_FAILURE_DETECTION: auto, ucx or off (see FailureDetection).
  FailureDetection failureDetection = FailureDetection::Auto;
  /// COMMUX_LOOPBACK_ONLY: UCX's network transports listen and connect on the loopback
  /// device only. Defaults to on when the job says it runs on one host (torchrun's
  /// WORLD_SIZE == LOCAL_WORLD_SIZE) and the user chose no devices or transports
  /// (UCX_NET_DEVICES, UCX_TLS); then nothing listens on an outside interface.
  bool loopbackOnly = false;
  /// COMMUX_SEQUENCE_WRAP: collective sequence numbers in the tag wrap at this power of
  /// two (at most and by default 2^20, the tag's field). Smaller only for tests, which must
  /// cross the wrap without running a million collectives.
  std::uint32_t sequenceWrap = 1u << 20;
  /// COMMUX_ROUND_WRAP: rounds inside a collective wrap at this power of two in the tag (at
  /// most and by default 2^12, the tag's field). Smaller only for tests, which must cross
  /// the wrap without 4,096-round collectives.
  std::uint32_t roundWrap = 1u << 12;
  /// COMMUX_MAX_RANKS: the largest group commux creates (at most and by default 2^16, what
  /// the tag's source field can name). Smaller only for tests of the limit.
  std::uint32_t maxRanks = 1u << 16;
  /// COMMUX_MAX_CONTEXTS: how many groups may be alive in one process at once (at most and
  /// by default 2^15 - 1: the tag's context field names 2^15, one of them is for control
  /// notices). Smaller only for tests.
  std::uint32_t maxContexts = (1u << 15) - 1;

  /// The process-wide configuration, parsed from the environment on first use.
  /// Throws std::invalid_argument naming the variable if a value does not parse.
  static const Config& get();
  static Config fromEnvironment();
};

}  // namespace commux
