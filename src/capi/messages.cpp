// Tagged messages and their requests.
#include "capi/comm.hpp"
#include "core/error.hpp"
#include "group/blocking_p2p.hpp"
#include "group/point_to_point.hpp"

namespace commux::capi {
namespace {

// A message's buffer, tag and peer, checked.
core::Buffer checked(commuxComm& comm, bool sending, const void* buf, std::size_t count,
                     commuxDataType_t type, int peer, int tag, void* stream, const char* what) {
  const core::Buffer buffer = callBuffer(buf, count, type, stream, what);
  const int size = comm.group->size();
  COMMUX_CHECK(tag >= 0, InvalidArgument, "commux: ", what, ": tag ", tag,
               " is negative (tags are 0 .. COMMUX_TAG_MAX)");
  COMMUX_CHECK((peer >= 0 && peer < size) || (!sending && peer == COMMUX_ANY_SOURCE),
               InvalidArgument, "commux: ", what, ": peer ", peer, " is not a rank of this ", size,
               "-rank communicator", sending ? "" : " nor COMMUX_ANY_SOURCE");
  return buffer;
}

// A blocking message on the caller's thread (group/blocking_p2p.hpp), outside a group;
// false when that path declines (the caller takes the ordinary one).
// Host memory only: a device buffer waits for its stream.
bool blocking(commuxComm& comm, bool sending, const core::Buffer& buffer, int peer, int tag) {
  if (buffer.memory != core::MemoryType::Host || inGroup(comm)) return false;
  return sending ? group::sendBlocking(*comm.group, buffer.data, buffer.bytes(), peer, tag,
                                       timeoutOf(&comm))
                 : group::recvBlocking(*comm.group, buffer.data, buffer.bytes(), peer, tag,
                                       timeoutOf(&comm));
}

// The ordinary path: the message as a Request the group tracks (the caller waits, or not).
// A device buffer's message starts once `stream` has run what is queued on it now.
std::shared_ptr<group::Request> post(commuxComm& comm, bool sending, const core::Buffer& buffer,
                                     int peer, int tag, void* stream) {
  inGroup(comm);
  const auto timeout = timeoutOf(&comm);
  const auto after = streamOf(buffer, stream);
  return sending ? group::send(*comm.group, buffer, peer, tag, timeout, after)
                 : group::recv(*comm.group, buffer,
                               peer == COMMUX_ANY_SOURCE ? group::kAnySource : peer, tag, timeout,
                               after);
}

void fill(commuxStatus* status, const group::Request& request, int tag) {
  if (status == nullptr) return;
  status->source = request.sourceRank();
  status->tag = tag;
}

}  // namespace
}  // namespace commux::capi

using namespace commux;
using capi::guarded;

extern "C" {

commuxResult_t commuxSend(const void* buf, size_t count, commuxDataType_t datatype, int peer,
                          int tag, commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const auto buffer =
        capi::checked(c, true, buf, count, datatype, peer, tag, stream, "commuxSend");
    if (capi::blocking(c, true, buffer, peer, tag)) return;
    auto request = capi::post(c, true, buffer, peer, tag, stream);
    if (!capi::deferToGroup(c, request)) capi::waitFor(c, *request);
  });
}

commuxResult_t commuxRecv(void* buf, size_t count, commuxDataType_t datatype, int peer, int tag,
                          commuxComm_t comm, void* stream, commuxStatus* status) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const auto buffer =
        capi::checked(c, false, buf, count, datatype, peer, tag, stream, "commuxRecv");
    if (peer != COMMUX_ANY_SOURCE && capi::blocking(c, false, buffer, peer, tag)) {
      if (status != nullptr) *status = commuxStatus{peer, tag};
      return;
    }
    auto request = capi::post(c, false, buffer, peer, tag, stream);
    if (capi::deferToGroup(c, request)) {
      // Inside a group the receive completes at commuxGroupEnd: its status is not known yet.
      if (status != nullptr) *status = commuxStatus{peer, tag};
      return;
    }
    capi::waitFor(c, *request);
    capi::fill(status, *request, tag);
  });
}

commuxResult_t commuxIsend(const void* buf, size_t count, commuxDataType_t datatype, int peer,
                           int tag, commuxComm_t comm, void* stream, commuxRequest_t* request) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(request != nullptr, InvalidArgument, "commux: commuxIsend: request is NULL");
    auto r = capi::post(
        c, true, capi::checked(c, true, buf, count, datatype, peer, tag, stream, "commuxIsend"),
        peer, tag, stream);
    *request = new commuxRequest{&c, std::move(r), tag};
  });
}

commuxResult_t commuxIrecv(void* buf, size_t count, commuxDataType_t datatype, int peer, int tag,
                           commuxComm_t comm, void* stream, commuxRequest_t* request) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(request != nullptr, InvalidArgument, "commux: commuxIrecv: request is NULL");
    auto r = capi::post(
        c, false, capi::checked(c, false, buf, count, datatype, peer, tag, stream, "commuxIrecv"),
        peer, tag, stream);
    *request = new commuxRequest{&c, std::move(r), tag};
  });
}

commuxResult_t commuxTest(commuxRequest_t request, int* done, commuxStatus* status) {
  commuxResult_t result = guarded([&] {
    COMMUX_CHECK(request != nullptr && done != nullptr, InvalidArgument,
                 "commux: commuxTest: request and done must not be NULL");
    *done = request->request->done() ? 1 : 0;
  });
  if (result != commuxSuccess || *done == 0) return result;
  result = guarded([&] {
    capi::fill(status, *request->request, request->tag);
    if (auto error = request->request->error()) std::rethrow_exception(error);
  });
  delete request;
  return result;
}

commuxResult_t commuxWait(commuxRequest_t request, commuxStatus* status) {
  if (request == nullptr) {
    return capi::failWith(commuxInvalidArgument, "commux: commuxWait: request is NULL");
  }
  const commuxResult_t result = guarded([&] {
    capi::waitFor(*request->comm, *request->request);
    capi::fill(status, *request->request, request->tag);
  });
  delete request;
  return result;
}

commuxResult_t commuxRequestFree(commuxRequest_t request) {
  if (request == nullptr) return commuxSuccess;
  const commuxResult_t result = guarded([&] {
    if (!request->request->done()) {
      request->request->abort();
      // The cancellation runs on the thread that drives the worker, and a receive UCX
      // already matched writes the buffer until its transfer ends: the buffer is the
      // caller's again only once the operation has ended.
      COMMUX_CHECK(
          request->request->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait),
          Backend, "commux: commuxRequestFree: ", request->request->description(), ": ",
          group::stillUnderWay("its buffer"));
    }
  });
  delete request;
  return result;
}

}  // extern "C"
