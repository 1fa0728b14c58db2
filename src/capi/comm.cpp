// Communicators: the unique id, the two inits, destroy, abort and what a handle reports.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bootstrap/tcp_store.hpp"
#include "bootstrap/unique_id.hpp"
#include "capi/comm.hpp"
#include "capi/membership_watch.hpp"
#include "commux/options.hpp"
#include "config/process_engine.hpp"
#include "core/error.hpp"
#include "group/collectives.hpp"
#include "group/peer_table.hpp"

namespace commux::capi {
namespace {

// How long an init waits for the store (connecting, the other ranks' records).
std::chrono::milliseconds storeTimeout() {
  return std::chrono::seconds(Config::get().bootstrapTimeoutSeconds);
}

commuxComm* makeComm(const bootstrap::Endpoint& store, const bootstrap::Secret& secret, int size,
                     int rank) {
  // Every communicator made from one id shares its store. A rank's n-th init (the store
  // counts its joins) joins the n-th communicator, under keys of its own: ranks that
  // rebuild after a failure, and a process restarted in a dead one's place, meet apart
  // from the communicator that failed. The join's connection stays open while the
  // communicator lives: the store tells it there if two jobs met on it.
  auto joins = std::make_shared<bootstrap::TcpStore>(store, secret, storeTimeout());
  const std::int64_t generation =
      joins->join(static_cast<std::uint32_t>(rank), static_cast<std::uint32_t>(size),
                  processToken(), processDescription());
  std::shared_ptr<bootstrap::TcpStore> kv;
  try {
    kv = joins->withPrefix(core::concat("world/", generation, "/"));
  } catch (const std::exception&) {
    // The store told the members why it stopped (two jobs met) and its process left: say
    // that, not the broken connection it left behind.
    if (std::string notice = joins->pendingNotice(); !notice.empty()) COMMUX_FAIL(Backend, notice);
    throw;
  }
  auto comm = std::make_unique<commuxComm>();
  comm->store = kv;
  comm->servesStore = bootstrap::servesPort(store.port());
  comm->engine = processEngine(static_cast<std::size_t>(size));
  comm->group = std::make_unique<group::Group>(std::move(kv), rank, size, comm->engine,
                                               /*setUpInBackground=*/true);
  commuxComm* made = comm.get();
  comm->membership = std::make_unique<MembershipWatch>(joins, [made](const std::string& notice) {
    {
      std::lock_guard<std::mutex> lock(made->poisonMutex);
      made->poisoned = notice;
    }
    // What is in flight ends now; every later call fails with the notice (checkComm).
    made->group->abort();
  });
  return comm.release();
}

// A communicator made from `parent` (split, shrink): its engine, store server and timeout,
// meeting under `prefix` of the parent's store.
commuxComm* childComm(const commuxComm& parent, const std::string& prefix, int rank, int size) {
  auto store = parent.store->withPrefix(core::concat(parent.store->prefix(), prefix));
  auto made = std::make_unique<commuxComm>();
  made->engine = parent.engine;
  made->store = store;
  made->servesStore = parent.servesStore;
  made->timeoutMs.store(parent.timeoutMs.load());
  made->group = std::make_unique<group::Group>(std::move(store), rank, size, parent.engine,
                                               /*setUpInBackground=*/true);
  return made.release();
}

void checkRankAndSize(int size, int rank, const char* what) {
  COMMUX_CHECK(size >= 1, InvalidArgument, "commux: ", what, ": nranks must be at least 1, not ",
               size);
  COMMUX_CHECK(rank >= 0 && rank < size, InvalidArgument, "commux: ", what, ": rank ", rank,
               " is not in [0, ", size, ")");
}

// The first of `names` set in the environment, as a whole number; -1 when none is.
long firstSet(std::initializer_list<const char*> names, std::string& which) {
  for (const char* name : names) {
    const char* raw = std::getenv(name);
    if (raw == nullptr || *raw == '\0') continue;
    char* end = nullptr;
    errno = 0;
    const long value = std::strtol(raw, &end, 10);
    COMMUX_CHECK(errno == 0 && end != nullptr && *end == '\0' && value >= 0, InvalidArgument,
                 "commux: ", name, "='", raw, "' is not a whole number");
    which = name;
    return value;
  }
  return -1;
}

// The job's secret from its text: 16 bytes that every rank derives alike (FNV-1a, twice with
// different offsets). It keeps other jobs' ranks out; it is not a cryptographic secret.
bootstrap::Secret secretOf(const std::string& text) {
  bootstrap::Secret secret{};
  std::uint64_t halves[2] = {0xcbf29ce484222325ull, 0x84222325cbf29ce4ull};
  for (auto& h : halves) {
    for (unsigned char c : text) {
      h ^= c;
      h *= 0x100000001b3ull;
    }
  }
  std::memcpy(secret.data(), halves, sizeof(halves));
  return secret;
}

}  // namespace

std::string poisonOf(commuxComm& comm) {
  std::lock_guard<std::mutex> lock(comm.poisonMutex);
  return comm.poisoned;
}

commuxComm& checkComm(commuxComm_t comm) {
  COMMUX_CHECK(comm != nullptr && comm->group != nullptr, InvalidArgument,
               "commux: the communicator is NULL");
  if (std::string poisoned = poisonOf(*comm); !poisoned.empty()) {
    COMMUX_FAIL(Backend, poisoned);
  }
  // The header's promise: an aborted communicator refuses every call but destroy as a
  // misuse (the core says Backend, as torch's users expect).
  COMMUX_CHECK(comm->group->state() != group::Group::State::Aborted, Runtime,
               "commux: the communicator was aborted (commuxCommAbort); destroy it");
  return *comm;
}

std::chrono::milliseconds timeoutOf(const commuxComm* comm) {
  const std::int64_t ms = comm->timeoutMs.load(std::memory_order_relaxed);
  // None: a limit far beyond any job, which the engine's clock arithmetic still holds.
  return std::chrono::milliseconds(ms == 0 ? std::int64_t{1} << 40 : ms);
}

}  // namespace commux::capi

using namespace commux;
using capi::guarded;

extern "C" {

commuxResult_t commuxGetUniqueId(commuxUniqueId* uniqueId) {
  return guarded([&] {
    COMMUX_CHECK(uniqueId != nullptr, InvalidArgument,
                 "commux: commuxGetUniqueId: uniqueId is NULL");
    bootstrap::encode(bootstrap::makeUniqueId(Config::get().bootstrapAddress), uniqueId->internal);
  });
}

commuxResult_t commuxCommInitRank(commuxComm_t* comm, int nranks, commuxUniqueId uniqueId,
                                  int rank) {
  return guarded([&] {
    COMMUX_CHECK(comm != nullptr, InvalidArgument, "commux: commuxCommInitRank: comm is NULL");
    *comm = nullptr;
    capi::checkRankAndSize(nranks, rank, "commuxCommInitRank");
    const bootstrap::UniqueId id = bootstrap::decode(uniqueId.internal);
    *comm = capi::makeComm(id.store, id.secret, nranks, rank);
  });
}

commuxResult_t commuxCommInitFromEnv(commuxComm_t* comm) {
  return guarded([&] {
    COMMUX_CHECK(comm != nullptr, InvalidArgument, "commux: commuxCommInitFromEnv: comm is NULL");
    *comm = nullptr;
    const Config& config = Config::get();
    std::string rankFrom = "COMMUX_RANK", sizeFrom = "COMMUX_SIZE";
    long rank = config.rank;
    long size = config.size;
    if (rank < 0)
      rank = capi::firstSet({"RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"}, rankFrom);
    if (size < 0)
      size = capi::firstSet({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"},
                            sizeFrom);
    COMMUX_CHECK(rank >= 0, InvalidArgument,
                 "commux: commuxCommInitFromEnv: no rank in the environment (set COMMUX_RANK, "
                 "or run under torchrun, mpirun or srun)");
    COMMUX_CHECK(size >= 1 && size <= static_cast<long>(wire::kMaxRanks), InvalidArgument,
                 "commux: commuxCommInitFromEnv: no usable size in the environment (", sizeFrom,
                 " = ", size, "; set COMMUX_SIZE)");
    COMMUX_CHECK(rank < size, InvalidArgument, "commux: commuxCommInitFromEnv: rank ", rank, " (",
                 rankFrom, ") is not below the size ", size, " (", sizeFrom, ")");
    COMMUX_CHECK(!config.bootstrap.empty(), InvalidArgument,
                 "commux: commuxCommInitFromEnv: set COMMUX_BOOTSTRAP=host:port, where rank 0 "
                 "serves the job's bootstrap store");
    const bootstrap::Endpoint store =
        bootstrap::parseHostPort(config.bootstrap, "COMMUX_BOOTSTRAP");
    // The launcher's job id and COMMUX_BOOTSTRAP_SECRET keep jobs on one port apart; with
    // neither, the store still fails every rank of two jobs that meet on it (a rank joined
    // twice, two sizes, a second rank 0).
    const bootstrap::Secret secret =
        capi::secretOf(jobIdentity() + "\n" + config.bootstrapSecret);
    if (rank != 0 || bootstrap::serveStore(store, secret)) {
      *comm = capi::makeComm(store, secret, static_cast<int>(size), static_cast<int>(rank));
      return;
    }
    // Another process holds the port: a store served elsewhere for this job, or another
    // job's, which this rank 0 must not join quietly (it joins as rank 0, which that store
    // then sees twice, and fails everyone who met there).
    try {
      *comm = capi::makeComm(store, secret, static_cast<int>(size), 0);
    } catch (const std::exception& e) {
      COMMUX_FAIL(Backend, "commux: commuxCommInitFromEnv: rank 0 cannot serve the bootstrap store "
                  "at COMMUX_BOOTSTRAP=", config.bootstrap,
                  ": another process holds the port, and joining the store there failed: ",
                  e.what());
    }
  });
}

commuxComm::~commuxComm() { membership.reset(); }

commuxResult_t commuxCommDestroy(commuxComm_t comm) {
  if (comm == nullptr) return commuxSuccess;
  if (comm->openGroups.load(std::memory_order_acquire) > 0) {
    // The group's end still posts and waits on it: freeing it now would leave that end a
    // dangling communicator. Nothing is changed; end the group, then destroy.
    return capi::failWith(commuxInvalidUsage,
                          "commux: commuxCommDestroy: the communicator takes part in a "
                          "commuxGroupStart/End group that is still open; call commuxGroupEnd "
                          "first");
  }
  const commuxResult_t result = guarded([&] {
    comm->membership.reset();
    // The operations cancelled here end before the call returns (their buffers are their
    // callers' again), boundedly; a receive UCX is filling is let finish.
    bool ended = true;
    if (comm->group && comm->group->state() == group::Group::State::Running) {
      ended = comm->group->abort(group::kCancelWait);
    }
    comm->group.reset();
    COMMUX_CHECK(ended, Backend, "commux: commuxCommDestroy: of an operation it cancelled, ",
                 group::stillUnderWay("its buffer"));
  });
  delete comm;
  return result;
}

commuxResult_t commuxCommSplit(commuxComm_t comm, int color, int key, commuxComm_t* newcomm) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(newcomm != nullptr, InvalidArgument, "commux: commuxCommSplit: newcomm is NULL");
    *newcomm = nullptr;
    COMMUX_CHECK(color >= 0 || color == COMMUX_SPLIT_NOCOLOR, InvalidArgument,
                 "commux: commuxCommSplit: color ", color,
                 " is negative (COMMUX_SPLIT_NOCOLOR is the only negative color)");
    const int size = c.group->size();
    // Every rank's (color, key), in rank order: one allgather over the parent.
    // Owned by the operation: a timed-out one may still be cancelling when this returns.
    auto mine = std::make_shared<std::vector<std::int32_t>>(std::vector<std::int32_t>{color, key});
    auto everyone = std::make_shared<std::vector<std::int32_t>>(2 * static_cast<std::size_t>(size));
    auto request = group::allgather(
        *c.group, core::bufferOf(mine->data(), 2, core::Dtype::Int32, mine),
        core::bufferOf(everyone->data(), everyone->size(), core::Dtype::Int32, everyone),
        capi::timeoutOf(&c));
    capi::waitFor(c, *request);
    const std::vector<std::int32_t>& all = *everyone;
    const std::uint32_t split = c.splits++;
    if (color == COMMUX_SPLIT_NOCOLOR) return;
    std::vector<int> members;
    for (int r = 0; r < size; ++r) {
      if (all[2 * static_cast<std::size_t>(r)] == color) members.push_back(r);
    }
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) {
      return all[2 * static_cast<std::size_t>(a) + 1] < all[2 * static_cast<std::size_t>(b) + 1];
    });
    const int newRank = static_cast<int>(
        std::find(members.begin(), members.end(), c.group->rank()) - members.begin());
    *newcomm = capi::childComm(c, core::concat("split/", split, "/", color, "/"), newRank,
                               static_cast<int>(members.size()));
  });
}

commuxResult_t commuxCommShrink(commuxComm_t comm, const int* excludeRanks, int excludeCount,
                                int flags, commuxComm_t* newcomm) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxCommShrink";
    COMMUX_CHECK(newcomm != nullptr, InvalidArgument, "commux: ", what, ": newcomm is NULL");
    *newcomm = nullptr;
    COMMUX_CHECK((flags & ~COMMUX_SHRINK_ABORT) == 0, InvalidArgument, "commux: ", what, ": flags ",
                 flags, " are not COMMUX_SHRINK_DEFAULT or COMMUX_SHRINK_ABORT");
    const int size = c.group->size();
    COMMUX_CHECK(excludeCount >= 0 && (excludeCount == 0 || excludeRanks != nullptr),
                 InvalidArgument, "commux: ", what, ": ", excludeCount, " ranks to exclude at ",
                 excludeRanks == nullptr ? "NULL" : "an array");
    std::vector<bool> excluded(static_cast<std::size_t>(size), false);
    for (int i = 0; i < excludeCount; ++i) {
      const int r = excludeRanks[i];
      COMMUX_CHECK(r >= 0 && r < size, InvalidArgument, "commux: ", what, ": rank ", r,
                   " is not a rank of this ", size, "-rank communicator");
      COMMUX_CHECK(!excluded[static_cast<std::size_t>(r)], InvalidArgument, "commux: ", what,
                   ": rank ", r, " is excluded twice");
      excluded[static_cast<std::size_t>(r)] = true;
    }
    const int rank = c.group->rank();
    COMMUX_CHECK(!excluded[static_cast<std::size_t>(rank)], InvalidArgument, "commux: ", what,
                 ": this rank (", rank, ") is excluded; only the survivors call it");
    std::vector<int> survivors;
    std::string names;
    for (int r = 0; r < size; ++r) {
      if (excluded[static_cast<std::size_t>(r)]) continue;
      survivors.push_back(r);
      names += core::concat(r, ",");
    }
    if ((flags & COMMUX_SHRINK_ABORT) != 0) c.group->abort();
    // The k-th shrink of `comm` on every survivor meets under one prefix, which also names
    // the survivors: two different shrinks never share a key.
    const std::uint32_t k = c.shrinks++;
    const int newRank =
        static_cast<int>(std::find(survivors.begin(), survivors.end(), rank) - survivors.begin());
    *newcomm = capi::childComm(c, core::concat("shrink/", k, "/", names, "/"), newRank,
                               static_cast<int>(survivors.size()));
  });
}

commuxResult_t commuxCommFinalize(commuxComm_t comm) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    c.group->checkUsable();
    const int size = c.group->size();
    const auto keys = [size](const char* what) {
      std::vector<std::string> names;
      for (int r = 0; r < size; ++r) names.push_back(core::concat("finalize/", what, "/", r));
      return names;
    };
    // Through the store, not the transports: a rank that has said it is done may leave at
    // once, and nothing of this exchange may then be owed to it.
    const auto waitForKeys = [&](const std::vector<std::string>& names, const char* what) {
      const auto limit = capi::timeoutOf(&c);
      const auto deadline = std::chrono::steady_clock::now() + limit;
      auto pause = std::chrono::milliseconds(1);
      // A rank that said it left may be gone before this rank looks again: its death is
      // no failure (once this rank's look at the keys raced with it, and finalize failed).
      const auto allDeadLeft = [&](const group::Group::Status& status) {
        if (status.deadRanks.empty()) return false;
        for (const int r : status.deadRanks) {
          if (!c.store->check({core::concat("finalize/left/", r)})) return false;
        }
        return true;
      };
      while (!c.store->check(names)) {
        const group::Group::Status status = c.group->status();
        COMMUX_CHECK(status.healthy || allDeadLeft(status), Backend,
                     "commux: commuxCommFinalize: ", what, ": the communicator is unhealthy (",
                     status.reason, ")");
        COMMUX_CHECK(std::chrono::steady_clock::now() < deadline, Backend,
                     "commux: commuxCommFinalize: ", what, ": Timed out waiting for the other ranks (timed out after ",
                     limit.count(), " ms)");
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(50));
      }
    };
    const std::vector<std::uint8_t> mark{1};
    c.store->set(core::concat("finalize/done/", c.group->rank()), mark);
    waitForKeys(keys("done"), "waiting for every rank to finish");
    c.store->set(core::concat("finalize/left/", c.group->rank()), mark);
    // The store's process stays until every rank has read what it waited for.
    if (c.servesStore) waitForKeys(keys("left"), "waiting for every rank to leave");
  });
}

commuxResult_t commuxCommAbort(commuxComm_t comm) {
  return guarded([&] { capi::checkComm(comm).group->abort(); });
}

commuxResult_t commuxCommCount(commuxComm_t comm, int* count) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(count != nullptr, InvalidArgument, "commux: commuxCommCount: count is NULL");
    *count = c.group->size();
  });
}

commuxResult_t commuxCommUserRank(commuxComm_t comm, int* rank) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(rank != nullptr, InvalidArgument, "commux: commuxCommUserRank: rank is NULL");
    *rank = c.group->rank();
  });
}

commuxResult_t commuxCommSetTimeout(commuxComm_t comm, int64_t milliseconds) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(milliseconds >= 0 && milliseconds < (std::int64_t{1} << 40), InvalidArgument,
                 "commux: commuxCommSetTimeout: ", milliseconds,
                 " ms is not a timeout (0 for none, else positive and below 2^40)");
    c.timeoutMs.store(milliseconds, std::memory_order_relaxed);
  });
}

commuxResult_t commuxCommGetAsyncError(commuxComm_t comm, commuxResult_t* asyncError) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(asyncError != nullptr, InvalidArgument,
                 "commux: commuxCommGetAsyncError: asyncError is NULL");
    const group::Group::Status status = c.group->status();
    if (status.healthy) {
      *asyncError = commuxSuccess;
      return;
    }
    std::ostringstream message;
    message << "commux: the communicator is unhealthy: " << status.reason;
    if (!status.deadRanks.empty()) {
      message << " (dead ranks:";
      for (int r : status.deadRanks) message << ' ' << r;
      message << ')';
    }
    *asyncError = capi::failWith(commuxRemoteError, message.str());
  });
}

}  // extern "C"
