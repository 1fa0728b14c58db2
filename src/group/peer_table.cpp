#include "group/peer_table.hpp"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.hpp"

namespace commux {
namespace {

// Its pid names the same process here (an empty PID space is unknown: never the same).
bool sameSpaceAsThisProcess(const engine::ProcessId& process) {
  return !process.pidSpace.empty() && process.pidSpace == engine::ProcessId::localPidSpace();
}

// Record layout (little endian): magic, format version, context id, pid, start ticks (u64),
// length of the PID-space id, the PID-space id, length of the job id, the job id, then the
// worker address bytes.
constexpr std::uint32_t kMagic = 0x584d4d43;  // "CMMX"
constexpr std::uint32_t kFormat = 4;

void putU32(std::vector<uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

std::uint32_t getU32(const std::vector<uint8_t>& in, std::size_t at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(in[at + i]) << (8 * i);
  return v;
}

// What a record is read for, by the call that reads it, when its caller did not say.
constexpr std::string_view kForPeer =
    "a send to or a receive from it (the first between these ranks)";
constexpr std::string_view kForSome = "a collective (the first to need them) or the death watch";
constexpr std::string_view kForAll =
    "a collective or a receive from any source (each waits on every member)";
constexpr std::string_view kForRelay = "the death relay between host leaders";

std::string_view either(std::string_view given, std::string_view fallback) {
  return given.empty() ? fallback : given;
}

// At most this many ranks are named in an error (groups have thousands).
constexpr std::size_t kNamed = 8;

std::string nameRanks(const std::vector<int>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string named;
  for (std::size_t i = 0; i < ranks.size() && i < kNamed; ++i) {
    named += (i == 0 ? "" : ", ") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kNamed) named += ", ...";
  return std::to_string(ranks.size()) + " ranks (" + named + ")";
}

}  // namespace

std::string jobIdentity() {
  const auto get = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v != nullptr ? v : "";
  };
  // torchrun's run id ("none" unless --standalone or --rdzv-id set it: shared by every job
  // that does not set it, so it says nothing).
  if (std::string run = get("TORCHELASTIC_RUN_ID"); !run.empty() && run != "none") {
    return "torchrun:" + run;
  }
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid",
                           "PMI_JOBID", "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID"}) {
    if (std::string id = get(name); !id.empty()) return std::string(name) + ":" + id;
  }
  if (std::string slurm = get("SLURM_JOB_ID"); !slurm.empty()) {
    return "slurm:" + slurm + "." + get("SLURM_STEP_ID");
  }
  return "";
}

std::string storeKeyPrefix() {
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  return std::string("commux/") + (restart != nullptr && *restart != '\0' ? restart : "0") + "/";
}

PeerTable::PeerTable(std::shared_ptr<core::KeyValueStore> store, int rank, int size,
                     OnResolved onResolved)
    : store_(std::move(store)),
      rank_(rank),
      onResolved_(std::move(onResolved)),
      prefix_(storeKeyPrefix() + "peer/"),
      job_(jobIdentity()),
      routes_(static_cast<std::size_t>(size)),
      known_(new std::atomic<bool>[static_cast<std::size_t>(size)]),
      pids_(static_cast<std::size_t>(size), -1),
      samePidSpace_(static_cast<std::size_t>(size), 0) {
  for (int r = 0; r < size; ++r) known_[r].store(false, std::memory_order_relaxed);
}

void PeerTable::publish(const std::string& address, std::uint32_t context,
                        std::uint16_t incarnation) {
  const auto self = engine::ProcessId::self();
  std::vector<uint8_t> record;
  putU32(record, kMagic);
  putU32(record, kFormat);
  putU32(record, (context & 0xffffu) | (std::uint32_t{incarnation} << 16));
  putU32(record, static_cast<std::uint32_t>(self.pid));
  putU32(record, static_cast<std::uint32_t>(self.startTicks));
  putU32(record, static_cast<std::uint32_t>(self.startTicks >> 32));
  putU32(record, static_cast<std::uint32_t>(self.pidSpace.size()));
  record.insert(record.end(), self.pidSpace.begin(), self.pidSpace.end());
  putU32(record, static_cast<std::uint32_t>(job_.size()));
  record.insert(record.end(), job_.begin(), job_.end());
  record.insert(record.end(), address.begin(), address.end());
  store_->set(key(rank_), record);
  std::lock_guard<std::mutex> lock(mutex_);
  routes_[rank_] = std::make_shared<engine::Route>(engine::Route{address, context, incarnation});
  pids_[rank_] = self.pid;
  samePidSpace_[rank_] = 1;
  known_[rank_].store(true, std::memory_order_release);
}

std::string PeerTable::key(int rank) const { return prefix_ + std::to_string(rank); }

void PeerTable::checkRank(int rank) const {
  COMMUX_CHECK(rank >= 0 && static_cast<std::size_t>(rank) < routes_.size(), Runtime,
               "commux: rank ", rank, " is outside the group");
}

std::shared_ptr<const engine::Route> PeerTable::get(int rank, std::string_view operation) {
  checkRank(rank);
  if (auto route = known(rank)) return route;
  resolve({rank}, either(operation, kForPeer));
  return known(rank);
}

PeerTable::Record PeerTable::parse(int rank, const std::vector<uint8_t>& record) const {
  COMMUX_CHECK(record.size() >= 28 && getU32(record, 0) == kMagic, Runtime, "commux: rank ", rank,
               " published an unreadable peer record; "
               "is every rank running commux on the same process group?");
  COMMUX_CHECK(getU32(record, 4) == kFormat, Runtime, "commux: rank ", rank,
               " runs a commux with peer-record format ", getU32(record, 4), ", this rank uses ",
               kFormat, "; install the same commux version on every rank");
  Record out;
  out.process.pid = static_cast<std::int32_t>(getU32(record, 12));
  out.process.startTicks = getU32(record, 16) | (std::uint64_t{getU32(record, 20)} << 32);
  // Lengths from the store are checked against the record before they index it.
  const std::size_t spaceLength = getU32(record, 24);
  COMMUX_CHECK(record.size() >= 32 && spaceLength <= record.size() - 32, Runtime, "commux: rank ",
               rank, " published a truncated peer record");
  out.process.pidSpace.assign(record.begin() + 28, record.begin() + 28 + spaceLength);
  const std::size_t jobAt = 28 + spaceLength;
  const std::size_t jobLength = getU32(record, jobAt);
  COMMUX_CHECK(jobLength < record.size() - jobAt - 4, Runtime, "commux: rank ", rank,
               " published a truncated peer record");
  const std::string job(record.begin() + jobAt + 4, record.begin() + jobAt + 4 + jobLength);
  // Two jobs that meet on one store (a MASTER_PORT reused while the first still runs) would
  // otherwise mix their ranks silently.
  COMMUX_CHECK(job.empty() || job_.empty() || job == job_, Runtime, "commux: rank ", rank,
               "'s record in the group's store (", store_->location(), ") belongs to another job (",
               job, "; this rank's is ", job_,
               "): two jobs share one store; give each its own "
               "MASTER_PORT (or rendezvous endpoint)");
  const std::uint32_t context = getU32(record, 8);
  out.route = std::make_shared<engine::Route>(
      engine::Route{std::string(record.begin() + jobAt + 4 + jobLength, record.end()),
                    context & 0xffffu, static_cast<std::uint16_t>(context >> 16)});
  return out;
}

std::shared_ptr<const engine::Route> PeerTable::adopt(int rank, Record record) {
  std::shared_ptr<const engine::Route> route;
  {
    // In the table before it is watched: a death reported the moment the watch starts
    // finds its rank (ranksAt), and is never reported twice.
    std::lock_guard<std::mutex> lock(mutex_);
    if (!routes_[rank]) {
      routes_[rank] = std::move(record.route);
      pids_[rank] = record.process.pid;
      samePidSpace_[rank] = sameSpaceAsThisProcess(record.process) ? 1 : 0;
    }
    route = routes_[rank];
    prefetched_.erase(rank);
  }
  // Watch first: an operation on this route may only start (known_) once a death would be
  // seen.
  if (onResolved_) onResolved_(rank, *route, record.process);
  known_[rank].store(true, std::memory_order_release);
  return route;
}

void PeerTable::resolve(const std::vector<int>& ranks, std::string_view operation) {
  std::vector<int> missing;
  std::vector<std::pair<int, Record>> ready;  // prefetched: no store request
  for (int r : ranks) {
    checkRank(r);
    if (known_[r].load(std::memory_order_acquire)) continue;
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = prefetched_.find(r);
    if (it != prefetched_.end()) {
      ready.emplace_back(r, Record{routes_[r], it->second});
    } else {
      missing.push_back(r);
    }
  }
  for (auto& [r, record] : ready) adopt(r, std::move(record));
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty()) return;
  const auto records = fetch(missing, operation);
  for (std::size_t i = 0; i < missing.size(); ++i) adopt(missing[i], parse(missing[i], records[i]));
}

void PeerTable::getPublished(const std::vector<int>& ranks, core::KeyValueStore& via) {
  std::vector<int> ready;
  std::vector<std::string> keys;
  for (int r : ranks) {
    checkRank(r);
    if (known(r) || !via.check({key(r)})) continue;
    ready.push_back(r);
    keys.push_back(key(r));
  }
  if (ready.empty()) return;
  const auto records = via.multiGet(keys);
  for (std::size_t i = 0; i < ready.size(); ++i) {
    if (!known(ready[i])) adopt(ready[i], parse(ready[i], records[i]));
  }
}

void PeerTable::prefetch(const std::vector<int>& ranks, std::string_view operation) {
  std::vector<int> missing;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (int r : ranks) {
      checkRank(r);
      if (!routes_[r]) missing.push_back(r);
    }
  }
  std::sort(missing.begin(), missing.end());
  missing.erase(std::unique(missing.begin(), missing.end()), missing.end());
  if (missing.empty()) return;
  const auto records = fetch(missing, either(operation, kForRelay));
  for (std::size_t i = 0; i < missing.size(); ++i) {
    Record record = parse(missing[i], records[i]);
    std::lock_guard<std::mutex> lock(mutex_);
    if (routes_[missing[i]]) continue;  // adopted meanwhile by another thread
    routes_[missing[i]] = std::move(record.route);
    pids_[missing[i]] = record.process.pid;
    samePidSpace_[missing[i]] = sameSpaceAsThisProcess(record.process) ? 1 : 0;
    prefetched_.emplace(missing[i], std::move(record.process));
  }
}

std::vector<std::vector<uint8_t>> PeerTable::fetch(const std::vector<int>& ranks,
                                                   std::string_view operation) {
  std::vector<std::string> keys;
  keys.reserve(ranks.size());
  for (int r : ranks) keys.push_back(key(r));
  // One request for all of them (TCPStore: one wait and one MULTI_GET, whatever their
  // number), where a get each cost a round trip per rank: p of them on every rank's first
  // collective, p^2 on the store. Stores without it get each key (c10d's default).
  std::vector<std::vector<uint8_t>> records;
  try {
    records = store_->multiGet(keys);
  } catch (const std::exception&) {
    const core::ErrorReading error = core::readError(std::current_exception());
    if (error.kind == core::ErrorKind::Network) throwUnreachable(ranks, operation, error.message);
    if (error.kind == core::ErrorKind::Store) throwMissing(ranks, error.message);
    throw;
  }
  COMMUX_CHECK(records.size() == ranks.size(), Runtime, "commux: the store answered ",
               records.size(), " of ", ranks.size(), " peer records");
  return records;
}

void PeerTable::throwMissing(const std::vector<int>& ranks, const std::string& why) const {
  // The store's own message lists every key waited for (thousands at scale): name the
  // ranks that are missing instead, a check each, on this failure path only.
  std::vector<int> absent;
  std::size_t checked = 0;
  try {
    for (int r : ranks) {
      ++checked;
      if (!store_->check({key(r)})) absent.push_back(r);
      if (absent.size() == kNamed) break;
    }
  } catch (const std::exception&) {
    // The store itself is gone: its error is all there is to say.
  }
  std::string named;
  for (int r : absent) named += (named.empty() ? "" : ", ") + std::to_string(r);
  if (absent.size() == kNamed && checked < ranks.size()) named += ", ...";
  const std::string cause = why.size() > 300 ? why.substr(0, 300) + "..." : why;
  const std::string who =
      absent.empty() ? std::to_string(ranks.size()) + " ranks" : "rank(s) " + named;
  COMMUX_FAIL(Store, "commux: rank " + std::to_string(rank_) +
                         " waited in vain for the peer records of " + who +
                         " (did every rank create this group?): " + cause);
}

void PeerTable::throwUnreachable(const std::vector<int>& ranks, std::string_view operation,
                                 const std::string& why) const {
  // torch says only "Broken pipe" or "Connection reset by peer": say whose record, what
  // for, and which store. torch's rendezvous (env://, tcp://) serves the store from rank
  // 0's process, so it goes when rank 0 exits; torchrun's agent serves it instead.
  COMMUX_FAIL(Network, "commux: rank " + std::to_string(rank_) +
                           " could not read the peer record of " + nameRanks(ranks) +
                           ", needed for " + std::string(operation) + ": " + storeLost(why));
}

std::string PeerTable::storeLost(const std::string& why) const {
  const std::string cause = why.size() > 300 ? why.substr(0, 300) + "..." : why;
  const std::string where = store_->location();
  const std::string store =
      where.empty() ? "the group's store"
                    : "the group's store (" + where +
                          ", served by rank 0's process unless torchrun's agent serves it)";
  return store + " cannot be reached; has rank 0 exited? (store error: " + cause + ")";
}

std::vector<std::shared_ptr<const engine::Route>> PeerTable::get(const std::vector<int>& ranks,
                                                                 std::string_view operation) {
  resolve(ranks, either(operation, kForSome));
  std::vector<std::shared_ptr<const engine::Route>> out(routes_.size());
  for (int r : ranks) out.at(r) = get(r);
  return out;
}

std::vector<int> PeerTable::unpublished() const {
  std::vector<int> missing;
  for (int r = 0; r < static_cast<int>(routes_.size()); ++r) {
    if (!known(r) && !store_->check({key(r)})) missing.push_back(r);
  }
  return missing;
}

void PeerTable::resolveAll(std::string_view operation) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (allResolved_) return;
  }
  std::vector<int> all(routes_.size());
  for (std::size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int>(r);
  resolve(all, either(operation, kForAll));
  std::lock_guard<std::mutex> lock(mutex_);
  allResolved_ = true;
}

std::int64_t PeerTable::pidOf(int rank) const {
  if (!known(rank)) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  return pids_[rank];
}

std::int64_t PeerTable::localPidOf(int rank) const {
  if (!known(rank)) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  return samePidSpace_[rank] ? pids_[rank] : -1;
}

std::shared_ptr<const engine::Route> PeerTable::known(int rank) const {
  if (rank < 0 || static_cast<std::size_t>(rank) >= routes_.size()) return nullptr;
  return known_[rank].load(std::memory_order_acquire) ? routes_[rank] : nullptr;
}

std::shared_ptr<const engine::Route> PeerTable::reachable(int rank) const {
  if (auto route = known(rank)) return route;
  if (rank < 0 || static_cast<std::size_t>(rank) >= routes_.size()) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  return routes_[rank];
}

std::vector<int> PeerTable::knownRanks() const {
  std::vector<int> ranks;
  for (std::size_t r = 0; r < routes_.size(); ++r) {
    if (known_[r].load(std::memory_order_acquire)) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

std::vector<int> PeerTable::ranksAt(const std::string& address) const {
  std::vector<int> ranks;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t r = 0; r < routes_.size(); ++r) {
    if (routes_[r] && routes_[r]->address == address) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

}  // namespace commux
