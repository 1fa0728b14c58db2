#include "ucx/worker.hpp"

#include <chrono>

#include "ucx/status.hpp"

namespace commux::ucx {

Worker::Worker(const Context& context) {
  ucp_worker_params_t params{};
  params.field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
  // Several threads drive the worker in turn (see engine.hpp), never at once.
  params.thread_mode = UCS_THREAD_MODE_SERIALIZED;
  check(ucp_worker_create(context.get(), &params, &handle_), "ucp_worker_create");

  ucp_address_t* address = nullptr;
  size_t length = 0;
  ucs_status_t status = ucp_worker_get_address(handle_, &address, &length);
  if (status != UCS_OK) {
    ucp_worker_destroy(handle_);
    throwStatus(status, "ucp_worker_get_address");
  }
  address_.assign(reinterpret_cast<const char*>(address), length);
  ucp_worker_release_address(handle_, address);

  if (ucp_worker_get_efd(handle_, &eventFd_) != UCS_OK) eventFd_ = -1;
}

Worker::~Worker() {
  if (handle_ != nullptr) ucp_worker_destroy(handle_);
}

bool Worker::arm() {
  const ucs_status_t status = ucp_worker_arm(handle_);
  if (status == UCS_ERR_BUSY) return false;
  check(status, "ucp_worker_arm");
  return true;
}

void Worker::signal() { ucp_worker_signal(handle_); }

Endpoint::Endpoint(Worker& worker, const std::string& remoteAddress, OnError onError)
    : worker_(worker), onError_(std::move(onError)) {
  ucp_ep_params_t params{};
  params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE;
  params.address = reinterpret_cast<const ucp_address_t*>(remoteAddress.data());
  params.err_mode = onError_ ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
  if (onError_) {
    params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.err_handler.cb = &Endpoint::errorCallback;
    params.err_handler.arg = this;
  }
  check(ucp_ep_create(worker.get(), &params, &handle_), "ucp_ep_create");
}

void Endpoint::errorCallback(void* arg, ucp_ep_h /*ep*/, ucs_status_t status) {
  auto* self = static_cast<Endpoint*>(arg);
  if (self->onError_) self->onError_(status);
}

Endpoint::~Endpoint() {
  if (handle_ == nullptr) return;
  ucp_request_param_t params{};
  params.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
  params.flags = UCP_EP_CLOSE_FLAG_FORCE;
  void* request = ucp_ep_close_nbx(handle_, &params);
  if (request == nullptr || UCS_PTR_IS_ERR(request)) return;
  // A forced close needs no answer from the peer; bound the wait anyway.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  while (ucp_request_check_status(request) == UCS_INPROGRESS &&
         std::chrono::steady_clock::now() < deadline) {
    worker_.progress();
  }
  ucp_request_free(request);
}

}  // namespace commux::ucx
