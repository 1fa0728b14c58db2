#include "engine/blocking_transfer.hpp"

#include <thread>

#include "engine/engine.hpp"

namespace commux::engine {

BlockingTransfer::~BlockingTransfer() {
  // The owner waits for the end or cancels; this covers an exception in between, since
  // UCX must never call back into a dead object.
  if (posted_ && !ended()) cancel(std::chrono::seconds(10));
  // The thread that ended it must be out of this object before it goes. Usually it is
  // already: the owner's own thread ended it. A cancel that did not take released the
  // request, and nobody calls back.
  if (ended()) {
    while (!released_.load(std::memory_order_acquire)) std::this_thread::yield();
  }
  // Ended off the worker lock (on UCX's own thread), or released by a cancel that did not
  // take: the request, and the engine's list, are put right under the lock.
  if (request_ != nullptr || listed_)
    engine_.submit(Submission::call(releaseRequest, this).orWait());
}

bool BlockingTransfer::sendIfFree(const Route& route, const void* data, std::size_t bytes,
                                  wire::Tag tag) {
  bytes_ = bytes;
  Post post{this, &route, const_cast<void*>(data), bytes, tag, 0};
  return engine_.submit(Submission::call(postSend, &post));
}

bool BlockingTransfer::recvIfFree(void* data, std::size_t bytes, wire::Tag tag, wire::Tag mask) {
  bytes_ = bytes;
  Post post{this, nullptr, data, bytes, tag, mask};
  return engine_.submit(Submission::call(postRecv, &post));
}

namespace {

// What a send and a receive post alike: contiguous host bytes, completion through `self`.
ucp_request_param_t hostParams(void* self, std::uint32_t flag) {
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE | flag;
  params.user_data = self;
  params.datatype = ucp_dt_make_contig(1);
  params.memory_type = UCS_MEMORY_TYPE_HOST;
  return params;
}

}  // namespace

void BlockingTransfer::postSend(Engine& engine, void* arg) {
  const auto& post = *static_cast<Post*>(arg);
  // As Op::postSend: FAST_CMPL picks the protocol that completes soonest.
  ucp_request_param_t params = hostParams(post.self, UCP_OP_ATTR_FLAG_FAST_CMPL);
  params.cb.send = onSend;
  ucp_ep_h ep = engine.endpoint(*post.route);
  post.self->posting_ = true;
  void* request = ucp_tag_send_nbx(ep, post.data, post.bytes, post.tag, &params);
  post.self->posting_ = false;
  post.self->posted(request);
}

void BlockingTransfer::postRecv(Engine& engine, void* arg) {
  const auto& post = *static_cast<Post*>(arg);
  // As Op::postRecv: through the callback always, since UCX 1.13 reports no length for a
  // receive that completes at once.
  ucp_request_param_t params = hostParams(post.self, UCP_OP_ATTR_FLAG_NO_IMM_CMPL);
  params.cb.recv = onRecv;
  post.self->posting_ = true;
  void* request =
      ucp_tag_recv_nbx(engine.worker(), post.data, post.bytes, post.tag, post.mask, &params);
  post.self->posting_ = false;
  post.self->posted(request);
}

void BlockingTransfer::posted(void* request) {
  posted_ = true;
  if (UCS_PTR_IS_PTR(request)) {
    // A message already here may have called back inside the post; UCX still returns the
    // request then, and it is ours to give back.
    if (flag_.done()) {
      ucp_request_free(request);
    } else {
      request_ = request;
      engine_.transferPosted(this);
    }
    return;
  }
  // Completed (or failed) at once: no callback comes.
  status_ = UCS_PTR_STATUS(request);
  engine_.setDone(flag_);
  released_.store(true, std::memory_order_release);
}

void BlockingTransfer::onSend(void* request, ucs_status_t status, void* user) {
  static_cast<BlockingTransfer*>(user)->end(request, status, RecvInfo{});
}

void BlockingTransfer::onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                              void* user) {
  RecvInfo r;
  if (info != nullptr) r = RecvInfo{info->length, info->sender_tag};
  static_cast<BlockingTransfer*>(user)->end(request, status, r);
}

void BlockingTransfer::end(void* request, ucs_status_t status, const RecvInfo& info) {
  status_ = status;
  info_ = info;
  // Called back by whichever thread drives the worker: the engine gives the request back
  // once the progress call returns. Inside the post, posted() does; on UCX's own async
  // thread (no worker lock) the owner does, under the lock.
  if (!posting_ && engine_.drivenByThisThread()) {
    engine_.releaseAfterProgress(request);
    request_ = nullptr;
    engine_.transferEnded(this);
  }
  engine_.setDone(flag_);
  released_.store(true, std::memory_order_release);
}

bool BlockingTransfer::waitUntil(std::chrono::steady_clock::time_point deadline) {
  return engine_.wait(flag_, deadline, nullptr, bytes_);
}

void BlockingTransfer::cancelRequest(Engine& engine, void* arg) {
  auto* self = static_cast<BlockingTransfer*>(arg);
  // A message that already arrived (a dead peer's last one, say) still completes it.
  engine.progressOnce();
  if (!self->flag_.done() && self->request_ != nullptr) {
    ucp_request_cancel(engine.worker(), self->request_);
  }
}

void BlockingTransfer::releaseRequest(Engine& engine, void* arg) {
  auto* self = static_cast<BlockingTransfer*>(arg);
  if (self->request_ != nullptr) ucp_request_free(self->request_);
  self->request_ = nullptr;
  engine.transferEnded(self);
}

bool BlockingTransfer::cancel(std::chrono::milliseconds limit) {
  if (ended()) return true;
  engine_.submit(Submission::call(cancelRequest, this).orWait());
  if (waitUntil(std::chrono::steady_clock::now() + limit)) return true;
  // Still not ended (a rendezvous UCX cannot stop): after ucp_request_free UCX calls
  // nothing back, so this object may go.
  engine_.submit(Submission::call(releaseRequest, this).orWait());
  return ended();
}

}  // namespace commux::engine
