#include "c10d/shm_setup.hpp"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Logging.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "c10d/peer_table.hpp"
#include "commux/options.hpp"
#include "shm/channel.hpp"
#include "shm/cma.hpp"

namespace commux {
namespace {

std::string key(const char* what, int rank) {
  return storeKeyPrefix() + "shm/" + what + "/" + std::to_string(rank);
}

void put(c10d::Store& store, const std::string& k, const std::string& value) {
  store.set(k, std::vector<uint8_t>(value.begin(), value.end()));
}

std::string take(c10d::Store& store, const std::string& k) {
  const auto raw = store.get(k);
  return std::string(raw.begin(), raw.end());
}

// Ranks share memory when they share the kernel (boot id) and the /dev/shm mount; the
// host name alone would also match two containers with private /dev/shm mounts.
std::string hostIdentity() {
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) return "";
  return std::string(host) + "|" + boot + "|" + std::to_string(st.st_dev) + ":" +
         std::to_string(st.st_ino);
}

// Every rank reads every rank's answer, so every rank reaches the same verdict.
bool everyone(c10d::Store& store, const char* what, int size, const std::string& expected) {
  bool all = true;
  for (int r = 0; r < size; ++r) all = take(store, key(what, r)) == expected && all;
  return all;
}

// Every rank checks that it can read its neighbour's memory (process_vm_readv); the group
// reads each other's buffers only if all of them can.
bool everyoneCanRead(c10d::Store& store, int rank, int size, bool wanted) {
  if (wanted) shm::allowReaders();
  put(store, key("cma-at", rank),
      std::to_string(::getpid()) + " " +
          std::to_string(reinterpret_cast<std::uintptr_t>(shm::cmaCanary())));
  const std::string theirs = take(store, key("cma-at", (rank + 1) % size));
  long pid = 0;
  unsigned long long address = 0;
  std::uint64_t value = 0;
  const bool ok = std::sscanf(theirs.c_str(), "%ld %llu", &pid, &address) == 2 &&
                  shm::cmaRead(static_cast<pid_t>(pid), reinterpret_cast<const void*>(address),
                               &value, sizeof(value)) &&
                  value == shm::kCmaCanaryValue;
  if (!ok) {
    LOG(INFO) << "commux: rank " << rank << " cannot read rank " << (rank + 1) % size
              << "'s memory (process_vm_readv); shared-memory collectives copy through the "
                 "segment";
  }
  put(store, key("cma-ok", rank), ok ? "1" : "0");
  return everyone(store, "cma-ok", size, "1");
}

// Rank 0's choice of slot size (COMMUX_SHM_SLOT_BYTES, or by how crowded the host is):
// one decision, which every rank takes from it, even where the ranks' views of the cores
// differ (affinity masks).
std::size_t slotBytesFor(int size) {
  if (const std::size_t set = Config::get().shmSlotBytes; set != 0) return set;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  const int cores = ::sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  constexpr std::size_t kBase = 256 * 1024;
  if (size <= cores) return kBase;
  const std::size_t share = (std::size_t{16} << 20) / static_cast<std::size_t>(size);
  return std::clamp<std::size_t>(share / 4096 * 4096, kBase, std::size_t{1} << 20);
}

}  // namespace

std::shared_ptr<shm::Channel> connectShm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, std::shared_ptr<engine::Engine> engine) {
  const Config& config = Config::get();
  const std::string me = config.shm ? hostIdentity() : "";
  put(*store, key("host", rank), me);
  if (me.empty() || !everyone(*store, "host", size, me)) return nullptr;

  shm::ChannelShape shape;
  shape.size = size;
  shape.slotBytes = rank == 0 ? slotBytesFor(size) : 0;  // the others take rank 0's
  shape.smallBytes = config.shmSmallBytes;
  shape.spin = config.shmSpin;
  // Every rank takes part in the probe, whatever its own setting, so none waits for a key
  // that never comes; ranks whose COMMUX_SHM_CMA_BYTES differ are refused by the segment
  // header's check.
  if (everyoneCanRead(*store, rank, size, config.shmCmaBytes != 0)) {
    shape.cmaBytes = config.shmCmaBytes;
  }
  shape.smallBytes = std::min(shape.smallBytes, shape.slotBytes);
  std::size_t bytes = rank == 0 ? shm::Channel::segmentBytes(shape) : 0;

  std::shared_ptr<shm::Channel> channel;
  std::string problem;
  if (rank == 0) {
    try {
      channel = std::make_shared<shm::Channel>(shm::Segment::create(bytes), rank, shape, true,
                                               engine);
      // The sizes that pick the algorithms: every rank must use the same.
      put(*store, key("slot", 0),
          std::to_string(shape.slotBytes) + " " + std::to_string(shape.smallBytes));
      put(*store, key("name", 0), channel->segment().name());
    } catch (const std::exception& e) {
      problem = e.what();
      put(*store, key("name", 0), "");
    }
  } else {
    const std::string name = take(*store, key("name", 0));
    if (!name.empty()) {
      try {
        std::istringstream sizes(take(*store, key("slot", 0)));
        sizes >> shape.slotBytes >> shape.smallBytes;
        bytes = shm::Channel::segmentBytes(shape);
        channel = std::make_shared<shm::Channel>(shm::Segment::open(name, bytes), rank, shape,
                                                 false, engine);
      } catch (const std::exception& e) {
        problem = e.what();
      }
    }
  }
  put(*store, key("mapped", rank), channel ? "1" : "0");
  const bool ok = everyone(*store, "mapped", size, "1");
  if (!problem.empty()) {
    LOG(WARNING) << problem << "; collectives use UCX instead of shared memory";
  }
  if (!ok) return nullptr;
  // Everyone has it mapped: drop the name, so nothing outlives the job in /dev/shm.
  if (rank == 0) channel->segment().unlink();
  return channel;
}

}  // namespace commux
