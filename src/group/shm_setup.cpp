#include "group/shm_setup.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "collectives/route.hpp"
#include "commux/options.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "engine/process_id.hpp"
#include "group/peer_table.hpp"
#include "shm/channel.hpp"
#include "shm/cma.hpp"
#include "shm/host_cpus.hpp"

namespace commux {
namespace {

std::string key(const std::string& what, int index) {
  return storeKeyPrefix() + "shm/" + what + "/" + std::to_string(index);
}

// The keys a rank writes for its host's set-up (connectHost), which others may wait for.
std::vector<std::string> hostKeysOf(int rank) {
  std::vector<std::string> keys;
  for (const char* what : {"cma-at", "cma-ok", "cpus", "pid-space", "mapped"}) {
    keys.push_back(key(what, rank));
  }
  return keys;
}

// Rank 0 groups the identities. A rank without one (COMMUX_SHM=0, no /dev/shm) keeps the
// whole group off shared memory, as documented for COMMUX_SHM: every rank a host of its own.
std::string groupHosts(const std::vector<std::string>& identities) {
  const bool everyone = std::none_of(identities.begin(), identities.end(),
                                     [](const std::string& id) { return id.empty(); });
  std::map<std::string, int> seen;
  std::string out;
  int next = 0;
  for (const auto& id : identities) {
    int host = next;
    if (everyone) {
      auto [it, fresh] = seen.emplace(id, next);
      host = it->second;
      if (fresh) ++next;
    } else {
      ++next;
    }
    out += std::to_string(host) + " ";
  }
  return out;
}

// Rank 0's settings that choose between flat and hierarchical paths, after the layout: a rank
// started with another COMMUX_HIERARCHY would take other paths than its peers and wait for
// messages that never come.
std::string hierarchySettings() {
  const Config& c = Config::get();
  return "| " + std::to_string(static_cast<int>(c.hierarchy)) + " " +
         std::to_string(c.hierarchyParallelMinBytes) + " " + std::to_string(c.hierarchyMinBytes);
}

// The settings that choose algorithms, chunk sizes and tag fields: ranks that differ in any
// of them take different schedules and wait for messages that never come. Rank 0 publishes
// its own; a rank that differs refuses the set-up, and with it every rank.
std::vector<std::pair<const char*, std::string>> agreedSettings() {
  const Config& c = Config::get();
  const auto n = [](auto v) { return std::to_string(v); };
  std::vector<std::pair<const char*, std::string>> agreed = {
      {"COMMUX_ALLREDUCE_RING_MIN_BYTES", n(c.allreduceRingMinBytes)},
      {"COMMUX_CHAIN_MIN_BYTES", n(c.chainMinBytes)},
      {"COMMUX_PIPELINE_CHUNK_BYTES", n(c.pipelineChunkBytes)},
      {"COMMUX_CUDA_CHUNK_BYTES", n(c.cudaChunkBytes)},
      {"COMMUX_LOG_ALGORITHMS_MIN_RANKS", n(c.logAlgorithmsMinRanks)},
      {"COMMUX_RING_MIN_BLOCK_BYTES", n(c.ringMinBlockBytes)},
      {"COMMUX_SEQUENCE_WRAP", n(c.sequenceWrap)},
      {"COMMUX_ROUND_WRAP", n(c.roundWrap)},
      {"COMMUX_CHECK_COLLECTIVES", n(c.checkCollectives)}};
  // The names live as long as the process (a table of static strings).
  static const auto names = [] {
    std::vector<std::string> out;
    for (std::size_t i = 0; i < collectives::kCollectives; ++i) {
      out.push_back(collectives::algorithmSetting(static_cast<collectives::Collective>(i)));
    }
    return out;
  }();
  for (std::size_t i = 0; i < collectives::kCollectives; ++i) {
    agreed.emplace_back(names[i].c_str(), c.algorithms[i]);
  }
  return agreed;
}

std::string encodeSettings() {
  std::string out;
  for (const auto& [name, value] : agreedSettings()) out += std::string(name) + "=" + value + "\n";
  return out;
}

// Empty when this rank's settings are rank 0's (as `published` says), else what differs.
std::string settingsDiffer(const std::string& published, int rank) {
  std::string differ;
  for (const auto& [name, value] : agreedSettings()) {
    const std::string field = std::string(name) + "=";
    const auto at = published.find(field);
    const std::string theirs =
        at == std::string::npos
            ? "(unset)"
            : published.substr(at + field.size(), published.find('\n', at) - at - field.size());
    if (theirs != value) {
      differ += (differ.empty() ? "" : "; ") + std::string(name) + " is " + theirs +
                " on rank 0 but " + value + " on rank " + std::to_string(rank);
    }
  }
  return differ;
}

HostLayout parseLayout(const std::string& text, int size) {
  HostLayout layout;
  layout.hostOf.resize(size);
  layout.localIndexOf.resize(size);
  std::istringstream in(text);
  for (int r = 0; r < size; ++r) {
    int host = -1;
    in >> host;
    COMMUX_CHECK(host >= 0 && host <= static_cast<int>(layout.hosts.size()), Runtime,
                 "commux: unreadable host layout from rank 0");
    if (host == static_cast<int>(layout.hosts.size())) layout.hosts.emplace_back();
    layout.hostOf[r] = host;
    layout.localIndexOf[r] = static_cast<int>(layout.hosts[host].size());
    layout.hosts[host].push_back(r);
  }
  for (const auto& ranks : layout.hosts) {
    layout.hostStart.push_back(static_cast<std::int64_t>(layout.hostOrder.size()));
    layout.hostOrder.insert(layout.hostOrder.end(), ranks.begin(), ranks.end());
  }
  for (int r = 0; r < size; ++r) layout.byHost = layout.byHost && layout.hostOrder[r] == r;
  const Config& config = Config::get();
  std::string bar;
  int mode = 0;
  if (in >> bar >> mode >> layout.parallelMinBytes >> layout.minBytes) {
    COMMUX_CHECK(bar == "|" && mode >= 0 && mode <= static_cast<int>(Hierarchy::Off), Runtime,
                 "commux: unreadable host layout from rank 0");
    layout.hierarchy = static_cast<Hierarchy>(mode);
    if (layout.hierarchy != config.hierarchy ||
        layout.parallelMinBytes != config.hierarchyParallelMinBytes ||
        layout.minBytes != config.hierarchyMinBytes) {
      core::log(core::LogLevel::Warning,
                "commux: this rank's COMMUX_HIERARCHY settings differ from rank 0's; the group "
                "uses rank 0's");
    }
  } else {
    // Every rank a host of its own (no hierarchy): this rank's own settings are as good.
    layout.hierarchy = config.hierarchy;
    layout.parallelMinBytes = config.hierarchyParallelMinBytes;
    layout.minBytes = config.hierarchyMinBytes;
  }
  return layout;
}

// Each rank checks that it can read its neighbour on the host (process_vm_readv); the
// host's leader collects the answers.
// `canary` (this rank's, fresh) must live until the neighbour has read it: the caller keeps
// it until the host's channel is decided.
bool canReadNeighbour(core::SetupStore& store, int rank, const std::vector<int>& local, int index,
                      bool wanted, const std::shared_ptr<const std::uint64_t>& canary) {
  if (wanted) shm::allowReaders();
  store.put(key("cma-at", rank),
            std::to_string(::getpid()) + " " +
                std::to_string(reinterpret_cast<std::uintptr_t>(canary.get())) + " " +
                std::to_string(*canary));
  const int neighbour = local[(index + 1) % local.size()];
  const std::string theirs = store.take(key("cma-at", neighbour), neighbour);
  long pid = 0;
  unsigned long long address = 0, expected = 0;
  std::uint64_t value = 0;
  const bool ok = std::sscanf(theirs.c_str(), "%ld %llu %llu", &pid, &address, &expected) == 3 &&
                  pid > 0 && expected != 0 &&
                  shm::cmaRead(static_cast<pid_t>(pid), reinterpret_cast<const void*>(address),
                               &value, sizeof(value)) &&
                  value == expected;
  if (!ok) {
    core::log(core::LogLevel::Info,
              core::concat("commux: rank ", rank, " cannot read rank ", neighbour,
                           "'s memory (process_vm_readv); shared-memory collectives copy "
                           "through the segment"));
  }
  return ok;
}

/// Whether every key `what`/index says "1"; `owners[i]` writes the key of `indices[i]`.
bool allSay(core::SetupStore& store, const std::string& what, const std::vector<int>& indices,
            const std::vector<int>& owners) {
  std::vector<std::string> keys;
  for (int i : indices) keys.push_back(key(what, i));
  const auto answers = store.takeAll(keys, owners);
  return std::all_of(answers.begin(), answers.end(), [](const std::string& a) { return a == "1"; });
}

// The leader's choice of slot size and depth (COMMUX_SHM_SLOT_BYTES, COMMUX_SHM_DEPTH, or by
// how crowded the host is): one decision, which every rank of the host takes from it.
void chooseSlots(shm::ChannelShape& shape) {
  const Config& config = Config::get();
  const bool crowded = shape.crowded;
  // Oversubscribed, a rank that has a core runs up to `depth` small collectives (a
  // broadcast's root, a reader draining what is there) before it must yield to one that
  // has none (docs/performance-log.md, 2026-12-04 10:40).
  shape.depth = config.shmDepth != 0 ? config.shmDepth : crowded ? 8u : 2u;
  if (config.shmSlotBytes != 0) {
    shape.slotBytes = config.shmSlotBytes;
    return;
  }
  // Slots of up to 1 MiB: an allreduce or broadcast step costs a round of waits, so fewer,
  // larger steps are faster (2 ranks, 1 MiB slots against 256 KiB: allreduce 1-4 MiB 12-21%
  // and broadcast 1-4 MiB 25-43% less time; docs/performance-log.md, 2026-12-04 19:40). The
  // collectives that copy through the slots fill 256 KiB of them per step while every rank
  // has a core: there a piece stays in the cache between one rank's copy in and the other's
  // copy out (an allgather of 16 MiB took 17% longer in 1 MiB pieces). Crowded, they use
  // the whole slot too, since every step waits for ranks that may be off their core.
  constexpr std::size_t kBase = 256 * 1024;
  const std::size_t share =
      (std::size_t{crowded ? 16u : 8u} << 20) / static_cast<std::size_t>(shape.size);
  shape.slotBytes = std::clamp<std::size_t>(share / 4096 * 4096, kBase, std::size_t{1} << 20);
  shape.copyStepBytes = crowded ? 0 : kBase;
}

// Where the leader's channel reads the others' buffers directly (shm::CmaThresholds):
// COMMUX_SHM_CMA_BYTES for every kind where set (0: nowhere); unset, only where the copy
// saved is the one that costs. process_vm_readv pins the pages it reads, which costs about
// as much as a copy: it pays where the two copies through the slots run one after the
// other. An allgather's and an all_to_all's two copies are both the rank's own work; a
// broadcast that fits one step is the root's copy in, then the readers' copy out, while a
// larger one pipelines the root's next step with the readers' last over two cores, and
// there single copy loses. Measured on a 2-core VM, collective_loop.py with and without,
// alternating (docs/performance-log.md, 2026-12-07 02:40-04:10): at 2 ranks allgather from 24
// KiB 1.3-1.8x faster single copy, all_to_all from 32 KiB pieces 1.3-1.8x, broadcast
// 128-512 KiB 1.1-1.6x faster and 1-16 MiB 1.3-1.6x slower (and 32 KiB 1.1-1.2x faster,
// 16 KiB slower: 2026-12-07 09:20); at 4 ranks on the 2 cores
// (crowded), where every copy competes for the same cores, allgather and broadcast were
// slower single copy and all_to_all faster from 64 KiB pieces (1.1-1.2x). gather and
// scatter were not measured: they keep the slots. A neighbourhood exchange's messages are
// read straight from the sender's face into the receiver's ghost cells at every size: one
// copy and two flags in place of a UCX message (halo/shared_sides.hpp; docs/performance.md,
// 2026-12-07 06:20).
shm::CmaThresholds chooseCma(std::optional<std::size_t> setting, bool crowded) {
  if (setting) return shm::CmaThresholds::all(*setting);
  shm::CmaThresholds t;
  t[shm::CmaUse::Neighbours].from = 1;
  if (crowded) {
    t[shm::CmaUse::Alltoall].from = std::size_t{64} << 10;
    return t;
  }
  t[shm::CmaUse::Allgather].from = std::size_t{32} << 10;
  t[shm::CmaUse::Alltoall].from = std::size_t{32} << 10;
  t[shm::CmaUse::Broadcast] = {std::size_t{32} << 10, std::size_t{1} << 20};
  return t;
}

std::string cmaWords(const shm::CmaThresholds& cma) {
  std::string out;
  for (int i = 0; i < shm::CmaThresholds::kWords; ++i) out += std::to_string(cma.word(i)) + " ";
  return out;
}

std::istream& readCmaWords(std::istream& in, shm::CmaThresholds& cma) {
  for (int i = 0; i < shm::CmaThresholds::kWords; ++i) {
    std::uint64_t v = 0;
    if (in >> v) cma.setWord(i, v);
  }
  return in;
}

// Why the leader's announcement (read from the store) cannot be acted on, or empty: a shape
// outside what any leader chooses, or a name that is not one of commux's segments. Checked
// before the shape sizes a mapping or the name is opened.
std::string badAnnouncement(const shm::ChannelShape& shape, const std::string& name) {
  constexpr std::size_t kMaxSlot = std::size_t{256} << 20;  // COMMUX_SHM_SLOT_BYTES' bound
  if (shape.depth < 2 || shape.depth > shm::Steps::kMaxDepth ||
      (shape.depth & (shape.depth - 1)) != 0) {
    return "depth " + std::to_string(shape.depth);
  }
  if (shape.slotBytes < 4096 || shape.slotBytes > kMaxSlot || shape.slotBytes % 4096 != 0) {
    return "slot size " + std::to_string(shape.slotBytes);
  }
  if (shape.smallBytes > shape.slotBytes || shape.copyStepBytes > shape.slotBytes) {
    return "small or step size beyond the slot";
  }
  if (!shm::Segment::wellFormedName(name)) return "segment name '" + name + "'";
  return {};
}

// This host's channel: the leader creates the segment and says how it is shaped, the
// others map it. Null where it failed (logged), and then on every rank of the host.
std::shared_ptr<shm::Channel> connectHost(core::SetupStore& store, int rank, int host,
                                          const std::vector<int>& local,
                                          std::shared_ptr<engine::Engine> engine) {
  const Config& config = Config::get();
  const int index = static_cast<int>(std::find(local.begin(), local.end(), rank) - local.begin());
  const bool leader = index == 0;
  const int count = static_cast<int>(local.size());
  // Every rank takes part in the probe, whatever its own setting, so none waits for a key
  // that never comes; the leader's COMMUX_SHM_CMA_BYTES counts (the segment key carries it).
  // Only a rank that asked for single copy opens itself to readers (PR_SET_PTRACER); the
  // automatic choice uses it only where the kernel lets the ranks read each other anyway.
  const bool askedForCma = config.shmCmaBytes.value_or(0) != 0;
  const auto canary = shm::freshCmaCanary();
  store.put(key("cma-ok", rank),
            canReadNeighbour(store, rank, local, index, askedForCma, canary) ? "1" : "0");

  store.put(key("cpus", rank), shm::cpuList());
  store.put(key("pid-space", rank), engine::ProcessId::localPidSpace());

  shm::ChannelShape shape;
  shape.size = count;
  shape.spin = config.shmSpin;
  // This process's own choice, from how crowded the leader found the host.
  const auto setPoll = [&] {
    shape.poll = config.shmPoll.value_or(shape.crowded ? std::chrono::nanoseconds(0)
                                                       : std::chrono::microseconds(2));
  };
  shape.copyMode = config.shmStream == ShmStream::On    ? shm::SlotCopyMode::Streaming
                   : config.shmStream == ShmStream::Off ? shm::SlotCopyMode::Cached
                                                        : shm::SlotCopyMode::Auto;
  std::shared_ptr<shm::Channel> channel;
  std::string problem;
  bool nameless = false;
  if (leader) {
    std::vector<std::string> keys;
    for (int r : local) keys.push_back(key("cpus", r));
    shape.crowded = shm::crowdedBy(store.takeAll(keys, local));
    // Ranks that see the leader's /proc open its nameless segment through its descriptor, so
    // nothing is ever named in /dev/shm; ranks of another PID namespace (containers that
    // share /dev/shm) need a name.
    keys.clear();
    for (int r : local) keys.push_back(key("pid-space", r));
    const auto spaces = store.takeAll(keys, local);
    nameless = !spaces[0].empty() && std::all_of(spaces.begin(), spaces.end(),
                                                 [&](const auto& s) { return s == spaces[0]; });
    chooseSlots(shape);
    setPoll();
    shape.smallBytes = std::min(config.shmSmallBytes, shape.slotBytes);
    if (allSay(store, "cma-ok", local, local))
      shape.cma = chooseCma(config.shmCmaBytes, shape.crowded);
    shape.checkAll = config.checkCollectives;
    std::string description;
    try {
      channel =
          shm::Channel::make(shm::Segment::create(shm::Channel::segmentBytes(shape), nameless),
                             index, shape, true, engine, local);
      // The sizes that pick the algorithms: every rank must use the same.
      description = std::to_string(shape.depth) + " " + std::to_string(shape.slotBytes) + " " +
                    std::to_string(shape.copyStepBytes) + " " + std::to_string(shape.smallBytes) +
                    " " + cmaWords(shape.cma) + (shape.checkAll ? "1" : "0") + " " +
                    (shape.crowded ? "1" : "0") + " " + channel->segment().name();
    } catch (const std::exception& e) {
      problem = e.what();
    }
    store.put(key("segment", host), description);
  } else {
    std::istringstream in(store.take(key("segment", host), local[0]));
    std::string name;
    int checkAll = 0;
    int crowded = 0;
    if ((in >> shape.depth >> shape.slotBytes >> shape.copyStepBytes >> shape.smallBytes) &&
        readCmaWords(in, shape.cma) && (in >> checkAll >> crowded >> name)) {
      shape.checkAll = checkAll != 0;
      shape.crowded = crowded != 0;
      setPoll();
      if (const std::string bad = badAnnouncement(shape, name); !bad.empty()) {
        problem = "commux: the shared-memory channel that rank " + std::to_string(local[0]) +
                  " announced through the store has an impossible " + bad +
                  "; another program or job may be writing this store's keys";
      } else {
        try {
          channel = shm::Channel::make(shm::Segment::open(name, shm::Channel::segmentBytes(shape)),
                                       index, shape, false, engine, local);
        } catch (const std::exception& e) {
          problem = e.what();
        }
      }
    }
  }
  if (!problem.empty()) {
    core::log(core::LogLevel::Warning, problem + "; collectives use UCX instead of shared memory");
  }
  store.put(key("mapped", rank), channel ? "1" : "0");
  if (leader) {
    const bool mapped = allSay(store, "mapped", local, local);
    // Everyone has it mapped (or gave up): drop the name, so nothing outlives the job.
    if (channel) channel->segment().unlink();
    store.put(key("host-ok", host), mapped ? "1" : "0");
    if (!mapped) channel.reset();
  }
  return channel;
}

}  // namespace

// Ranks share memory when they share the kernel (boot id) and the /dev/shm mount; the
// host name alone would also match two containers with private /dev/shm mounts.
std::string hostIdentity() {
  const Config& config = Config::get();
  if (!config.shm) return "";
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) return "";
  return std::string(host) + "|" + boot + "|" + std::to_string(st.st_dev) + ":" +
         std::to_string(st.st_ino) + "|" + config.host;
}

bool HostLayout::uniform() const noexcept {
  return std::all_of(hosts.begin(), hosts.end(),
                     [&](const std::vector<int>& h) { return h.size() == hosts[0].size(); });
}

ShmSetup connectShm(core::KeyValueStore& rawStore, int rank, int size,
                    std::shared_ptr<engine::Engine> engine, const core::SetupDeaths& deaths) {
  core::SetupStore store(rawStore, deaths);
  const std::string layoutKey = storeKeyPrefix() + "shm/layout";
  const std::string verdictKey = storeKeyPrefix() + "shm/verdict";
  const std::string settingsKey = storeKeyPrefix() + "shm/settings";
  const std::string me = hostIdentity();
  store.put(key("host", rank), me);
  if (rank == 0) store.put(settingsKey, encodeSettings());
  // A rank whose settings differ from rank 0's refuses, and what it owes tells the others
  // why (SetupStore::abandon). Also without shared memory (COMMUX_SHM=0): the set-up runs
  // from the group's creation on, and every collective needs rank 0 anyway.
  if (rank != 0) {
    std::string differ;
    try {
      differ = settingsDiffer(store.take(settingsKey, 0), rank);
    } catch (const core::SetupAbandoned& e) {
      COMMUX_FAIL(Backend, std::string("the set-up of the group's first collective "
                                       "was given up: ") +
                               e.what());
    }
    if (!differ.empty()) {
      const std::string why = "the ranks' settings differ (" + differ +
                              "); every rank must run with the same COMMUX_* algorithm settings";
      try {
        store.abandon(why, hostKeysOf(rank));
      } catch (const std::exception&) {
      }
      COMMUX_FAIL(InvalidArgument, "commux: " + why);
    }
  }
  if (me.empty()) {
    // This rank keeps the whole group off shared memory (groupHosts), which it knows without
    // waiting for anyone: a rank with COMMUX_SHM=0 never waits here. Rank 0 answers for all.
    const std::string alone = groupHosts(std::vector<std::string>(size));
    if (rank == 0) {
      store.put(layoutKey, alone);
      store.put(verdictKey, "1");
    }
    return ShmSetup{parseLayout(alone, size), nullptr, false};
  }
  // Keys others may wait for from this rank that it has not written yet (its host's, once
  // known): written as given up if this rank gives up.
  std::vector<std::string> owed;
  if (rank == 0) owed = {layoutKey, verdictKey};
  try {
    if (rank == 0) {
      std::vector<std::string> keys;
      for (int r = 0; r < size; ++r) keys.push_back(key("host", r));
      std::vector<int> all(static_cast<std::size_t>(size));
      std::iota(all.begin(), all.end(), 0);
      store.put(layoutKey, groupHosts(store.takeAll(keys, all)) + hierarchySettings());
    }
    ShmSetup setup;
    setup.layout = parseLayout(store.take(layoutKey, 0), size);
    const HostLayout& layout = setup.layout;
    const int host = layout.hostOf[rank];
    const std::vector<int>& local = layout.hosts[host];
    if (local.front() == rank) {
      owed.push_back(key("segment", host));
      owed.push_back(key("host-ok", host));
    }
    const auto mine = hostKeysOf(rank);
    owed.insert(owed.end(), mine.begin(), mine.end());
    if (local.size() > 1) setup.channel = connectHost(store, rank, host, local, engine);

    // One verdict for the whole group: a host whose channel failed would run its collectives
    // over UCX while the others wait in shared memory.
    if (rank == 0) {
      std::vector<int> shared, leaders;
      for (int h = 0; h < layout.hostCount(); ++h) {
        if (layout.hosts[h].size() > 1) {
          shared.push_back(h);
          leaders.push_back(layout.hosts[h][0]);
        }
      }
      store.put(verdictKey, allSay(store, "host-ok", shared, leaders) ? "1" : "0");
    }
    if (store.take(verdictKey, 0) != "1") {
      setup.channel.reset();
      return setup;
    }
    setup.hierarchical =
        layout.hostCount() > 1 &&
        std::any_of(layout.hosts.begin(), layout.hosts.end(),
                    [](const std::vector<int>& ranks) { return ranks.size() > 1; });
    return setup;
  } catch (const core::SetupAbandoned& e) {
    // Nobody waits on this rank in vain: what it owes says why it gave up.
    try {
      store.abandon(e.what(), owed);
    } catch (const std::exception&) {
      // The store itself is gone: the others' waits end with its errors.
    }
    COMMUX_FAIL(Backend, std::string("the shared-memory set-up of the group's first collective "
                                     "was given up: ") +
                             e.what());
  }
}

}  // namespace commux
