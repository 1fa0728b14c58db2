// ProcessGroupUCX: allgather and reduce-scatter, the collectives whose buffer holds one
// block per rank: through shared memory (one host, or in parts across hosts), else staged
// into one flat buffer of p blocks for a UCX schedule.
#include <c10/util/Exception.h>

#include "c10d/reduction.hpp"
#include "c10d/staging.hpp"
#include "c10d/tensor_job.hpp"
#include "c10d/validation.hpp"
#include "collectives/route.hpp"
#include "collectives/schedule.hpp"
#include "commux/process_group_ucx.hpp"
#include "shm/channel_op.hpp"

namespace commux {

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::_allgather_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::AllgatherOptions& opts) {
  const CollectiveEntry entry(*this);
  checkTensors("all_gather_into_tensor", {outputBuffer, inputBuffer}, false);
  checkWritable("all_gather_into_tensor", {outputBuffer});
  checkSameKind("all_gather_into_tensor", inputBuffer, outputBuffer);
  const std::size_t n = elementCount(inputBuffer);
  TORCH_CHECK_VALUE(elementCount(outputBuffer) == n * static_cast<std::size_t>(size_),
                    "commux: all_gather_into_tensor: the output holds ",
                    outputBuffer.numel(), " elements; it must hold world size (", size_,
                    ") x input (", inputBuffer.numel(), ")");
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Allgather, "all_gather_into_tensor",
                              inputBuffer.is_cpu(), outputBuffer.nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::_ALLGATHER_BASE, collectives::Collective::Allgather, route,
                     inputBuffer, n * static_cast<std::size_t>(size_), 0, {outputBuffer});
  }
  if (route.path != collectives::Path::Schedule) {
    TensorJob job;
    job.kind = shm::Kind::Allgather;
    job.input = dense(inputBuffer);
    job.output = dense(outputBuffer);
    at::Tensor output = job.output;
    return launchShared(c10d::OpType::_ALLGATHER_BASE, channel, std::move(job),
                        "all_gather_into_tensor", {inputBuffer}, "", {outputBuffer},
                        [output, outputBuffer] { scatterBack(output, {outputBuffer}); },
                        opts.timeout);
  }
  at::Tensor work = flat(outputBuffer);
  // Planned before the output is written: a forced schedule may be refused.
  auto plan = collectives::planAllgather(rank_, size_, equalBlocks(n, size_), work.element_size(),
                                         thresholds(work, route.schedule));
  work.narrow(0, static_cast<int64_t>(n) * rank_, static_cast<int64_t>(n))
      .copy_(inputBuffer.reshape({-1}));
  const std::uint32_t seq = nextSequence();
  return launchCollective(
      c10d::OpType::_ALLGATHER_BASE, seq,
      describe("all_gather_into_tensor", {inputBuffer}, "", plan.algorithm, seq), {outputBuffer},
      std::move(plan.schedule), work, std::nullopt,
      [work, outputBuffer] { scatterBack(work, {outputBuffer}); }, opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::allgather(
    std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
    const c10d::AllgatherOptions& opts) {
  const CollectiveEntry entry(*this);
  TORCH_CHECK_VALUE(inputTensors.size() == 1 && outputTensors.size() == 1,
                    "commux: all_gather takes one input tensor and one output list per rank");
  auto& outputs = outputTensors[0];
  const at::Tensor& input = inputTensors[0];
  checkTensors("all_gather", {input}, false);
  TORCH_CHECK_VALUE(outputs.size() == static_cast<std::size_t>(size_), "commux: all_gather: ",
                    "the output list has ", outputs.size(), " tensors; it needs world size (",
                    size_, ")");
  checkTensors("all_gather", outputs, true);
  checkWritable("all_gather", outputs);
  TORCH_CHECK_VALUE(outputs[0].numel() == input.numel(), "commux: all_gather: output tensors hold ",
                    outputs[0].numel(), " elements, the input ", input.numel());
  checkSameKind("all_gather", input, outputs[0]);
  const std::size_t n = elementCount(input);
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Allgather, "all_gather", input.is_cpu(),
                              input.nbytes() * size_, channel);
  if (estimating()) {
    return estimated(c10d::OpType::ALLGATHER, collectives::Collective::Allgather, route, input,
                     n * static_cast<std::size_t>(size_), 0, outputs);
  }
  at::Tensor work = at::empty({static_cast<int64_t>(n) * size_}, input.options());
  auto unpack = [work, outputs, n] {
    for (std::size_t r = 0; r < outputs.size(); ++r) {
      outputs[r].copy_(work.narrow(0, static_cast<int64_t>(r * n), static_cast<int64_t>(n))
                           .view(outputs[r].sizes()));
    }
  };
  if (route.path != collectives::Path::Schedule) {
    TensorJob job;
    job.kind = shm::Kind::Allgather;
    job.input = dense(input);
    job.output = work;
    return launchShared(c10d::OpType::ALLGATHER, channel, std::move(job), "all_gather", {input},
                        "", outputs, std::move(unpack), opts.timeout);
  }
  work.narrow(0, static_cast<int64_t>(n) * rank_, static_cast<int64_t>(n)).copy_(input.reshape({-1}));
  const std::uint32_t seq = nextSequence();
  auto plan = collectives::planAllgather(rank_, size_, equalBlocks(n, size_), work.element_size(),
                                         thresholds(work, route.schedule));
  return launchCollective(
      c10d::OpType::ALLGATHER, seq, describe("all_gather", {input}, "", plan.algorithm, seq),
      outputs, std::move(plan.schedule), work, std::nullopt,
      std::move(unpack), opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::_reduce_scatter_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, const c10d::ReduceScatterOptions& opts) {
  const CollectiveEntry entry(*this);
  checkTensors("reduce_scatter_tensor", {outputBuffer, inputBuffer}, false);
  checkWritable("reduce_scatter_tensor", {outputBuffer});
  checkSameKind("reduce_scatter_tensor", inputBuffer, outputBuffer);
  const auto reduction =
      Reduction::of("reduce_scatter_tensor", opts.reduceOp, inputBuffer.scalar_type());
  const std::size_t n = elementCount(outputBuffer);
  TORCH_CHECK_VALUE(elementCount(inputBuffer) == n * static_cast<std::size_t>(size_),
                    "commux: reduce_scatter_tensor: the input holds ", inputBuffer.numel(),
                    " elements; it must hold world size (", size_, ") x output (",
                    outputBuffer.numel(), ")");
  const int64_t contributions = size_;
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::ReduceScatter, "reduce_scatter_tensor",
                              inputBuffer.is_cpu(), inputBuffer.nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::_REDUCE_SCATTER_BASE, collectives::Collective::ReduceScatter,
                     route, inputBuffer, n * static_cast<std::size_t>(size_), 0, {outputBuffer});
  }
  if (route.path != collectives::Path::Schedule) {
    // Only read: the input needs a private copy only when its contribution is scaled first.
    at::Tensor input = dense(inputBuffer);
    if (reduction.changesContribution()) {
      input = input.clone();
      reduction.prepare(input);
    }
    const bool direct = outputBuffer.is_contiguous();
    at::Tensor output = direct ? outputBuffer : at::empty({static_cast<int64_t>(n)}, outputBuffer.options());
    TensorJob job;
    job.kind = shm::Kind::ReduceScatter;
    job.reduce = reduction.kind();
    job.input = input;
    job.output = output;
    return launchShared(c10d::OpType::_REDUCE_SCATTER_BASE, channel, std::move(job),
                        "reduce_scatter_tensor", {outputBuffer}, reduction.label(), {outputBuffer},
                        [output, outputBuffer, reduction, contributions, direct] {
                          reduction.finish(output, contributions);
                          if (!direct) outputBuffer.copy_(output.view(outputBuffer.sizes()));
                        },
                        opts.timeout);
  }
  // The input must stay as it is: reduce in a private copy.
  at::Tensor work = inputBuffer.reshape({-1}).clone();
  reduction.prepare(work);
  const int64_t offset = static_cast<int64_t>(n) * rank_;
  const std::uint32_t seq = nextSequence();
  auto plan = collectives::planReduceScatter(rank_, size_, equalBlocks(n, size_),
                                             work.element_size(), thresholds(work, route.schedule));
  return launchCollective(
      c10d::OpType::_REDUCE_SCATTER_BASE, seq,
      describe("reduce_scatter_tensor", {outputBuffer}, reduction.label(), plan.algorithm, seq),
      {outputBuffer}, std::move(plan.schedule), work,
      reduction.kind(),
      [work, outputBuffer, n, offset, reduction, contributions] {
        at::Tensor mine = work.narrow(0, offset, static_cast<int64_t>(n));
        reduction.finish(mine, contributions);
        outputBuffer.copy_(mine.view(outputBuffer.sizes()));
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::reduce_scatter(
    std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ReduceScatterOptions& opts) {
  const CollectiveEntry entry(*this);
  TORCH_CHECK_VALUE(outputTensors.size() == 1 && inputTensors.size() == 1,
                    "commux: reduce_scatter takes one output tensor and one input list per rank");
  auto& inputs = inputTensors[0];
  TORCH_CHECK_VALUE(inputs.size() == static_cast<std::size_t>(size_), "commux: reduce_scatter: ",
                    "the input list has ", inputs.size(), " tensors; it needs world size (",
                    size_, ")");
  checkTensors("reduce_scatter", inputs, true);
  checkSameDevice("reduce_scatter", inputs[0], outputTensors[0]);
  at::Tensor flatInput = at::cat(c10::fmap(inputs, [](const at::Tensor& t) { return t.reshape({-1}); }));
  return _reduce_scatter_base(outputTensors[0], flatInput, opts);
}

}  // namespace commux
