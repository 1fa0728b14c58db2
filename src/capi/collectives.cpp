// The collectives: (sendbuf, recvbuf, count, datatype[, op][, root], comm, stream) onto the
// core's in-place collectives over Buffers, copying sendbuf into recvbuf first where the
// core works in place.
#include <cstring>
#include <vector>

#include "capi/comm.hpp"
#include "core/error.hpp"
#include "group/collectives.hpp"
#include "group/device_memory.hpp"

namespace commux::capi {
namespace {

void checkRoot(const commuxComm& comm, int root, const char* what) {
  COMMUX_CHECK(root >= 0 && root < comm.group->size(), InvalidArgument, "commux: ", what, ": root ",
               root, " is not a rank of this ", comm.group->size(), "-rank communicator");
}

// count x the group's size, the length of a buffer of one block per rank; raises
// InvalidArgument when it overflows.
std::size_t perRank(const commuxComm& comm, std::size_t count, const char* what) {
  const auto size = static_cast<std::size_t>(comm.group->size());
  COMMUX_CHECK(count <= SIZE_MAX / size, InvalidArgument, "commux: ", what, ": ", count, " x ",
               size, " elements overflow");
  return count * size;
}

// A buffer only the root brings (gather's output, scatter's input); elsewhere none, so the
// caller's pointer there is never read.
core::Buffer rootOnly(const commuxComm& comm, int root, const void* data, std::size_t count,
                      commuxDataType_t type, void* stream, const char* what) {
  return comm.group->rank() == root ? callBuffer(data, count, type, stream, what)
                                    : callBuffer(nullptr, 0, type, stream, what);
}

// Waits for a collective, or leaves it to commuxGroupEnd.
void finish(commuxComm& comm, std::shared_ptr<group::Request> request) {
  if (!deferToGroup(comm, request)) waitFor(comm, *request);
}

// sendbuf of a collective that runs in place over recvbuf: checked here; the group copies
// it into recvbuf once the call was checked (COMMUX_CHECK_COLLECTIVES included), so a
// refused call leaves recvbuf as it was; on a GPU queued on the call's stream. Inside
// commuxGroupStart/End that copy happens at the call too, before the batch is posted.
void checkInput(const core::Buffer& send, const core::Buffer& recv, const char* what) {
  if (send.data == recv.data || send.bytes() == 0) return;
  COMMUX_CHECK(send.memory == recv.memory && send.device == recv.device, InvalidArgument,
               "commux: ", what, ": sendbuf is in ", group::describeMemory(send),
               " and recvbuf in ", group::describeMemory(recv), "; they must be in one");
  const char* s = send.bytePointer();
  const char* r = recv.bytePointer();
  COMMUX_CHECK(s + send.bytes() <= r || r + recv.bytes() <= s, InvalidArgument, "commux: ", what,
               ": sendbuf and recvbuf overlap without being equal");
}

}  // namespace
}  // namespace commux::capi

using namespace commux;
using capi::guarded;

extern "C" {

commuxResult_t commuxAllReduce(const void* sendbuf, void* recvbuf, size_t count,
                               commuxDataType_t datatype, commuxRedOp_t op, commuxComm_t comm,
                               void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxAllReduce";
    auto send = capi::callBuffer(sendbuf, count, datatype, stream, what);
    auto recv = capi::callBuffer(recvbuf, count, datatype, stream, what);
    const auto reduceOp = capi::reduceOpOf(op, what);
    COMMUX_CHECK(core::reduces(recv.dtype, reduceOp), InvalidArgument, "commux: ", what, ": ",
                 core::nameOf(reduceOp), " is not defined on ", core::nameOf(recv.dtype));
    capi::checkInput(send, recv, what);
    capi::inGroup(c);
    capi::finish(c, group::allreduce(*c.group, recv, reduceOp, capi::timeoutOf(&c),
                                     capi::streamOf(recv, stream), send));
  });
}

commuxResult_t commuxReduce(const void* sendbuf, void* recvbuf, size_t count,
                            commuxDataType_t datatype, commuxRedOp_t op, int root,
                            commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxReduce";
    capi::checkRoot(c, root, what);
    const auto reduceOp = capi::reduceOpOf(op, what);
    auto send = capi::callBuffer(sendbuf, count, datatype, stream, what);
    COMMUX_CHECK(core::reduces(send.dtype, reduceOp), InvalidArgument, "commux: ", what, ": ",
                 core::nameOf(reduceOp), " is not defined on ", core::nameOf(send.dtype));
    core::Buffer buffer = send;
    core::Buffer input;
    if (c.group->rank() == root) {
      buffer = capi::callBuffer(recvbuf, count, datatype, stream, what);
      capi::checkInput(send, buffer, what);
      input = send;
    }
    capi::inGroup(c);
    capi::finish(c, group::reduce(*c.group, buffer, reduceOp, root, capi::timeoutOf(&c),
                                  capi::streamOf(buffer, stream), input));
  });
}

commuxResult_t commuxBroadcast(const void* sendbuf, void* recvbuf, size_t count,
                               commuxDataType_t datatype, int root, commuxComm_t comm,
                               void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxBroadcast";
    capi::checkRoot(c, root, what);
    auto recv = capi::callBuffer(recvbuf, count, datatype, stream, what);
    core::Buffer input;
    if (c.group->rank() == root) {
      input = capi::callBuffer(sendbuf, count, datatype, stream, what);
      capi::checkInput(input, recv, what);
    }
    capi::inGroup(c);
    capi::finish(c, group::broadcast(*c.group, recv, root, capi::timeoutOf(&c),
                                     capi::streamOf(recv, stream), input));
  });
}

commuxResult_t commuxAllGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                               commuxDataType_t datatype, commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxAllGather";
    const std::size_t all = capi::perRank(c, sendcount, what);
    auto send = capi::callBuffer(sendbuf, sendcount, datatype, stream, what);
    auto recv = capi::callBuffer(recvbuf, all, datatype, stream, what);
    capi::inGroup(c);
    capi::finish(c, group::allgather(*c.group, send, recv, capi::timeoutOf(&c),
                                     capi::streamOf(recv, stream)));
  });
}

commuxResult_t commuxReduceScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                                   commuxDataType_t datatype, commuxRedOp_t op, commuxComm_t comm,
                                   void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxReduceScatter";
    const std::size_t all = capi::perRank(c, recvcount, what);
    const auto reduceOp = capi::reduceOpOf(op, what);
    auto send = capi::callBuffer(sendbuf, all, datatype, stream, what);
    auto recv = capi::callBuffer(recvbuf, recvcount, datatype, stream, what);
    capi::inGroup(c);
    capi::finish(c, group::reduceScatter(*c.group, send, recv, reduceOp, capi::timeoutOf(&c),
                                         capi::streamOf(send, stream)));
  });
}

commuxResult_t commuxAllToAll(const void* sendbuf, void* recvbuf, size_t count,
                              commuxDataType_t datatype, commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxAllToAll";
    const std::size_t all = capi::perRank(c, count, what);
    auto send = capi::callBuffer(sendbuf, all, datatype, stream, what);
    auto recv = capi::callBuffer(recvbuf, all, datatype, stream, what);
    capi::inGroup(c);
    capi::finish(c, group::alltoall(*c.group, send, recv, {}, {}, capi::timeoutOf(&c)));
  });
}

commuxResult_t commuxAllToAllv(const void* sendbuf, const size_t* sendcounts, void* recvbuf,
                               const size_t* recvcounts, commuxDataType_t datatype,
                               commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxAllToAllv";
    COMMUX_CHECK(sendcounts != nullptr && recvcounts != nullptr, InvalidArgument, "commux: ", what,
                 ": sendcounts and recvcounts must not be NULL");
    const auto size = static_cast<std::size_t>(c.group->size());
    std::vector<std::size_t> sends(sendcounts, sendcounts + size);
    std::vector<std::size_t> recvs(recvcounts, recvcounts + size);
    // The buffers' lengths are the counts' sums; the core checks the sums for overflow.
    std::size_t sendTotal = 0, recvTotal = 0;
    for (std::size_t i = 0; i < size; ++i) {
      COMMUX_CHECK(sends[i] <= SIZE_MAX - sendTotal && recvs[i] <= SIZE_MAX - recvTotal,
                   InvalidArgument, "commux: ", what, ": the counts overflow");
      sendTotal += sends[i];
      recvTotal += recvs[i];
    }
    auto send = capi::callBuffer(sendbuf, sendTotal, datatype, stream, what);
    auto recv = capi::callBuffer(recvbuf, recvTotal, datatype, stream, what);
    capi::inGroup(c);
    capi::finish(c, group::alltoall(*c.group, send, recv, std::move(sends), std::move(recvs),
                                    capi::timeoutOf(&c)));
  });
}

commuxResult_t commuxGather(const void* sendbuf, void* recvbuf, size_t sendcount,
                            commuxDataType_t datatype, int root, commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxGather";
    capi::checkRoot(c, root, what);
    auto send = capi::callBuffer(sendbuf, sendcount, datatype, stream, what);
    auto recv =
        capi::rootOnly(c, root, recvbuf, capi::perRank(c, sendcount, what), datatype, stream, what);
    capi::inGroup(c);
    capi::finish(c, group::gather(*c.group, send, recv, root, capi::timeoutOf(&c)));
  });
}

commuxResult_t commuxScatter(const void* sendbuf, void* recvbuf, size_t recvcount,
                             commuxDataType_t datatype, int root, commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    const char* what = "commuxScatter";
    capi::checkRoot(c, root, what);
    auto recv = capi::callBuffer(recvbuf, recvcount, datatype, stream, what);
    auto send =
        capi::rootOnly(c, root, sendbuf, capi::perRank(c, recvcount, what), datatype, stream, what);
    capi::inGroup(c);
    capi::finish(c, group::scatter(*c.group, send, recv, root, capi::timeoutOf(&c)));
  });
}

commuxResult_t commuxBarrier(commuxComm_t comm, void* stream) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(stream == nullptr, Unsupported,
                 "commux: commuxBarrier: streams are not supported by this version; pass NULL");
    capi::inGroup(c);
    capi::finish(c, group::barrier(*c.group, capi::timeoutOf(&c)));
  });
}

}  // extern "C"
