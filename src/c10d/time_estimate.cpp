// ProcessGroupUCX: torch's time estimation. While it is on, each operation stops after its
// checks and adds what the models say it takes (collectives/estimate.hpp); nothing is
// staged, sent or numbered, so a rank may estimate alone.
#include <ATen/core/ivalue.h>
#include <c10/util/Exception.h>

#include "c10d/staging.hpp"
#include "collectives/estimate.hpp"
#include "collectives/route.hpp"
#include "commux/process_group_ucx.hpp"
#include "group/group.hpp"
#include "group/shm_setup.hpp"

namespace commux {
namespace {

/// The Work of an estimated operation: complete from the start, its tensors untouched.
class EstimatedWork : public c10d::Work {
 public:
  EstimatedWork(int rank, c10d::OpType type, std::vector<at::Tensor> outputs)
      : c10d::Work(rank, type), outputs_(std::move(outputs)) {
    future_ = c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future_->markCompleted(c10::IValue(outputs_));
    finish();
  }
  std::vector<at::Tensor> result() override { return outputs_; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

 private:
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

}  // namespace

#ifdef COMMUX_TORCH_HAS_TIME_ESTIMATION
void ProcessGroupUCX::startTimeEstimate() {
  checkUsable();
  std::lock_guard<std::mutex> lock(estimateMutex_);
  TORCH_CHECK(!estimating_.load(), "commux: startTimeEstimate: this group is already estimating "
              "(call endTimeEstimate first)");
  estimatedSeconds_ = 0;
  estimating_.store(true, std::memory_order_release);
}

float ProcessGroupUCX::endTimeEstimate() {
  std::lock_guard<std::mutex> lock(estimateMutex_);
  TORCH_CHECK(estimating_.load(), "commux: endTimeEstimate: no estimate was started "
              "(call startTimeEstimate first)");
  estimating_.store(false, std::memory_order_release);
  return static_cast<float>(estimatedSeconds_ * 1e6);
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::estimated(c10d::OpType type,
                                                          collectives::Collective collective,
                                                          const collectives::Route& route,
                                                          const at::Tensor& like, std::size_t count,
                                                          int root, std::vector<at::Tensor> outputs,
                                                          std::size_t elementSize) {
  collectives::EstimateRequest request;
  request.collective = collective;
  request.path = route.path;
  request.schedule = route.schedule;
  request.size = size_;
  request.root = root;
  request.count = count;
  request.elementSize = elementSize     ? elementSize
                         : like.defined() ? static_cast<std::size_t>(like.element_size())
                                          : 1;
  request.cpu = !like.defined() || like.is_cpu();
  const HostLayout* layout = group_->layout();
  request.hosts = layout ? static_cast<int>(layout->hosts.size()) : 1;
  return addEstimate(collectives::estimateSeconds(request, thresholds(like, route.schedule)),
                     type, std::move(outputs));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::estimatedMessage(c10d::OpType type,
                                                                 std::size_t bytes,
                                                                 std::vector<at::Tensor> tensors) {
  return addEstimate(collectives::estimateMessageSeconds(bytes), type, std::move(tensors));
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::addEstimate(double seconds, c10d::OpType type,
                                                            std::vector<at::Tensor> outputs) {
  {
    std::lock_guard<std::mutex> lock(estimateMutex_);
    estimatedSeconds_ += seconds;
  }
  return c10::make_intrusive<EstimatedWork>(rank_, type, std::move(outputs));
}

}  // namespace commux
