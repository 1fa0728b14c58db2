#include "config/settings.hpp"

#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "collectives/route.hpp"
#include "config/env_readers.hpp"
#include "wire/tag.hpp"

namespace commux {
namespace {

// Sizes beyond 1 GiB overflow nothing here, but the segment and buffers they size would
// exhaust memory first; refused with their name rather than as a failed allocation.
constexpr unsigned long long kMaxBytes = 1ULL << 30;
// A threshold ("from this size on") sizes nothing: any value up to 2^62 is a size no
// message reaches, the way to say "never".
constexpr unsigned long long kMaxThreshold = 1ULL << 62;

const env::Choices<ShmStream> kStreams = {{"auto", ShmStream::Auto},
                                          {"on", ShmStream::On},
                                          {"off", ShmStream::Off},
                                          {"1", ShmStream::On},
                                          {"0", ShmStream::Off}};
const env::Choices<Hierarchy> kHierarchies = {{"auto", Hierarchy::Auto},
                                              {"leader", Hierarchy::Leader},
                                              {"parallel", Hierarchy::Parallel},
                                              {"off", Hierarchy::Off},
                                              {"0", Hierarchy::Off}};
const env::Choices<FailureDetection> kDetections = {{"auto", FailureDetection::Auto},
                                                    {"ucx", FailureDetection::Ucx},
                                                    {"off", FailureDetection::Off},
                                                    {"0", FailureDetection::Off}};

template <typename T>
long long whole(T v) {
  return static_cast<long long>(v);
}

void readShmDepth(const char* name, std::uint32_t& out) {
  std::size_t depth = out;  // unset or 0: chosen per group
  env::readInRange(name, depth, 0, 1ULL << 62, "sets");
  if (depth != 0 && (depth < 2 || depth > 16 || (depth & (depth - 1)) != 0)) {
    throw std::invalid_argument(std::string(name) + "=" + std::to_string(depth) +
                                " is not 2, 4, 8 or 16 (or 0: chosen per group)");
  }
  out = static_cast<std::uint32_t>(depth);
}

void readCmaBytes(const char* name, std::optional<std::size_t>& out) {
  const char* raw = env::rawValue(name);
  if (raw == nullptr) return;
  if (std::strcmp(raw, "auto") == 0) {
    out.reset();
    return;
  }
  if (std::strspn(raw, "0123456789") != std::strlen(raw)) {
    throw std::invalid_argument(std::string(name) + "='" + raw + "' is not a byte count or auto");
  }
  std::size_t bytes = 0;
  env::readInRange(name, bytes, 0, kMaxThreshold, "bytes (0: off; or auto)");
  out = bytes;
}

void readCheckCollectives(const char* name, bool& out) {
  // torch's own debug level asks for the same checks.
  if (const char* debug = std::getenv("TORCH_DISTRIBUTED_DEBUG"); debug != nullptr) {
    out = std::strcmp(debug, "DETAIL") == 0;
  }
  env::readBool(name, out);
}

void readLoopbackOnly(const char* name, bool& out) {
  // A one-host job (torchrun's two sizes equal) that named no network keeps UCX on loopback.
  const auto value = [](const char* v) { return std::string(v == nullptr ? "" : v); };
  const std::string world = value(std::getenv("WORLD_SIZE"));
  out = !world.empty() && world == value(std::getenv("LOCAL_WORLD_SIZE")) &&
        env::rawValue("UCX_NET_DEVICES") == nullptr && env::rawValue("UCX_TLS") == nullptr;
  env::readBool(name, out);
}

template <collectives::Collective C>
void readAlgorithm(const char* name, Config& config) {
  std::string value;
  env::readText(name, value);
  if (!value.empty() && collectives::findAlgorithm(C, value) == nullptr) {
    throw std::invalid_argument(std::string(name) + "=" + value + " names no algorithm of " +
                                collectives::nameOf(C) + " (" + collectives::algorithmNames(C) +
                                ")");
  }
  config.algorithms[static_cast<std::size_t>(C)] = value;
}

template <collectives::Collective C>
SettingValue showAlgorithm(const Config& config) {
  return config.algorithms[static_cast<std::size_t>(C)];
}

#define COMMUX_ALGORITHM_SETTING(C, NAME, WHAT, ALGORITHMS)                                     \
  {                                                                                             \
    "COMMUX_ALGORITHM_" NAME, "empty (chosen by size and group)",                               \
        "the algorithm " WHAT " always takes: " ALGORITHMS                                      \
        " (tests, benchmarks); `shm` needs one host, `hierarchical` a group across hosts that " \
        "share memory. Same value on every rank",                                               \
        &readAlgorithm<collectives::Collective::C>, &showAlgorithm<collectives::Collective::C>  \
  }

}  // namespace

const std::vector<Setting>& settings() {
  static const std::vector<Setting> table = {
      {"COMMUX_UCX_HOME",
       "empty (the UCX commux was built with: the `libucx-cu*` wheel, or the system's)",
       "a UCX install to load instead, e.g. the site's UCX with InfiniBand/RoCE: the folder "
       "holding `lib/libucp.so.0` (or `lib64/`, or that library folder itself); read when "
       "UCX is first loaded (the first group, `python3 -m commux.info`); older than 1.13 is "
       "refused. C++ programs: `LD_LIBRARY_PATH=$COMMUX_UCX_HOME/lib` (\"Install\", \"The "
       "site's UCX at run time\")",
       nullptr, nullptr},
      {"COMMUX_WAIT_SPIN_US", "`100`",
       "how long `wait()` polls UCX itself before sleeping, plus the time the operation's "
       "bytes take to copy at 4 GB/s (at most 2 ms more); longer = lower latency, more CPU",
       [](const char* n, Config& c) { env::readMicros(n, c.waitSpin); },
       [](const Config& c) -> SettingValue { return whole(c.waitSpin.count()); }},
      {"COMMUX_HANDOFF_DELAY_US", "`1000`",
       "how soon the progress thread takes over operations a caller posted and left without "
       "waiting (callers that wait drive UCX themselves; asking for a Work's future hands "
       "off at once)",
       [](const char* n, Config& c) { env::readMicros(n, c.handOffDelay); },
       [](const Config& c) -> SettingValue { return whole(c.handOffDelay.count()); }},
      {"COMMUX_COALESCE", "`0`",
       "`1`: a send/recv of several tensors travels as one UCX message (IOV); every rank "
       "must agree, a mismatch is a clear error",
       [](const char* n, Config& c) { env::readBool(n, c.coalesce); },
       [](const Config& c) -> SettingValue { return c.coalesce; }},
      {"COMMUX_GROUP", "`0`",
       "`1`: operations inside a coalescing window (`batch_isend_irecv`, "
       "`_coalescing_manager`) are posted together when the window ends; waiting on one "
       "before that raises",
       [](const char* n, Config& c) { env::readBool(n, c.group); },
       [](const Config& c) -> SettingValue { return c.group; }},
      {"COMMUX_TORCH_FLIGHT_RECORDER", "`0`",
       "`1`: keep torch's per-operation flight-recorder hook on commux groups (torch >= 2.15 "
       "adds it to third-party backends; it captures a Python traceback per call, ~5 us); by "
       "default commux is exempt, like gloo",
       nullptr, nullptr},
      {"COMMUX_PROGRESS_SPIN_US", "`0`",
       "how long the progress thread polls after its last event before sleeping on the "
       "worker's event fd",
       [](const char* n, Config& c) { env::readMicros(n, c.progressSpin); },
       [](const Config& c) -> SettingValue { return whole(c.progressSpin.count()); }},
      {"COMMUX_ALLREDUCE_RING_MIN_BYTES", "`262144`",
       "allreduce switches from recursive doubling to the ring at this size",
       [](const char* n, Config& c) {
         env::readInRange(n, c.allreduceRingMinBytes, 0, kMaxThreshold, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.allreduceRingMinBytes); }},
      {"COMMUX_CHAIN_MIN_BYTES", "`524288`",
       "broadcast and reduce (3+ ranks) switch from binomial trees to pipelined chains at "
       "this size",
       [](const char* n, Config& c) {
         env::readInRange(n, c.chainMinBytes, 0, kMaxThreshold, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.chainMinBytes); }},
      {"COMMUX_PIPELINE_CHUNK_BYTES", "`524288`",
       "chunk size of the pipelined chains, and the piece size in which ring reduce-scatter "
       "steps (allreduce, reduce_scatter) move and fold their blocks",
       [](const char* n, Config& c) {
         env::readInRange(n, c.pipelineChunkBytes, 1, kMaxBytes, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.pipelineChunkBytes); }},
      {"COMMUX_CUDA_CHUNK_BYTES", "`16777216`",
       "the same for CUDA tensors: each piece there costs a trip through a CUDA stream, so "
       "pieces are larger",
       [](const char* n, Config& c) {
         env::readInRange(n, c.cudaChunkBytes, 1, kMaxBytes, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.cudaChunkBytes); }},
      {"COMMUX_LOG_ALGORITHMS_MIN_RANKS", "`9`",
       "from this group size on, allgather, reduce_scatter, allreduce and broadcast choose "
       "recursive doubling / dissemination / recursive halving / Rabenseifner / "
       "scatter+allgather by a cost model (docs/design.md, \"Algorithms at scale\")",
       [](const char* n, Config& c) {
         env::readInRange(n, c.logAlgorithmsMinRanks, 0, wire::kMaxRanks + 1, "ranks");
       },
       [](const Config& c) -> SettingValue { return whole(c.logAlgorithmsMinRanks); }},
      COMMUX_ALGORITHM_SETTING(Allreduce, "ALLREDUCE", "allreduce",
                               "`shm`, `hierarchical`, `recursive_doubling`, `ring`, "
                               "`rabenseifner`"),
      COMMUX_ALGORITHM_SETTING(Reduce, "REDUCE", "reduce",
                               "`shm`, `hierarchical`, `binomial`, `chain`"),
      COMMUX_ALGORITHM_SETTING(Broadcast, "BROADCAST", "broadcast",
                               "`shm`, `hierarchical`, `binomial`, `chain`, `scatter_allgather`"),
      COMMUX_ALGORITHM_SETTING(Allgather, "ALLGATHER", "allgather",
                               "`shm`, `hierarchical`, `ring`, `recursive_doubling` (power-of-two "
                               "groups), `dissemination`"),
      COMMUX_ALGORITHM_SETTING(ReduceScatter, "REDUCE_SCATTER", "reduce_scatter",
                               "`shm`, `hierarchical`, `ring`, `recursive_halving`"),
      COMMUX_ALGORITHM_SETTING(Gather, "GATHER", "gather", "`shm`, `binomial`"),
      COMMUX_ALGORITHM_SETTING(Scatter, "SCATTER", "scatter", "`shm`, `binomial`"),
      COMMUX_ALGORITHM_SETTING(Alltoall, "ALL_TO_ALL", "all_to_all",
                               "`shm`, `pairwise`, `bruck` (even splits on the CPU)"),
      COMMUX_ALGORITHM_SETTING(Barrier, "BARRIER", "barrier",
                               "`shm`, `hierarchical`, `dissemination`"),
      {"COMMUX_RING_MIN_BLOCK_BYTES", "`262144`",
       "from this many bytes per rank's block, allgather, reduce_scatter and allreduce keep "
       "the ring at any group size",
       [](const char* n, Config& c) {
         env::readInRange(n, c.ringMinBlockBytes, 0, kMaxThreshold, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.ringMinBlockBytes); }},
      {"COMMUX_SHM", "`1`",
       "collectives between ranks that all run on one host (allreduce, reduce, broadcast, "
       "allgather, reduce_scatter, gather, scatter, all_to_all, barrier; CPU tensors) go "
       "through a shared-memory segment (one per group, unlinked once mapped); `0` keeps "
       "them on UCX. The ranks agree when the group is created: shared memory is used "
       "only if every rank allows it and mapped the segment",
       [](const char* n, Config& c) { env::readBool(n, c.shm); },
       [](const Config& c) -> SettingValue { return c.shm; }},
      {"COMMUX_WINDOW_SHARE", "`1`",
       "an owning `tensor_register` (`dist._new_window(tensor)`) moves a CPU tensor's "
       "storage into shared memory in place, as `tensor.share_memory_()` does (the tensor "
       "and its views follow; a raw pointer taken before, e.g. a numpy array's, does not), "
       "so peers on its host write into it directly (`win.path()` says `mapped`); only "
       "storage from torch's own allocator moves. `0`: every tensor stays where it is "
       "(same-host puts then go through `process_vm_writev` or messages)",
       [](const char* n, Config& c) { env::readBool(n, c.windowShare); },
       [](const Config& c) -> SettingValue { return c.windowShare; }},
      {"COMMUX_SHM_SLOT_BYTES", "`0` (auto)",
       "bytes each rank stages per step of a shared-memory collective (the segment holds 2 x "
       "ranks x this). Auto: 8 MiB / ranks within [256 KiB, 1 MiB] (fewer, larger steps: "
       "each waits for the other ranks), of which allgather, gather, scatter, reduce_scatter "
       "and all-to-all fill 256 KiB per step (pieces that stay in the cache); when the ranks "
       "outnumber the CPUs they may run on together, 16 MiB / ranks within the same bounds, "
       "all of it used by every collective. Set, every collective uses all of it. Rank 0 "
       "decides; the others take its sizes",
       [](const char* n, Config& c) {
         env::readInRange(n, c.shmSlotBytes, 0, 256ULL << 20, "bytes (0: chosen per group)");
         c.shmSlotBytes = (c.shmSlotBytes + 4095) / 4096 * 4096;  // 0 stays 0: chosen per group
       },
       [](const Config& c) -> SettingValue { return whole(c.shmSlotBytes); }},
      {"COMMUX_SHM_DEPTH", "`0` (auto)",
       "sets of small slots (`COMMUX_SHM_SMALL_BYTES` per rank each): how many small "
       "collectives a rank may run ahead of the slowest, 2, 4, 8 or 16. Auto: 2, or 8 when "
       "the ranks outnumber the CPUs they may run on together (a rank that has a core runs "
       "several small collectives before it must yield). The segment holds depth x ranks x "
       "`COMMUX_SHM_SMALL_BYTES` for them. Each host's first rank decides for its host",
       [](const char* n, Config& c) { readShmDepth(n, c.shmDepth); },
       [](const Config& c) -> SettingValue { return whole(c.shmDepth); }},
      {"COMMUX_SHM_SMALL_BYTES", "`16384`",
       "up to this size a shared-memory allreduce is one step in which every rank folds the "
       "whole buffer; above it each rank folds its own block. Also the size of one small "
       "slot (`COMMUX_SHM_DEPTH`)",
       [](const char* n, Config& c) {
         env::readInRange(n, c.shmSmallBytes, 0, 1ULL << 20, "bytes (0: no small slots)");
       },
       [](const Config& c) -> SettingValue { return whole(c.shmSmallBytes); }},
      {"COMMUX_SHM_CMA_BYTES", "`auto`",
       "from this many bytes per rank, broadcast, (all)gather, scatter and all_to_all read "
       "the other ranks' buffers directly (`process_vm_readv`, one copy instead of two), and "
       "a neighbourhood exchange's messages between ranks of a host go through shared memory, "
       "not UCX (`commux.halo`); `0`: never. `auto`: neighbourhood messages of every size; "
       "while the host's ranks have a core each, allgather from 32 KiB, "
       "all_to_all from 32 KiB pieces and broadcast from 32 KiB up to 1 MiB; when they "
       "outnumber the cores, all_to_all from 64 KiB pieces only (elsewhere the two copies "
       "through the segment were faster, or gather and scatter not measured: "
       "docs/performance.md). Used only if every rank could read its neighbour at set-up; a "
       "number also lets the user's other processes read this one (`PR_SET_PTRACER`) where "
       "Yama's `ptrace_scope=1` would refuse, `auto` never does. The host's first rank decides",
       [](const char* n, Config& c) { readCmaBytes(n, c.shmCmaBytes); },
       [](const Config& c) -> SettingValue {
         return c.shmCmaBytes ? SettingValue(whole(*c.shmCmaBytes)) : SettingValue(std::string("auto"));
       }},
      {"COMMUX_CHECK_COLLECTIVES", "`0` (`1` with `TORCH_DISTRIBUTED_DEBUG=DETAIL`)",
       "`1`: every rank of a collective compares what it called (operation, dtype, "
       "reduction, element count) with every other before anything is sent: on shared memory "
       "at the collective's first step, over UCX and in parts across hosts by a small "
       "allgather of its own before the collective is posted, whichever path its size takes "
       "there (the call then returns once every rank has called; a rank that never calls "
       "makes the others wait for the timeout). Mismatched "
       "calls fail every rank alike with a `ValueError` and the group goes on (a debugging "
       "aid: it makes rooted collectives wait for all ranks, and every UCX collective cost "
       "one more round). `0`: a mismatch is found by the ranks that read another's data "
       "(\"Semantics worth knowing\"). A host's leader decides for its ranks",
       [](const char* n, Config& c) { readCheckCollectives(n, c.checkCollectives); },
       [](const Config& c) -> SettingValue { return c.checkCollectives; }},
      {"COMMUX_SHM_SPIN_US", "`50`",
       "how long a shared-memory wait polls, yielding the core between polls, before it "
       "sleeps on a futex",
       [](const char* n, Config& c) { env::readMicros(n, c.shmSpin); },
       [](const Config& c) -> SettingValue { return whole(c.shmSpin.count()); }},
      {"COMMUX_SHM_POLL_NS", "auto",
       "how long a shared-memory wait polls without yielding before that spin. Auto: 2000 "
       "when the host's ranks have a core each, else 0. Either way a process stops polling "
       "while the kernel finds others switching it out (docs/design.md, \"Waiting\")",
       [](const char* n, Config& c) { env::readNanos(n, c.shmPoll); },
       [](const Config& c) -> SettingValue {
         return c.shmPoll ? SettingValue(whole(c.shmPoll->count())) : SettingValue();
       }},
      {"COMMUX_SHM_STREAM", "`auto`",
       "how pieces of 64 KiB and more are written into the shared-memory slots: `on` with "
       "streaming (non-temporal) stores, `off` through the cache, `auto` whichever each "
       "process currently times faster (docs/design.md, \"Writing a slot\")",
       [](const char* n, Config& c) { env::readChoice(n, c.shmStream, kStreams); },
       [](const Config& c) -> SettingValue { return env::nameOf(kStreams, c.shmStream); }},
      {"COMMUX_HIERARCHY", "`auto`",
       "a group that spans hosts (some with several ranks) runs allreduce, reduce, "
       "broadcast, allgather, reduce_scatter and barrier on CPU tensors in parts: shared "
       "memory inside each host, UCX between hosts. `leader`: one rank per host crosses; "
       "`parallel` (allreduce; hosts with equal rank counts): every rank crosses for its "
       "block; `auto`: parallel from `COMMUX_HIERARCHY_PARALLEL_MIN_BYTES`, else leader, and "
       "broadcast and reduce in parts only from `COMMUX_HIERARCHY_MIN_BYTES`; `off`: flat "
       "UCX among all ranks. Same value on every rank (docs/design.md, \"Groups that span "
       "hosts\")",
       [](const char* n, Config& c) { env::readChoice(n, c.hierarchy, kHierarchies); },
       [](const Config& c) -> SettingValue { return env::nameOf(kHierarchies, c.hierarchy); }},
      {"COMMUX_HIERARCHY_PARALLEL_MIN_BYTES", "`262144`",
       "where `auto` switches the allreduce across hosts from the leader form to the "
       "parallel one",
       [](const char* n, Config& c) {
         env::readInRange(n, c.hierarchyParallelMinBytes, 0, kMaxThreshold, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.hierarchyParallelMinBytes); }},
      {"COMMUX_HIERARCHY_MIN_BYTES", "`1048576`",
       "where `auto` starts running broadcast and reduce in parts across hosts; below it "
       "they run flat",
       [](const char* n, Config& c) {
         env::readInRange(n, c.hierarchyMinBytes, 0, kMaxThreshold, "bytes");
       },
       [](const Config& c) -> SettingValue { return whole(c.hierarchyMinBytes); }},
      {"COMMUX_HOST", "empty",
       "ranks share memory only where this is equal too: splits one machine into several "
       "\"hosts\" (to try the host-aware collectives on one machine); never joins ranks of "
       "different machines",
       [](const char* n, Config& c) { env::readText(n, c.host); },
       [](const Config& c) -> SettingValue { return c.host; }},
      {"COMMUX_FAILURE_DETECTION", "`auto`",
       "how dead peers are found: `auto` (pidfd for peers on this host, UCX peer error "
       "handling for others), `ucx` (UCX's for all), `off` (a dead peer is a timeout)",
       [](const char* n, Config& c) { env::readChoice(n, c.failureDetection, kDetections); },
       [](const Config& c) -> SettingValue {
         return env::nameOf(kDetections, c.failureDetection);
       }},
      {"COMMUX_LOOPBACK_ONLY", "on for one-host torchrun jobs",
       "`1`: UCX's network transports use the loopback device only (nothing listens on an "
       "outside interface); on by default when `WORLD_SIZE == LOCAL_WORLD_SIZE` and neither "
       "`UCX_NET_DEVICES` nor `UCX_TLS` is set",
       [](const char* n, Config& c) { readLoopbackOnly(n, c.loopbackOnly); },
       [](const Config& c) -> SettingValue { return c.loopbackOnly; }},
      {"COMMUX_LAUNCHER", "`1`",
       "`0`: do not fill `RANK`, `WORLD_SIZE`, `LOCAL_RANK`, `LOCAL_WORLD_SIZE`, "
       "`MASTER_ADDR`, `MASTER_PORT` from `mpirun`'s / `srun`'s variables (see "
       "\"Launchers\"); read when a commux group's `env://` rendezvous runs, or by "
       "`commux.launcher.apply()` (never at import: importing torch or commux changes "
       "nothing in `os.environ`)",
       nullptr, nullptr},
      {"COMMUX_SEQUENCE_WRAP", "`1048576`",
       "tests only: collective sequence numbers in the tag wrap at this power of two (at "
       "most 2^20)",
       [](const char* n, Config& c) {
         env::readPowerOfTwo(n, c.sequenceWrap, 2, 1u << wire::kSequenceBits);
       },
       [](const Config& c) -> SettingValue { return whole(c.sequenceWrap); }},
      {"COMMUX_ROUND_WRAP", "`4096`",
       "tests only: rounds inside a collective wrap in the tag at this power of two (at most "
       "2^12)",
       [](const char* n, Config& c) {
         env::readPowerOfTwo(n, c.roundWrap, 2, 1u << wire::kRoundBits);
       },
       [](const Config& c) -> SettingValue { return whole(c.roundWrap); }},
      {"COMMUX_BOOTSTRAP", "empty",
       "the C API's `commuxCommInitFromEnv`: `host:port` of the job's bootstrap store, which "
       "rank 0 serves (on that address only) and the others reach",
       [](const char* n, Config& c) { env::readText(n, c.bootstrap); },
       [](const Config& c) -> SettingValue { return c.bootstrap; }},
      {"COMMUX_BOOTSTRAP_ADDRESS", "empty",
       "the address a unique id (`commuxGetUniqueId`) tells the other ranks to reach its store "
       "at; empty: the first IPv4 address of an interface that is up and not loopback, else "
       "127.0.0.1",
       [](const char* n, Config& c) { env::readText(n, c.bootstrapAddress); },
       [](const Config& c) -> SettingValue { return c.bootstrapAddress; }},
      {"COMMUX_BOOTSTRAP_SECRET", "empty",
       "`commuxCommInitFromEnv`: any text, the same on every rank of the job, a different one "
       "per job (with the launcher's job id, it makes the job's secret); a rank with another "
       "fails at once, naming the port (shown as `(set)`)",
       [](const char* n, Config& c) { env::readText(n, c.bootstrapSecret); },
       [](const Config& c) -> SettingValue {
         return c.bootstrapSecret.empty() ? std::string() : std::string("(set)");
       }},
      {"COMMUX_BOOTSTRAP_TIMEOUT", "`1800`",
       "the C API's inits: how long, in seconds, a rank waits for its bootstrap store (to "
       "connect while rank 0 starts, and for the other ranks' records)",
       [](const char* n, Config& c) { env::readInRange(n, c.bootstrapTimeoutSeconds, 1, 604800, "seconds"); },
       [](const Config& c) -> SettingValue { return whole(c.bootstrapTimeoutSeconds); }},
      {"COMMUX_RANK", "empty",
       "`commuxCommInitFromEnv`: this process's rank (else `RANK`, `OMPI_COMM_WORLD_RANK`, "
       "`PMI_RANK` or `SLURM_PROCID`, the first set)",
       [](const char* n, Config& c) {
         env::readInRange(n, c.rank, 0, wire::kMaxRanks - 1, "ranks");
       },
       [](const Config& c) -> SettingValue {
         return c.rank < 0 ? SettingValue{} : SettingValue{static_cast<long long>(c.rank)};
       }},
      {"COMMUX_SIZE", "empty",
       "`commuxCommInitFromEnv`: the number of ranks (else `WORLD_SIZE`, "
       "`OMPI_COMM_WORLD_SIZE`, `PMI_SIZE` or `SLURM_NTASKS`, the first set)",
       [](const char* n, Config& c) { env::readInRange(n, c.size, 1, wire::kMaxRanks, "ranks"); },
       [](const Config& c) -> SettingValue {
         return c.size < 0 ? SettingValue{} : SettingValue{static_cast<long long>(c.size)};
       }},
      {"COMMUX_MAX_RANKS", "`65536`",
       "tests only: larger groups fail at creation (at most 2^16, the tag's source field)",
       [](const char* n, Config& c) { env::readBounded(n, c.maxRanks, 1, wire::kMaxRanks); },
       [](const Config& c) -> SettingValue { return whole(c.maxRanks); }},
      {"COMMUX_MAX_CONTEXTS", "`32767`",
       "tests only: more live groups in one process fail at creation (at most 2^15 - 1: the "
       "tag's context field names 2^15, one is for control notices)",
       [](const char* n, Config& c) {
         env::readBounded(n, c.maxContexts, 1, wire::kControlContext);
       },
       [](const Config& c) -> SettingValue { return whole(c.maxContexts); }},
  };
  return table;
}

}  // namespace commux
