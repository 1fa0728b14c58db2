// ProcessGroupUCX::monitoredBarrier: every rank reports to rank 0, which waits for each
// with the barrier's timeout, names the ranks that did not come, and only then releases
// the others. Unlike the dissemination barrier it can say WHO is missing, at the cost of
// rank 0 talking to everyone.
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
  const auto timeout = opts.timeout.count() > 0 ? opts.timeout : timeout_;
  const std::uint32_t seq = nextSequence();
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto leftUntil = [](std::chrono::steady_clock::time_point d) {
    // A spent deadline still gets a real, tiny limit: wait(0) would mean "no limit".
    return std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                        d - std::chrono::steady_clock::now()),
                    std::chrono::milliseconds(1));
  };
  auto transfer = [&](int peer, std::uint32_t round, bool send) {
    const std::string what = std::string("monitored_barrier ") + (send ? "signal to" : "wait for") +
                             " rank " + std::to_string(peer);
    return launchCollective(c10d::OpType::BARRIER, seq, what + " (collective #" +
                                                            std::to_string(seq) + ")",
                            {}, oneTransfer(peer, round, send), at::empty({0}, at::kByte),
                            std::nullopt, nullptr, timeout);
  };

  if (rank_ != 0) {
    auto arrive = transfer(0, kArriveRound, true);
    auto release = transfer(0, kReleaseRound, false);
    try {
      arrive->wait(leftUntil(deadline));
      release->wait(leftUntil(deadline));
    } catch (const std::exception& e) {
      C10_THROW_ERROR(DistBackendError,
                      "commux: rank " + std::to_string(rank_) +
                          " reached monitored_barrier but was not released by rank 0 within " +
                          std::to_string(timeout.count()) +
                          " ms; rank 0's error names the ranks that did not arrive (" +
                          e.what() + ")");
    }
    return;
  }

  std::vector<c10::intrusive_ptr<c10d::Work>> arrivals;
  for (int r = 1; r < size_; ++r) arrivals.push_back(transfer(r, kArriveRound, false));
  std::vector<int> missing;
  for (int r = 1; r < size_; ++r) {
    auto& arrival = arrivals[static_cast<std::size_t>(r - 1)];
    if (!waitAllRanks && !missing.empty()) {
      arrival->abort();
      continue;
    }
    try {
      arrival->wait(leftUntil(deadline));
    } catch (const std::exception&) {
      missing.push_back(r);
    }
  }
  if (!missing.empty()) {
    // The same wording as Gloo's monitored barrier, which scripts may already grep for.
    C10_THROW_ERROR(DistBackendError,
                    "[Rank 0]: " + std::string(missing.size() == 1 ? "Rank " : "Ranks ") +
                        joinRanks(missing) + " failed to pass monitoredBarrier in " +
                        std::to_string(timeout.count()) + " ms");
  }
  std::vector<c10::intrusive_ptr<c10d::Work>> releases;
  for (int r = 1; r < size_; ++r) releases.push_back(transfer(r, kReleaseRound, true));
  for (auto& release : releases) release->wait(leftUntil(deadline + timeout));
}

}  // namespace commux
