// ProcessGroupUCX: collectives of a group that spans hosts (allreduce, reduce, broadcast,
// allgather, reduce_scatter, barrier on CPU tensors), in parts: the core plans and runs them
// (group/hierarchical.hpp); the adapter keeps the tensors alive and copies back.
#include "c10d/staging.hpp"
#include "c10d/tensor_job.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/process_group_ucx.hpp"
#include "group/hierarchical.hpp"

namespace commux {

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::launchHierarchical(
    c10d::OpType type, TensorJob&& job, engine::Description description,
    std::vector<at::Tensor> outputs, std::function<void()> finalize,
    std::chrono::milliseconds timeout, std::uint32_t sequence) {
  // What the parts read (a window registration must not move it meanwhile).
  const at::Tensor buffer = job.buffer, input = job.input, output = job.output;
  const OpEntry entry(*this);
  auto w = makeWork(type, std::move(outputs), description, timeout);
  w->addReads({buffer, input, output});
  launch(w,
         group::makeHierarchical(*group_, toCore(std::move(job)), withoutGrad(std::move(finalize)),
                                 w->parts(), sequence, w->completer()),
         /*collective=*/true);
  return w;
}

}  // namespace commux
