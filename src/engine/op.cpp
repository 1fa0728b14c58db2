#include "engine/op.hpp"

#include <utility>

#include "engine/errors.hpp"

#include "engine/engine.hpp"

namespace commux::engine {
namespace {

// UCX callbacks only queue the completion; the engine handles it after ucp_worker_progress
// returns, so Op code never runs inside UCX and may post or cancel freely.
void onSend(void* request, ucs_status_t status, void* user) {
  auto* pending = static_cast<Pending*>(user);
  pending->request = request;
  pending->engine->queueCompletion(pending, status, RecvInfo{});
}

void onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info, void* user) {
  auto* pending = static_cast<Pending*>(user);
  pending->request = request;
  RecvInfo r;
  if (info != nullptr) r = RecvInfo{info->length, info->sender_tag};
  pending->engine->queueCompletion(pending, status, r);
}

}  // namespace

Op::Op(Description description, Done done)
    : description_(std::move(description)), done_(std::move(done)) {}

Op::~Op() = default;

void Op::placeOnCudaDevice(int index) { cudaDevice_ = index; }

void Op::postSend(Engine& engine, ucp_ep_h ep, const void* data, std::size_t count,
                  wire::Tag tag, std::uint32_t slot, ucs_memory_type_t memory,
                  ucp_datatype_t datatype) {
  Pending* pending = engine.makePending(shared_from_this(), slot);
  ucp_request_param_t params{};
  // FAST_CMPL lets UCX pick the protocol that completes soonest: on shared memory that is
  // fragmented eager copies up to 256 KiB instead of a rendezvous hand-shake, which cut a
  // 64 KiB one-way time by ~3x (docs/performance.md).
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                        UCP_OP_ATTR_FLAG_FAST_CMPL;
  params.cb.send = onSend;
  params.user_data = pending;
  params.datatype = datatype;
  params.memory_type = memory;
  void* request = ucp_tag_send_nbx(ep, data, count, tag, &params);
  track(engine, pending, request);
}

void Op::postRecv(Engine& engine, void* data, std::size_t count, wire::Tag tag, wire::Tag mask,
                  std::uint32_t slot, ucs_memory_type_t memory, ucp_datatype_t datatype) {
  Pending* pending = engine.makePending(shared_from_this(), slot);
  pending->receive = true;
  ++receivesOwed_;
  ucp_request_param_t params{};
  // Always complete through the callback: UCX 1.13 reports no length for a receive that
  // completes at once, and the length check needs it.
  params.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                        UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_MEMORY_TYPE |
                        UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
  params.cb.recv = onRecv;
  params.user_data = pending;
  params.datatype = datatype;
  params.memory_type = memory;
  void* request = ucp_tag_recv_nbx(engine.worker(), data, count, tag, mask, &params);
  track(engine, pending, request);
}

void Op::track(Engine& engine, Pending* pending, void* request) {
  ++outstanding_;
  ++engine.inflightRequests_;
  if (UCS_PTR_IS_PTR(request)) {
    pending->request = request;
    if (inflight_.size() <= pending->slot) inflight_.resize(pending->slot + 1, nullptr);
    inflight_[pending->slot] = pending;
    return;
  }
  // A send completed (or anything failed) at once: queue it like any other completion, so
  // every path goes through handle() in order.
  engine.queueCompletion(pending, UCS_PTR_STATUS(request), RecvInfo{});
}

void Op::handle(Engine& engine, Pending& pending, ucs_status_t status, const RecvInfo& info) {
  --outstanding_;
  if (pending.slot < inflight_.size() && inflight_[pending.slot] == &pending) {
    inflight_[pending.slot] = nullptr;
  }
  if (pending.receive && --receivesOwed_ == 0 && drainingError_) {
    report(std::exchange(drainingError_, nullptr));
    return;
  }
  if (finished_ || witnessed_) return;
  if (status != UCS_OK) {
    std::exception_ptr error = commError(describeFailure(pending.slot, status, info));
    peerGone_ = peerGone_ || brokenConnection(status);
    if (witness_ && brokenConnection(status)) {
      error = witness_->connectionFailed(shared_from_this(), witnessPeer_, std::move(error));
      if (!error) {
        // Doomed already: its other requests go now, so that no message lands in its buffers
        // (nor a peer's memory is read for them) while the death is confirmed; a peer may
        // free what it sent once its own part failed.
        witnessed_ = true;
        cancelInflight(engine);
        return;
      }
    }
    fail(engine, std::move(error));
    return;
  }
  try {
    onComplete(engine, pending.slot, info);
  } catch (...) {
    fail(engine, std::current_exception());
  }
}

std::string Op::describeFailure(std::uint32_t slot, ucs_status_t status,
                                const RecvInfo& info) const {
  return "commux: " + description() + " failed: " + ucs_status_string(status);
}

void Op::cancelInflight(Engine& engine) {
  for (Pending* pending : inflight_) {
    if (pending != nullptr && pending->request != nullptr) {
      ucp_request_cancel(engine.worker(), pending->request);
    }
  }
}

void Op::fail(Engine& engine, std::exception_ptr error) {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return;
  // Unmatched receives complete (cancelled) within this progress round; a matched one
  // when its transfer ends. Sends cannot be recalled by UCX at all (ucp_request_cancel
  // leaves them be): waiting for them could take forever, and the header says so. Nor is a
  // receive waited for when a death failed the operation (peerGone_): see fail()'s doc.
  cancelInflight(engine);
  engine.opFinished(this);
  onFailed();
  if (receivesOwed_ != 0 && !peerGone_) {
    drainingError_ = error ? std::move(error) : commError("commux: " + description() + " failed");
    return;
  }
  report(std::move(error));
}

void Op::report(std::exception_ptr error) {
  Done done = std::move(done_);
  done_ = nullptr;
  if (done) done(error, -1);
}

void Op::retire(Engine& engine) {
  if (finished()) return;
  cancelInflight(engine);
  succeed();
}

void Op::succeed(int sourceRank) {
  if (finished_.exchange(true, std::memory_order_acq_rel)) return;
  engine_->opFinished(this);
  Done done = std::move(done_);
  done_ = nullptr;
  if (done) done(nullptr, sourceRank);
}

}  // namespace commux::engine
