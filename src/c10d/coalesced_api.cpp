// ProcessGroupUCX: the coalesced collectives. Each call runs ONE collective for all of its
// tensors: the tensors are packed side by side into each rank's block, so k tensors cost
// one schedule's latency, not k.
#include <c10/util/Exception.h>

#include "c10d/reduction.hpp"
#include "c10d/staging.hpp"
#include "c10d/validation.hpp"
#include "collectives/schedule.hpp"
#include "collectives/selection.hpp"
#include "commux/process_group_ucx.hpp"

namespace commux {
namespace {

/// Where each tensor of a coalesced call sits inside one rank's block.
struct Packing {
  std::vector<int64_t> offsets;
  std::vector<int64_t> counts;
  int64_t total = 0;
};

/// Element packing: all tensors share one dtype (reductions need it).
Packing packElements(const std::vector<at::Tensor>& tensors) {
  Packing p;
  for (const auto& t : tensors) {
    p.offsets.push_back(p.total);
    p.counts.push_back(t.numel());
    p.total += t.numel();
  }
  return p;
}

// Byte packing lets an allgather mix dtypes. Every piece starts on this boundary so it can
// be viewed as its own dtype again.
constexpr int64_t kPieceAlign = 16;

Packing packBytes(const std::vector<at::Tensor>& tensors) {
  Packing p;
  for (const auto& t : tensors) {
    p.offsets.push_back(p.total);
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    p.counts.push_back(bytes);
    p.total += (bytes + kPieceAlign - 1) / kPieceAlign * kPieceAlign;
  }
  return p;
}

void checkOneDtype(const char* op, const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    TORCH_CHECK_VALUE(t.scalar_type() == tensors[0].scalar_type(), "commux: ", op,
                      ": all tensors must have one dtype, got ", tensors[0].scalar_type(),
                      " and ", t.scalar_type());
  }
}

/// Piece `i` of rank `r`'s block in a byte-packed allgather buffer, as its own dtype.
at::Tensor bytePiece(const at::Tensor& work, const Packing& p, int r, std::size_t i,
                     const at::Tensor& like) {
  return work.narrow(0, r * p.total + p.offsets[i], p.counts[i]).view(like.scalar_type());
}

/// The all-ranks buffer of a byte-packed allgather with this rank's block filled in.
at::Tensor stageGather(const std::vector<at::Tensor>& inputs, const Packing& p, int rank,
                       int size) {
  at::Tensor work = at::empty({p.total * size}, inputs[0].options().dtype(at::kByte));
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    bytePiece(work, p, rank, i, inputs[i]).copy_(inputs[i].reshape({-1}));
  }
  return work;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) {
  const CollectiveEntry entry(*this);
  checkTensors("allreduce_coalesced", tensors, false);
  checkWritable("allreduce_coalesced", tensors);
  checkOneDtype("allreduce_coalesced", tensors);
  const auto reduction =
      Reduction::of("allreduce_coalesced", opts.reduceOp, tensors[0].scalar_type());
  if (estimating()) {
    std::size_t count = 0;
    for (const auto& t : tensors) count += elementCount(t);
    return estimated(c10d::OpType::ALLREDUCE_COALESCED, collectives::Collective::Allreduce,
                     scheduleRouteOf(collectives::Collective::Allreduce),
                     tensors[0], count, 0, tensors);
  }
  at::Tensor work = at::cat(c10::fmap(tensors, [](const at::Tensor& t) { return t.reshape({-1}); }));
  reduction.prepare(work);
  auto plan = collectives::planAllreduce(rank_, size_, elementCount(work), work.element_size(),
                                         thresholds(work, forcedSchedule(collectives::Collective::Allreduce)));
  const int64_t contributions = size_;
  const std::uint32_t seq = nextSequence();
  return launchCollective(
      c10d::OpType::ALLREDUCE_COALESCED, seq,
      describe("allreduce_coalesced", tensors, reduction.label(), plan.algorithm, seq), tensors,
      std::move(plan.schedule), work, reduction.kind(),
      [work, tensors, reduction, contributions] {
        reduction.finish(work, contributions);
        int64_t offset = 0;
        for (const auto& t : tensors) {
          t.copy_(work.narrow(0, offset, t.numel()).view(t.sizes()));
          offset += t.numel();
        }
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputTensorLists,
    std::vector<at::Tensor>& inputTensors, const c10d::AllgatherOptions& opts) {
  const CollectiveEntry entry(*this);
  const char* op = "all_gather_coalesced";
  checkTensors(op, inputTensors, false);
  TORCH_CHECK_VALUE(outputTensorLists.size() == static_cast<std::size_t>(size_), "commux: ", op,
                    ": needs one output list per rank (", size_, "), got ",
                    outputTensorLists.size());
  std::vector<at::Tensor> outputs;
  for (std::size_t r = 0; r < outputTensorLists.size(); ++r) {
    const auto& list = outputTensorLists[r];
    TORCH_CHECK_VALUE(list.size() == inputTensors.size(), "commux: ", op, ": output list ", r,
                      " has ", list.size(), " tensors; it must match the ",
                      inputTensors.size(), " inputs");
    checkTensors(op, list, false);
    checkWritable(op, list);
    for (std::size_t i = 0; i < list.size(); ++i) {
      checkSameDevice(op, inputTensors[i], list[i]);
      TORCH_CHECK_VALUE(list[i].numel() == inputTensors[i].numel() &&
                            list[i].scalar_type() == inputTensors[i].scalar_type(),
                        "commux: ", op, ": output ", r, "/", i, " (", list[i].sizes(), " ",
                        list[i].scalar_type(), ") does not match input ", i, " (",
                        inputTensors[i].sizes(), " ", inputTensors[i].scalar_type(), ")");
      outputs.push_back(list[i]);
    }
  }
  const Packing packing = packBytes(inputTensors);
  if (estimating()) {
    return estimated(c10d::OpType::ALLGATHER_COALESCED, collectives::Collective::Allgather,
                     scheduleRouteOf(collectives::Collective::Allgather),
                     inputTensors[0], static_cast<std::size_t>(packing.total) * size_, 0, outputs,
                     1);
  }
  at::Tensor work = stageGather(inputTensors, packing, rank_, size_);
  const std::uint32_t seq = nextSequence();
  auto plan = collectives::planAllgather(
      rank_, size_, equalBlocks(static_cast<std::size_t>(packing.total), size_),
      work.element_size(), thresholds(work, forcedSchedule(collectives::Collective::Allgather)));
  return launchCollective(
      c10d::OpType::ALLGATHER_COALESCED, seq,
      describe(op, inputTensors, "", plan.algorithm, seq), outputs, std::move(plan.schedule),
      work, std::nullopt,
      [work, packing, lists = outputTensorLists] {
        for (std::size_t r = 0; r < lists.size(); ++r) {
          for (std::size_t i = 0; i < lists[r].size(); ++i) {
            const auto& out = lists[r][i];
            out.copy_(bytePiece(work, packing, static_cast<int>(r), i, out).view(out.sizes()));
          }
        }
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::AllgatherOptions& opts) {
  const CollectiveEntry entry(*this);
  const char* op = "all_gather_into_tensor_coalesced";
  checkTensors(op, inputs, false);
  checkTensors(op, outputs, false);
  checkWritable(op, outputs);
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "commux: ", op, ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    checkSameKind(op, inputs[i], outputs[i]);
    TORCH_CHECK_VALUE(outputs[i].numel() == inputs[i].numel() * size_, "commux: ", op,
                      ": output ", i, " holds ", outputs[i].numel(),
                      " elements; it must hold world size (", size_, ") x input (",
                      inputs[i].numel(), ")");
  }
  const Packing packing = packBytes(inputs);
  if (estimating()) {
    return estimated(c10d::OpType::COALESCED, collectives::Collective::Allgather,
                     scheduleRouteOf(collectives::Collective::Allgather),
                     inputs[0], static_cast<std::size_t>(packing.total) * size_, 0, outputs, 1);
  }
  at::Tensor work = stageGather(inputs, packing, rank_, size_);
  const std::uint32_t seq = nextSequence();
  const int p = size_;
  auto plan = collectives::planAllgather(
      rank_, size_, equalBlocks(static_cast<std::size_t>(packing.total), size_),
      work.element_size(), thresholds(work, forcedSchedule(collectives::Collective::Allgather)));
  return launchCollective(
      c10d::OpType::COALESCED, seq, describe(op, inputs, "", plan.algorithm, seq), outputs,
      std::move(plan.schedule), work, std::nullopt,
      [work, packing, outputs, p] {
        for (std::size_t i = 0; i < outputs.size(); ++i) {
          at::Tensor out = flat(outputs[i]);
          const int64_t n = out.numel() / p;
          for (int r = 0; r < p; ++r) {
            out.narrow(0, r * n, n).copy_(bytePiece(work, packing, r, i, out));
          }
          scatterBack(out, {outputs[i]});
        }
      },
      opts.timeout);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const c10d::ReduceScatterOptions& opts) {
  const CollectiveEntry entry(*this);
  const char* op = "reduce_scatter_tensor_coalesced";
  checkTensors(op, inputs, false);
  checkTensors(op, outputs, false);
  checkWritable(op, outputs);
  checkOneDtype(op, inputs);
  TORCH_CHECK_VALUE(outputs.size() == inputs.size(), "commux: ", op, ": ", outputs.size(),
                    " outputs for ", inputs.size(), " inputs");
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    checkSameKind(op, inputs[i], outputs[i]);
    TORCH_CHECK_VALUE(inputs[i].numel() == outputs[i].numel() * size_, "commux: ", op,
                      ": input ", i, " holds ", inputs[i].numel(),
                      " elements; it must hold world size (", size_, ") x output (",
                      outputs[i].numel(), ")");
  }
  const auto reduction = Reduction::of(op, opts.reduceOp, inputs[0].scalar_type());
  const Packing packing = packElements(outputs);
  if (estimating()) {
    return estimated(c10d::OpType::COALESCED, collectives::Collective::ReduceScatter,
                     scheduleRouteOf(collectives::Collective::ReduceScatter),
                     inputs[0], static_cast<std::size_t>(packing.total) * size_, 0, outputs);
  }
  // Block r of the work buffer holds, side by side, slice r of every input.
  at::Tensor work = at::empty({packing.total * size_}, inputs[0].options());
  at::Tensor blocks = work.view({size_, packing.total});
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    blocks.narrow(1, packing.offsets[i], packing.counts[i])
        .copy_(inputs[i].reshape({size_, packing.counts[i]}));
  }
  reduction.prepare(work);
  const int64_t contributions = size_;
  const int64_t mine = packing.total * rank_;
  const std::uint32_t seq = nextSequence();
  auto plan = collectives::planReduceScatter(
      rank_, size_, equalBlocks(static_cast<std::size_t>(packing.total), size_),
      work.element_size(), thresholds(work, forcedSchedule(collectives::Collective::ReduceScatter)));
  return launchCollective(
      c10d::OpType::COALESCED, seq, describe(op, outputs, reduction.label(), plan.algorithm, seq),
      outputs, std::move(plan.schedule), work, reduction.kind(),
      [work, packing, outputs, reduction, contributions, mine] {
        at::Tensor block = work.narrow(0, mine, packing.total);
        reduction.finish(block, contributions);
        for (std::size_t i = 0; i < outputs.size(); ++i) {
          outputs[i].copy_(block.narrow(0, packing.offsets[i], packing.counts[i])
                               .view(outputs[i].sizes()));
        }
      },
      opts.timeout);
}

}  // namespace commux
