// ProcessGroupUCX::monitoredBarrier: every rank reports to rank 0, which waits for each
// with the barrier's timeout, names the ranks that did not come, and only then releases
// the others. Unlike the dissemination barrier it can say WHO is missing, at the cost of
// rank 0 talking to everyone. Its transfers count as point-to-point for failure handling:
// a missing rank is what it reports, not a reason to refuse the group's collectives.
#include <c10/util/Exception.h>

#include <algorithm>
#include <string>

#include "c10d/work_ucx.hpp"
#include "collectives/schedule.hpp"
#include "commux/process_group_ucx.hpp"

namespace commux {
namespace {

constexpr std::uint32_t kArriveRound = 0;
constexpr std::uint32_t kReleaseRound = 1;

collectives::Schedule oneTransfer(int peer, std::uint32_t round, bool send) {
  collectives::Step step;
  (send ? step.sends : step.recvs).push_back({peer, round, 0, 0});
  collectives::Schedule s;
  s.add(std::move(step));
  return s;
}

std::string joinRanks(const std::vector<int>& ranks) {
  std::string s;
  for (std::size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

}  // namespace

void ProcessGroupUCX::monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) {
  checkSameProcess();
  // An explicit 0 is a real (spent) limit, as in Gloo; only "unset" means the group's.
  const auto timeout = opts.timeout.count() < 0 ? timeout_ : opts.timeout;
  const std::uint32_t seq = nextSequence();
  const auto start = std::chrono::steady_clock::now();
  auto remaining = [&] {
    return timeout - std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::steady_clock::now() - start);
  };
  auto transfer = [&](int peer, std::uint32_t round, bool send) {
    const std::string what = std::string("monitored_barrier ") + (send ? "signal to" : "wait for") +
                             " rank " + std::to_string(peer);
    return launchCollective(
        c10d::OpType::BARRIER, seq,
        engine::Description(what + " (collective #" + std::to_string(seq) + ")"), {},
        oneTransfer(peer, round, send), at::empty({0}, at::kByte), std::nullopt, nullptr,
        spentAsTiny(timeout), {}, peer);
  };

  if (rank_ != 0) {
    auto arrive = transfer(0, kArriveRound, true);
    auto release = transfer(0, kReleaseRound, false);
    try {
      arrive->wait(spentAsTiny(remaining()));
      release->wait(spentAsTiny(remaining()));
    } catch (const std::exception& e) {
      // Gloo's words, which torch's tests and users' scripts match on.
      C10_THROW_ERROR(DistBackendError,
                      "Rank " + std::to_string(rank_) +
                          " successfully reached monitoredBarrier, but received errors while "
                          "waiting for send/recv from rank 0. Please check rank 0 logs for "
                          "faulty rank. (commux: not released within " +
                          std::to_string(timeout.count()) + " ms: " + e.what() + ")");
    }
    return;
  }

  std::vector<c10::intrusive_ptr<c10d::Work>> arrivals;
  for (int r = 1; r < size_; ++r) arrivals.push_back(transfer(r, kArriveRound, false));
  auto abandonFrom = [&](int first) {
    for (int r = first; r < size_; ++r) arrivals[static_cast<std::size_t>(r - 1)]->abort();
  };
  std::vector<int> arrived;
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    // With waitAllRanks every rank gets the whole timeout, so one slow rank cannot hide
    // the state of the ranks after it; otherwise the ranks share one deadline.
    const auto limit = waitAllRanks ? timeout : remaining();
    if (!waitAllRanks && limit.count() <= 0) {
      abandonFrom(r);
      C10_THROW_ERROR(DistBackendError,
                      "Rank 0 timed out in monitoredBarrier after " +
                          std::to_string(timeout.count()) + " ms. " +
                          (arrived.empty() ? "No ranks successfully processed in monitoredBarrier."
                                           : "Successfully processed ranks: " + joinRanks(arrived)));
    }
    try {
      arrivals[static_cast<std::size_t>(r - 1)]->wait(spentAsTiny(limit));
      arrived.push_back(r);
    } catch (const std::exception&) {
      if (!waitAllRanks) {
        abandonFrom(r + 1);
        C10_THROW_ERROR(DistBackendError, "[Rank 0]: Rank " + std::to_string(r) +
                                              " failed to pass monitoredBarrier in " +
                                              std::to_string(timeout.count()) + " ms");
      }
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    C10_THROW_ERROR(DistBackendError, "[Rank 0]: Ranks " + joinRanks(missing) +
                                          " failed to pass monitoredBarrier in " +
                                          std::to_string(timeout.count()) + " ms");
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> releases;
  for (int r = 1; r < size_; ++r) releases.push_back(transfer(r, kReleaseRound, true));
  for (auto& release : releases) release->wait(spentAsTiny(timeout));
}

}  // namespace commux
