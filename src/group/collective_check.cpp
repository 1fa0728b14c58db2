#include "group/collective_check.hpp"

#include <algorithm>
#include <exception>
#include <memory>
#include <utility>
#include <vector>

#include "collectives/selection.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"
#include "engine/schedule_op.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"

namespace commux::group {
namespace {

using Clock = std::chrono::steady_clock;
using Fields = std::vector<std::int64_t>;

/// What is left of the check's time at `deadline`.
std::chrono::milliseconds left(Clock::time_point deadline) {
  const auto now = Clock::now();
  return deadline > now ? std::chrono::ceil<std::chrono::milliseconds>(deadline - now)
                        : std::chrono::milliseconds(0);
}

/// One collective of the check: `schedule` over `work` (sends read `sendBuffer` when it is
/// present), under a sequence number of its own. Raises as a collective fails.
void runStep(Group& group, collectives::Schedule schedule, core::Buffer work,
             core::Buffer sendBuffer, const engine::Description& description,
             std::chrono::milliseconds timeout) {
  const std::uint32_t sequence = group.nextSequence();
  group.watchMembers();  // every member's record in one store request, then the plan's
  engine::Description checking("the collective check before " + description.str());
  auto setup =
      scheduleSetup(group, std::move(schedule), std::nullopt, sequence, checking, group.size());
  setup.work = std::move(work);
  setup.sendBuffer = std::move(sendBuffer);
  auto request = std::make_shared<Request>(Request::Kind::Other, std::move(checking), timeout,
                                           group.sharedEngine());
  launchCollective(group, request,
                   std::make_shared<engine::ScheduleOp>(std::move(setup), request->parts(),
                                                        request->completer()));
  request->wait(timeout);
  if (auto error = request->error()) std::rethrow_exception(error);
}

/// Every rank's `own` (`width` fields each), in rank order. Owned by the operation: a wait
/// that times out returns before the cancelled receive is gone, and a late message must
/// not land in freed memory.
std::shared_ptr<const Fields> allgather(Group& group, const Fields& own,
                                        const engine::Description& description,
                                        std::chrono::milliseconds timeout) {
  const std::size_t width = own.size();
  const int rank = group.rank(), size = group.size();
  auto all = std::make_shared<Fields>(width * static_cast<std::size_t>(size), -1);
  std::copy(own.begin(), own.end(), all->begin() + static_cast<std::ptrdiff_t>(width * rank));
  // The check's own collectives always take the automatic schedule (a forced one is the
  // call's, not the check's).
  auto plan = collectives::planAllgather(rank, size, collectives::equalBlocks(width, size),
                                         sizeof(std::int64_t), thresholds(false));
  runStep(group, std::move(plan.schedule),
          core::bufferOf(all->data(), all->size(), core::Dtype::Int64, all), core::Buffer{},
          description, timeout);
  return all;
}

/// What each rank sends to this one, by rank: an all-to-all of one element per pair.
std::shared_ptr<const Fields> exchangeCounts(Group& group, const std::vector<std::size_t>& counts,
                                             const engine::Description& description,
                                             std::chrono::milliseconds timeout) {
  const int rank = group.rank(), size = group.size();
  const auto n = static_cast<std::size_t>(size);
  auto sent = std::make_shared<Fields>(counts.begin(), counts.end());
  const auto blocks = collectives::equalBlocks(1, size);
  auto plan = collectives::planAlltoall(rank, size, blocks, blocks, sizeof(std::int64_t),
                                        /*cpu=*/true, /*uniform=*/true, thresholds(false));
  // Room for Bruck's pack areas past the received blocks, when it is chosen.
  auto heard = std::make_shared<Fields>(std::max(n, plan.schedule.workElements), -1);
  (*heard)[static_cast<std::size_t>(rank)] = (*sent)[static_cast<std::size_t>(rank)];
  runStep(group, std::move(plan.schedule),
          core::bufferOf(heard->data(), heard->size(), core::Dtype::Int64, heard),
          core::bufferOf(sent->data(), sent->size(), core::Dtype::Int64, sent), description,
          timeout);
  return heard;
}

/// Counts per rank: every pair's counts must agree. Each rank compares what the others send
/// it with what it makes room for, and the findings go round, so that every rank raises the
/// same error (naming the lowest receiving rank that found a difference).
void checkCounts(Group& group, const CallSignature& mine, const engine::Description& description,
                 Clock::time_point deadline) {
  const auto n = static_cast<std::size_t>(group.size());
  COMMUX_ASSERT(mine.sendCounts.size() == n && mine.recvCounts.size() == n,
                "the collective check needs a count per rank");
  const auto heard = exchangeCounts(group, mine.sendCounts, description, left(deadline));
  constexpr std::size_t kFound = 3;  // the sender, what it sends, what this rank expects
  Fields found{-1, 0, 0};
  for (std::size_t s = 0; s < n; ++s) {
    const auto expected = static_cast<std::int64_t>(mine.recvCounts[s]);
    if ((*heard)[s] == expected) continue;
    found = {static_cast<std::int64_t>(s), (*heard)[s], expected};
    break;
  }
  const auto all = allgather(group, found, description, left(deadline));
  int first = -1, others = 0;
  for (std::size_t r = 0; r < n; ++r) {
    if ((*all)[kFound * r] < 0) continue;
    if (first < 0) {
      first = static_cast<int>(r);
    } else {
      ++others;
    }
  }
  if (first < 0) return;
  const std::int64_t* f = all->data() + kFound * static_cast<std::size_t>(first);
  COMMUX_FAIL(InvalidArgument, "commux: ", description.str(), ": rank ", f[0], " sends ", f[1],
              " elements to rank ", first, ", which expects ", f[2],
              " from it (rank s's send count for rank d must equal rank d's receive count for "
              "rank s)",
              others > 0 ? core::concat("; the counts of ", others, " more rank",
                                        others > 1 ? "s" : "", " differ too")
                         : std::string(),
              "; nothing was sent (COMMUX_CHECK_COLLECTIVES)");
}

}  // namespace

void checkSameCall(Group& group, const CallSignature& mine, const engine::Description& description,
                   std::chrono::milliseconds timeout, const DescribeCall& describe) {
  COMMUX_ASSERT(timeout.count() >= 0, "the collective check needs a deadline");
  const auto deadline = Clock::now() + timeout;
  // Whether counts per rank follow goes round too: every rank must take the same steps.
  constexpr std::size_t kFields = 5;
  const bool counts = !mine.sendCounts.empty() || !mine.recvCounts.empty();
  const auto all = allgather(group, {mine.operation, mine.type, mine.reduce, mine.count, counts},
                             description, timeout);
  const auto signatureOf = [&](int r) {
    const std::int64_t* f = all->data() + kFields * static_cast<std::size_t>(r);
    return CallSignature{f[0], f[1], f[2], f[3], {}, {}};
  };
  for (int r = 1; r < group.size(); ++r) {
    const std::int64_t* f = all->data() + kFields * static_cast<std::size_t>(r);
    if (std::equal(f, f + kFields, all->data())) continue;
    COMMUX_FAIL(InvalidArgument, "commux: ", description.str(),
                ": the ranks called different collectives (rank 0: ", describe(signatureOf(0)),
                "; rank ", r, ": ", describe(signatureOf(r)),
                "); nothing was sent (COMMUX_CHECK_COLLECTIVES)");
  }
  if (counts) checkCounts(group, mine, description, deadline);
}

}  // namespace commux::group
