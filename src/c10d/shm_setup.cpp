#include "c10d/shm_setup.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <c10/util/Logging.h>

#include <cstdio>
#include <fstream>
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

}  // namespace

std::shared_ptr<shm::Channel> connectShm(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                         int size, std::shared_ptr<engine::Engine> engine) {
  const Config& config = Config::get();
  const std::string me = config.shm ? hostIdentity() : "";
  put(*store, key("host", rank), me);
  if (me.empty() || !everyone(*store, "host", size, me)) return nullptr;

  shm::ChannelShape shape;
  shape.size = size;
  shape.slotBytes = config.shmSlotBytes;
  shape.smallBytes = config.shmSmallBytes;
  shape.spin = config.shmSpin;
  // Every rank takes part in the probe, whatever its own setting, so none waits for a key
  // that never comes; ranks whose COMMUX_SHM_CMA_BYTES differ are refused by the segment
  // header's check.
  if (everyoneCanRead(*store, rank, size, config.shmCmaBytes != 0)) {
    shape.cmaBytes = config.shmCmaBytes;
  }
  const std::size_t bytes = shm::Channel::segmentBytes(shape);

  std::shared_ptr<shm::Channel> channel;
  std::string problem;
  if (rank == 0) {
    try {
      channel = std::make_shared<shm::Channel>(shm::Segment::create(bytes), rank, shape, true,
                                               engine);
      put(*store, key("name", 0), channel->segment().name());
    } catch (const std::exception& e) {
      problem = e.what();
      put(*store, key("name", 0), "");
    }
  } else {
    const std::string name = take(*store, key("name", 0));
    if (!name.empty()) {
      try {
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
    LOG(WARNING) << problem << "; allreduce uses UCX instead of shared memory";
  }
  if (!ok) return nullptr;
  // Everyone has it mapped: drop the name, so nothing outlives the job in /dev/shm.
  if (rank == 0) channel->segment().unlink();
  return channel;
}

}  // namespace commux
