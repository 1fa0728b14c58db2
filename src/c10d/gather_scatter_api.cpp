// ProcessGroupUCX: gather and scatter, over binomial trees. The work buffer holds p blocks
// in the order of ranks relative to the root (see collectives/gather_scatter_binomial.cpp).
#include <c10/util/Exception.h>

#include "c10d/staging.hpp"
#include "c10d/tensor_job.hpp"
#include "c10d/validation.hpp"
#include "collectives/route.hpp"
#include "collectives/schedule.hpp"
#include "commux/process_group_ucx.hpp"
#include "shm/channel_op.hpp"

namespace commux {

#ifdef COMMUX_TORCH_HAS_GATHER_SINGLE
c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::gather_single(at::Tensor& outputBuffer,
                                                              at::Tensor& inputBuffer,
                                                              const c10d::GatherOptions& opts) {
  const int root = static_cast<int>(opts.rootRank);
  checkPeer("gather_single", "root", root, size_);
  TORCH_CHECK_VALUE(inputBuffer.defined(), "commux: gather_single: the input is undefined");
  std::vector<at::Tensor> inputs{inputBuffer};
  std::vector<std::vector<at::Tensor>> outputs;
  if (rank_ == root) {
    const int64_t n = inputBuffer.numel();
    TORCH_CHECK_VALUE(outputBuffer.defined() && outputBuffer.is_contiguous(),
                      "commux: gather_single: the root's output must be a contiguous tensor");
    TORCH_CHECK_VALUE(outputBuffer.scalar_type() == inputBuffer.scalar_type() &&
                          outputBuffer.numel() == n * size_,
                      "commux: gather_single: the root's output holds ", outputBuffer.numel(),
                      " elements of ", outputBuffer.scalar_type(), "; it must hold the world size (",
                      size_, ") x the input's ", n, " elements of ", inputBuffer.scalar_type());
    // The root's blocks, in rank order, as gather's list of outputs: views, no copies.
    const at::Tensor flat = outputBuffer.view({-1});
    outputs.emplace_back();
    for (int r = 0; r < size_; ++r) {
      outputs[0].push_back(flat.narrow(0, n * r, n).view(inputBuffer.sizes()));
    }
  }
  return gather(outputs, inputs, opts);
}
#endif

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::gather(
    std::vector<std::vector<at::Tensor>>& outputTensors, std::vector<at::Tensor>& inputTensors,
    const c10d::GatherOptions& opts) {
  const CollectiveEntry entry(*this);
  const int root = static_cast<int>(opts.rootRank);
  checkPeer("gather", "root", root, size_);
  TORCH_CHECK_VALUE(inputTensors.size() == 1, "commux: gather takes one input tensor");
  const at::Tensor& input = inputTensors[0];
  checkTensors("gather", {input}, false);
  std::vector<at::Tensor> outputs;
  if (rank_ == root) {
    TORCH_CHECK_VALUE(outputTensors.size() == 1 && outputTensors[0].size() == static_cast<std::size_t>(size_),
                      "commux: gather: the root needs a list of world size (", size_, ") output tensors");
    outputs = outputTensors[0];
    checkTensors("gather", outputs, true);
    checkWritable("gather", outputs);
    checkSameDevice("gather", input, outputs[0]);
    TORCH_CHECK_VALUE(outputs[0].numel() == input.numel() && outputs[0].scalar_type() == input.scalar_type(),
                      "commux: gather: output tensors must match the input's size and dtype");
  } else {
    TORCH_CHECK_VALUE(outputTensors.empty() || outputTensors[0].empty(),
                      "commux: gather: only the root (rank ", root, ") passes output tensors");
  }
  const auto n = static_cast<int64_t>(input.numel());
  const std::string detail = "to rank " + std::to_string(root);
  std::shared_ptr<shm::Channel> channel;
  const auto route =
      routeFor(collectives::Collective::Gather, "gather", input.is_cpu(), input.nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::GATHER, collectives::Collective::Gather, route, input,
                     static_cast<std::size_t>(n) * size_, root, rank_ == root ? outputs : std::vector<at::Tensor>{});
  }
  if (channel) {
    TensorJob job;
    job.kind = shm::Kind::Gather;
    job.root = root;
    job.input = dense(input);
    std::function<void()> unpack;
    if (rank_ == root) {
      // Blocks in rank order.
      job.output = at::empty({n * size_}, input.options());
      unpack = [work = job.output, outputs, n] {
        for (std::size_t r = 0; r < outputs.size(); ++r) {
          outputs[r].copy_(work.narrow(0, n * static_cast<int64_t>(r), n).view(outputs[r].sizes()));
        }
      };
    }
    return launchShm(c10d::OpType::GATHER,
                     describe("gather", {input}, detail, "shared memory", nextSequence()), outputs,
                     channel, std::move(job), std::move(unpack), opts.timeout);
  }
  const int vr = (rank_ - root + size_) % size_;
  at::Tensor work = at::empty({n * size_}, input.options());
  work.narrow(0, n * vr, n).copy_(input.reshape({-1}));
  const std::uint32_t seq = nextSequence();
  const int p = size_;
  return launchCollective(
      c10d::OpType::GATHER, seq,
      describe("gather", {input}, detail, "binomial", seq), outputs,
      collectives::gatherBinomial(rank_, size_, root, static_cast<std::size_t>(n)), work,
      std::nullopt,
      [work, outputs, n, root, p] {
        for (int v = 0; v < static_cast<int>(outputs.size()); ++v) {
          const auto& out = outputs[static_cast<std::size_t>((v + root) % p)];
          out.copy_(work.narrow(0, n * v, n).view(out.sizes()));
        }
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::scatter(
    std::vector<at::Tensor>& outputTensors, std::vector<std::vector<at::Tensor>>& inputTensors,
    const c10d::ScatterOptions& opts) {
  const CollectiveEntry entry(*this);
  const int root = static_cast<int>(opts.rootRank);
  checkPeer("scatter", "root", root, size_);
  TORCH_CHECK_VALUE(outputTensors.size() == 1, "commux: scatter takes one output tensor");
  const at::Tensor& output = outputTensors[0];
  checkTensors("scatter", {output}, false);
  checkWritable("scatter", {output});
  const auto n = static_cast<int64_t>(output.numel());
  std::shared_ptr<shm::Channel> channel;
  const auto route =
      routeFor(collectives::Collective::Scatter, "scatter", output.is_cpu(), output.nbytes(), channel);
  if (rank_ == root) {
    TORCH_CHECK_VALUE(inputTensors.size() == 1 && inputTensors[0].size() == static_cast<std::size_t>(size_),
                      "commux: scatter: the root needs a list of world size (", size_, ") input tensors");
    const auto& inputs = inputTensors[0];
    checkTensors("scatter", inputs, true);
    checkSameDevice("scatter", inputs[0], output);
    TORCH_CHECK_VALUE(inputs[0].numel() == n && inputs[0].scalar_type() == output.scalar_type(),
                      "commux: scatter: input tensors must match the output's size and dtype");
  } else {
    TORCH_CHECK_VALUE(inputTensors.empty() || inputTensors[0].empty(),
                      "commux: scatter: only the root (rank ", root, ") passes input tensors");
  }
  if (estimating()) {
    return estimated(c10d::OpType::SCATTER, collectives::Collective::Scatter, route, output,
                     static_cast<std::size_t>(n) * size_, root, {output});
  }
  // Over shared memory only the root stages the blocks.
  at::Tensor work = rank_ == root || !channel ? at::empty({n * size_}, output.options()) : at::Tensor();
  if (rank_ == root) {
    const auto& inputs = inputTensors[0];
    // Blocks in rank order for shared memory, relative to the root for the tree.
    for (int v = 0; v < size_; ++v) {
      const int r = channel ? v : (v + root) % size_;
      work.narrow(0, n * v, n).copy_(inputs[static_cast<std::size_t>(r)].reshape({-1}));
    }
  }
  const std::string detail = "from rank " + std::to_string(root);
  if (channel) {
    const bool direct = output.is_contiguous();
    TensorJob job;
    job.kind = shm::Kind::Scatter;
    job.root = root;
    if (rank_ == root) job.input = work;
    job.output = direct ? output : at::empty({n}, output.options());
    std::function<void()> unpack;
    if (!direct) {
      unpack = [staged = job.output, output] { output.copy_(staged.view(output.sizes())); };
    }
    return launchShm(c10d::OpType::SCATTER,
                     describe("scatter", {output}, detail, "shared memory", nextSequence()),
                     {output}, channel, std::move(job), std::move(unpack), opts.timeout);
  }
  const int64_t offset = n * ((rank_ - root + size_) % size_);
  const std::uint32_t seq = nextSequence();
  return launchCollective(
      c10d::OpType::SCATTER, seq,
      describe("scatter", {output}, detail, "binomial", seq),
      {output}, collectives::scatterBinomial(rank_, size_, root, static_cast<std::size_t>(n)),
      work, std::nullopt,
      [work, output, n, offset] { output.copy_(work.narrow(0, offset, n).view(output.sizes())); },
      opts.timeout);
}

}  // namespace commux
