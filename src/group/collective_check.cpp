#include "group/collective_check.hpp"

#include <algorithm>
#include <exception>
#include <memory>
#include <vector>

#include "collectives/selection.hpp"
#include "core/buffer.hpp"
#include "core/error.hpp"
#include "engine/schedule_op.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"

namespace commux::group {

void checkSameCall(Group& group, const CallSignature& mine, const engine::Description& description,
                   std::chrono::milliseconds timeout, const DescribeCall& describe) {
  COMMUX_ASSERT(timeout.count() >= 0, "the collective check needs a deadline");
  constexpr std::size_t kFields = 4;
  const int rank = group.rank(), size = group.size();
  // Owned by the operation: a wait that times out returns before the cancelled receive is
  // gone, and a late message must not land in freed memory.
  auto fields =
      std::make_shared<std::vector<std::int64_t>>(kFields * static_cast<std::size_t>(size), -1);
  const std::vector<std::int64_t>& all = *fields;
  std::int64_t* own = fields->data() + kFields * static_cast<std::size_t>(rank);
  own[0] = mine.operation;
  own[1] = mine.type;
  own[2] = mine.reduce;
  own[3] = mine.count;
  // The check's own allgather always takes the automatic schedule (a forced one is the
  // call's, not the check's).
  auto plan = collectives::planAllgather(rank, size, collectives::equalBlocks(kFields, size),
                                         sizeof(std::int64_t), thresholds(false));
  const std::uint32_t sequence = group.nextSequence();
  group.watchMembers();  // every member's record in one store request, then the plan's
  engine::Description checking("the collective check before " + description.str());
  auto setup =
      scheduleSetup(group, std::move(plan.schedule), std::nullopt, sequence, checking, size);
  setup.work = core::bufferOf(fields->data(), fields->size(), core::Dtype::Int64, fields);
  auto request = std::make_shared<Request>(Request::Kind::Other, std::move(checking), timeout,
                                           group.sharedEngine());
  launchCollective(group, request,
                   std::make_shared<engine::ScheduleOp>(std::move(setup), request->parts(),
                                                        request->completer()));
  request->wait(timeout);
  if (auto error = request->error()) std::rethrow_exception(error);
  const auto signatureOf = [&](int r) {
    const std::int64_t* f = all.data() + kFields * static_cast<std::size_t>(r);
    return CallSignature{f[0], f[1], f[2], f[3]};
  };
  for (int r = 1; r < size; ++r) {
    const std::int64_t* f = all.data() + kFields * static_cast<std::size_t>(r);
    if (std::equal(f, f + kFields, all.data())) continue;
    COMMUX_FAIL(InvalidArgument, "commux: ", description.str(),
                ": the ranks called different collectives (rank 0: ", describe(signatureOf(0)),
                "; rank ", r, ": ", describe(signatureOf(r)),
                "); nothing was sent (COMMUX_CHECK_COLLECTIVES)");
  }
}

}  // namespace commux::group
