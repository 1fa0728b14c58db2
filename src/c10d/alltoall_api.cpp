// ProcessGroupUCX: all-to-all (single tensor with splits, and lists): pairwise exchange, or
// Bruck's algorithm for small equal blocks in large groups (collectives::planAlltoall).
// Either sends from the input and receives into the output, or stages both through one
// work buffer [input | output]; Bruck's pack areas come after them. The block for this
// rank itself is copied locally before anything is posted.
#include <c10/util/Exception.h>

#include <algorithm>
#include <numeric>

#include "c10d/staging.hpp"
#include "c10d/tensor_job.hpp"
#include "c10d/validation.hpp"
#include "collectives/route.hpp"
#include "collectives/schedule.hpp"
#include "collectives/selection.hpp"
#include "commux/process_group_ucx.hpp"
#include "shm/channel_op.hpp"

namespace commux {
namespace {

std::vector<collectives::Range> layout(const std::vector<std::size_t>& counts, std::size_t base) {
  std::vector<collectives::Range> blocks;
  for (std::size_t c : counts) {
    blocks.push_back({base, c});
    base += c;
  }
  return blocks;
}

/// Element counts per peer from dim-0 split sizes (empty = equal split).
std::vector<std::size_t> countsFromSplits(const char* what, const at::Tensor& t,
                                          const std::vector<int64_t>& splits, int size) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  const int64_t rowElements = rows == 0 ? 0 : t.numel() / rows;
  std::vector<std::size_t> counts;
  if (splits.empty()) {
    TORCH_CHECK_VALUE(rows % size == 0, "commux: all_to_all_single: the ", what, " has ", rows,
                      " rows, not divisible by the world size ", size, "; pass split sizes");
    counts.assign(static_cast<std::size_t>(size), static_cast<std::size_t>(rows / size * rowElements));
    return counts;
  }
  TORCH_CHECK_VALUE(splits.size() == static_cast<std::size_t>(size), "commux: all_to_all_single: ",
                    what, " split sizes have ", splits.size(), " entries; world size is ", size);
  int64_t total = 0;
  for (int64_t s : splits) {
    TORCH_CHECK_VALUE(s >= 0, "commux: all_to_all_single: negative ", what, " split size ", s);
    // A split larger than the tensor cannot add up to its rows; refused before the sum
    // or the element count can overflow.
    TORCH_CHECK_VALUE(s <= rows, "commux: all_to_all_single: ", what, " split size ", s,
                      " is larger than the ", what, "'s ", rows, " rows");
    total += s;
    TORCH_CHECK_VALUE(total <= rows, "commux: all_to_all_single: ", what,
                      " split sizes add up to more than the ", what, "'s ", rows, " rows");
    counts.push_back(static_cast<std::size_t>(s * rowElements));
  }
  TORCH_CHECK_VALUE(total == rows, "commux: all_to_all_single: ", what, " split sizes add up to ",
                    total, " rows but the ", what, " has ", rows);
  return counts;
}

/// The block a rank keeps for itself is copied locally before anything else, on every
/// path, so both sides must agree on it before any path is chosen: a larger block would
/// be written past the room the output gives it. Under COMMUX_CHECK_COLLECTIVES the callers
/// leave it to the call check, which compares it as one of the pairs on every rank (the
/// shared-memory channel's at its first step), so the others learn of it too.
void checkSelfBlock(const char* name, const std::vector<std::size_t>& sendCounts,
                    const std::vector<std::size_t>& recvCounts, int rank) {
  TORCH_CHECK_VALUE(sendCounts[rank] == recvCounts[rank], "commux: ", name, ": this rank (",
                    rank, ") sends ", sendCounts[rank], " elements to itself but its output has room for ",
                    recvCounts[rank], " from itself; the input's and the output's split for rank ",
                    rank, " must hold the same number of elements. Nothing was sent");
}

bool overlap(const at::Tensor& a, const at::Tensor& b) {
  if (a.numel() == 0 || b.numel() == 0) return false;
  const auto* a0 = static_cast<const char*>(a.data_ptr());
  const auto* b0 = static_cast<const char*>(b.data_ptr());
  return a0 < b0 + b.nbytes() && b0 < a0 + a.nbytes();
}

/// The route an estimate of an all-to-all costs: blocks not known to be uniform run
/// pairwise (planAlltoall), which the estimate's equal blocks would not tell it.
collectives::Route estimateRoute(collectives::Route route, bool uniform) {
  if (route.path == collectives::Path::Schedule && !route.schedule && !uniform) {
    route.schedule = "pairwise";
  }
  return route;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::alltoallFlat(
    c10d::OpType type, const char* name, at::Tensor input, std::vector<std::size_t> sendCounts,
    std::vector<std::size_t> recvCounts, std::vector<at::Tensor> outputs,
    std::function<void(const at::Tensor&)> unpack, bool uniform, std::chrono::milliseconds timeout,
    const char* schedule) {
  const OpEntry entry(*this);
  // Before the own block is copied: the check compares it too.
  const bool checked = checksCalls();
  if (checked) {
    checkSameCollective(type, input, std::nullopt, engine::Description(name), timeout,
                        &sendCounts, &recvCounts);
  }
  const std::size_t in = std::accumulate(sendCounts.begin(), sendCounts.end(), std::size_t{0});
  const std::size_t out = std::accumulate(recvCounts.begin(), recvCounts.end(), std::size_t{0});
  const auto sendBlocks = layout(sendCounts, 0);
  const auto recvBlocks = layout(recvCounts, in);
  auto plan = collectives::planAlltoall(rank_, size_, sendBlocks, recvBlocks,
                                        static_cast<std::size_t>(input.element_size()),
                                        input.is_cpu(), uniform, thresholds(input, schedule));
  const std::size_t elements = std::max(in + out, plan.schedule.workElements);
  at::Tensor work = at::empty({static_cast<int64_t>(elements)}, input.options());
  work.narrow(0, 0, static_cast<int64_t>(in)).copy_(input);
  const auto& self = sendBlocks[rank_];
  work.narrow(0, static_cast<int64_t>(recvBlocks[rank_].offset), static_cast<int64_t>(self.count))
      .copy_(work.narrow(0, static_cast<int64_t>(self.offset), static_cast<int64_t>(self.count)));
  const std::uint32_t seq = nextSequence();
  at::Tensor received = work.narrow(0, static_cast<int64_t>(in), static_cast<int64_t>(out));
  return launchCollective(type, seq, describe(name, {input}, "", plan.algorithm, seq),
                          std::move(outputs), std::move(plan.schedule), work, std::nullopt,
                          [received, unpack] { unpack(received); }, timeout, {}, -1, checked);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::alltoallDirect(
    const at::Tensor& input, const at::Tensor& output, std::vector<std::size_t> sendCounts,
    std::vector<std::size_t> recvCounts, bool uniform, std::chrono::milliseconds timeout,
    const char* schedule) {
  // Contiguous input and output: send straight from the input, receive straight into the
  // output. Staging both through one fresh buffer cost three copies plus the page faults
  // of a new allocation, and made all_to_all_single ~3x slower than gloo at 16 MiB.
  // Checked before the own block is copied into the output: the check compares it too.
  const bool checked = checksCalls();
  if (checked) {
    checkSameCollective(c10d::OpType::ALLTOALL_BASE, input, std::nullopt,
                        engine::Description("all_to_all_single"), timeout, &sendCounts,
                        &recvCounts);
  }
  at::Tensor in = input.view({-1});
  at::Tensor out = output.view({-1});
  const auto sendBlocks = layout(sendCounts, 0);
  const auto recvBlocks = layout(recvCounts, 0);
  auto plan = collectives::planAlltoall(rank_, size_, sendBlocks, recvBlocks,
                                        static_cast<std::size_t>(in.element_size()), in.is_cpu(),
                                        uniform, thresholds(in, schedule));
  at::Tensor work = out;
  std::function<void()> finalize;
  if (plan.schedule.workElements > static_cast<std::size_t>(out.numel())) {
    // Bruck's pack areas go past the received blocks, where the user's output has no room:
    // receive into a buffer that has, and copy out (one copy against Bruck's log2 p packs).
    work = at::empty({static_cast<int64_t>(plan.schedule.workElements)}, out.options());
    finalize = [received = work.narrow(0, 0, out.numel()), out] { out.copy_(received); };
  }
  work.narrow(0, static_cast<int64_t>(recvBlocks[rank_].offset), static_cast<int64_t>(recvCounts[rank_]))
      .copy_(in.narrow(0, static_cast<int64_t>(sendBlocks[rank_].offset),
                       static_cast<int64_t>(sendCounts[rank_])));
  const std::uint32_t seq = nextSequence();
  return launchCollective(c10d::OpType::ALLTOALL_BASE, seq,
                          describe("all_to_all_single", {input}, "", plan.algorithm, seq), {output},
                          std::move(plan.schedule), work, std::nullopt, std::move(finalize),
                          timeout, in, -1, checked);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::alltoall_base(
    at::Tensor& outputBuffer, at::Tensor& inputBuffer, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const c10d::AllToAllOptions& opts) {
  const CollectiveEntry entry(*this);
  checkTensors("all_to_all_single", {outputBuffer, inputBuffer}, false);
  checkWritable("all_to_all_single", {outputBuffer});
  TORCH_CHECK_VALUE(outputBuffer.scalar_type() == inputBuffer.scalar_type(),
                    "commux: all_to_all_single: input and output dtypes differ");
  auto sendCounts = countsFromSplits("input", inputBuffer, inputSplitSizes, size_);
  auto recvCounts = countsFromSplits("output", outputBuffer, outputSplitSizes, size_);
  if (!checksCalls()) checkSelfBlock("all_to_all_single", sendCounts, recvCounts, rank_);
  // Without split sizes a valid call has blocks of one size on every rank (rank s's block
  // for d is d's block from s), so all ranks plan alike. Equal splits on one rank say
  // nothing of the others'.
  const bool uniform = inputSplitSizes.empty() && outputSplitSizes.empty();
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Alltoall, "all_to_all_single",
                              inputBuffer.is_cpu(), inputBuffer.nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::ALLTOALL_BASE, collectives::Collective::Alltoall,
                     estimateRoute(route, uniform), inputBuffer,
                     std::accumulate(sendCounts.begin(), sendCounts.end(), std::size_t{0}), 0,
                     {outputBuffer});
  }
  if (channel) {
    const bool direct = outputBuffer.is_contiguous() && !overlap(inputBuffer, outputBuffer);
    TensorJob job;
    job.kind = shm::Kind::Alltoall;
    job.input = dense(inputBuffer);
    job.output = direct ? outputBuffer : at::empty({outputBuffer.numel()}, outputBuffer.options());
    job.sendCounts = std::move(sendCounts);
    job.recvCounts = std::move(recvCounts);
    std::function<void()> unpack;
    if (!direct) {
      unpack = [staged = job.output, outputBuffer] {
        outputBuffer.copy_(staged.view(outputBuffer.sizes()));
      };
    }
    return launchShm(c10d::OpType::ALLTOALL_BASE,
                     describe("all_to_all_single", {inputBuffer}, "", "shared memory", nextSequence()),
                     {outputBuffer}, channel, std::move(job), std::move(unpack), opts.timeout);
  }
  if (inputBuffer.is_contiguous() && outputBuffer.is_contiguous() &&
      !overlap(inputBuffer, outputBuffer)) {
    return alltoallDirect(inputBuffer, outputBuffer, std::move(sendCounts), std::move(recvCounts),
                          uniform, opts.timeout, route.schedule);
  }
  at::Tensor output = outputBuffer;
  return alltoallFlat(
      c10d::OpType::ALLTOALL_BASE, "all_to_all_single", inputBuffer.reshape({-1}),
      std::move(sendCounts), std::move(recvCounts), {outputBuffer},
      [output](const at::Tensor& received) { output.copy_(received.view(output.sizes())); },
      uniform, opts.timeout, route.schedule);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::alltoall(std::vector<at::Tensor>& outputTensors,
                                                         std::vector<at::Tensor>& inputTensors,
                                                         const c10d::AllToAllOptions& opts) {
  const CollectiveEntry entry(*this);
  TORCH_CHECK_VALUE(outputTensors.size() == static_cast<std::size_t>(size_) &&
                        inputTensors.size() == static_cast<std::size_t>(size_),
                    "commux: all_to_all takes world size (", size_, ") input and output tensors");
  checkTensors("all_to_all", inputTensors, false);
  checkTensors("all_to_all", outputTensors, false);
  checkWritable("all_to_all", outputTensors);
  checkSameDevice("all_to_all", inputTensors[0], outputTensors[0]);
  std::vector<std::size_t> sendCounts, recvCounts;
  std::vector<at::Tensor> flatInputs;
  for (int r = 0; r < size_; ++r) {
    TORCH_CHECK_VALUE(inputTensors[r].scalar_type() == inputTensors[0].scalar_type() &&
                          outputTensors[r].scalar_type() == inputTensors[0].scalar_type(),
                      "commux: all_to_all: all tensors must have one dtype");
    sendCounts.push_back(elementCount(inputTensors[r]));
    recvCounts.push_back(elementCount(outputTensors[r]));
    flatInputs.push_back(inputTensors[r].reshape({-1}));
  }
  if (!checksCalls()) checkSelfBlock("all_to_all", sendCounts, recvCounts, rank_);
  std::vector<at::Tensor> outputs = outputTensors;
  auto unpack = [outputs, recvCounts](const at::Tensor& received) {
    int64_t offset = 0;
    for (std::size_t r = 0; r < outputs.size(); ++r) {
      const auto n = static_cast<int64_t>(recvCounts[r]);
      outputs[r].copy_(received.narrow(0, offset, n).view(outputs[r].sizes()));
      offset += n;
    }
  };
  std::shared_ptr<shm::Channel> channel;
  const auto route = routeFor(collectives::Collective::Alltoall, "all_to_all",
                              inputTensors[0].is_cpu(), inputTensors[0].nbytes(), channel);
  if (estimating()) {
    return estimated(c10d::OpType::ALLTOALL, collectives::Collective::Alltoall,
                     estimateRoute(route, false), inputTensors[0],
                     std::accumulate(sendCounts.begin(), sendCounts.end(), std::size_t{0}), 0,
                     outputs);
  }
  if (channel) {
    const std::size_t total = std::accumulate(recvCounts.begin(), recvCounts.end(), std::size_t{0});
    at::Tensor received = at::empty({static_cast<int64_t>(total)}, inputTensors[0].options());
    TensorJob job;
    job.kind = shm::Kind::Alltoall;
    job.input = at::cat(flatInputs);
    job.output = received;
    job.sendCounts = std::move(sendCounts);
    job.recvCounts = recvCounts;
    return launchShm(c10d::OpType::ALLTOALL,
                     describe("all_to_all", inputTensors, "", "shared memory", nextSequence()),
                     outputs, channel, std::move(job),
                     [received, unpack] { unpack(received); }, opts.timeout);
  }
  // Lists of equal tensors on this rank say nothing of the other ranks' lists: pairwise.
  return alltoallFlat(c10d::OpType::ALLTOALL, "all_to_all", at::cat(flatInputs),
                      std::move(sendCounts), recvCounts, outputs, std::move(unpack), false,
                      opts.timeout, route.schedule);
}

}  // namespace commux
