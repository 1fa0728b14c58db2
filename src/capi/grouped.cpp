// commuxGroupStart/End: per thread, as NCCL's are. Blocking calls inside only post their
// operation (the communicator's batch is opened at its first call); the outermost end
// posts each communicator's batch and waits for every operation, so a receive and a send
// between the same two ranks, in either order on each, cannot deadlock.
#include <algorithm>
#include <utility>
#include <vector>

#include "capi/comm.hpp"
#include "core/error.hpp"

namespace commux::capi {
namespace {

struct OpenGroup {
  int depth = 0;
  std::vector<commuxComm*> comms;
  std::vector<std::pair<commuxComm*, std::shared_ptr<group::Request>>> posted;
};
thread_local OpenGroup open;

}  // namespace

bool inGroup(commuxComm& comm) {
  if (open.depth == 0) return false;
  if (std::find(open.comms.begin(), open.comms.end(), &comm) == open.comms.end()) {
    comm.group->startBatch();
    comm.openGroups.fetch_add(1, std::memory_order_acq_rel);
    open.comms.push_back(&comm);
  }
  return true;
}

bool deferToGroup(commuxComm& comm, std::shared_ptr<group::Request> request) {
  if (open.depth == 0) return false;
  open.posted.emplace_back(&comm, std::move(request));
  return true;
}

}  // namespace commux::capi

using namespace commux;

extern "C" {

commuxResult_t commuxGroupStart(void) {
  ++capi::open.depth;
  return commuxSuccess;
}

commuxResult_t commuxGroupEnd(void) {
  auto& open = capi::open;
  if (open.depth == 0) {
    return capi::failWith(commuxInvalidUsage, "commux: commuxGroupEnd without commuxGroupStart");
  }
  if (--open.depth > 0) return commuxSuccess;
  auto comms = std::move(open.comms);
  auto posted = std::move(open.posted);
  open = capi::OpenGroup{};
  commuxResult_t first = commuxSuccess;
  std::string firstMessage;
  auto note = [&](commuxResult_t result) {
    if (result != commuxSuccess && first == commuxSuccess) {
      first = result;
      firstMessage = commuxGetLastError(nullptr);
    }
  };
  for (commuxComm* comm : comms) note(capi::guarded([&] { comm->group->endBatch(); }));
  for (auto& [comm, request] : posted) note(capi::guarded([&] { capi::waitFor(*comm, *request); }));
  for (commuxComm* comm : comms) comm->openGroups.fetch_sub(1, std::memory_order_acq_rel);
  if (first != commuxSuccess) return capi::failWith(first, firstMessage);
  return commuxSuccess;
}

}  // extern "C"
