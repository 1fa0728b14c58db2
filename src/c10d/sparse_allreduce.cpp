// ProcessGroupUCX: all_reduce (SUM) of a sparse COO tensor. Every rank's coalesced indices
// and values are gathered (blocks of different sizes, one ring) and each rank sums them
// locally. The ring needs every block's size up front, so the ranks first exchange their
// non-zero counts; that small allgather completes before the call returns.
#include <c10/util/Exception.h>

#include "c10d/staging.hpp"
#include "c10d/validation.hpp"
#include "collectives/schedule.hpp"
#include "commux/process_group_ucx.hpp"

namespace commux {
namespace {

// Every block starts on this boundary so indices (int64) and values view in place.
constexpr int64_t kBlockAlign = 16;

int64_t padded(int64_t bytes) { return (bytes + kBlockAlign - 1) / kBlockAlign * kBlockAlign; }

}  // namespace

c10::intrusive_ptr<c10d::Work> ProcessGroupUCX::allreduce_sparse(
    std::vector<at::Tensor>& tensors, const c10d::AllreduceOptions& opts) {
  const CollectiveEntry entry(*this);
  const char* op = "allreduce (sparse)";
  TORCH_CHECK_VALUE(tensors.size() == 1, "commux: ", op, " takes one tensor, got ", tensors.size());
  const at::Tensor& target = tensors[0];
  TORCH_CHECK_VALUE(target.layout() == at::kSparse, "commux: ", op, ": tensor is ",
                    target.layout(), ", not sparse COO");
  TORCH_CHECK_NOT_IMPLEMENTED(target.device().is_cpu(), "commux: ", op, ": tensor is on ",
                              target.device(), "; this build moves CPU tensors only");
  TORCH_CHECK_NOT_IMPLEMENTED(opts.reduceOp == c10d::ReduceOp::SUM, "commux: ", op,
                              " supports ReduceOp.SUM only");
  // Its traffic depends on the other ranks' non-zeros, which an estimate made alone on
  // this rank cannot know.
  TORCH_CHECK_NOT_IMPLEMENTED(!estimating(), "commux: ", op,
                              ": no time estimate (its size depends on every rank's non-zeros)");
  const at::Tensor mine = target.coalesce();
  const at::Tensor indices = mine._indices().contiguous();  // [sparse dims, nnz] int64
  const at::Tensor values = mine._values().contiguous();    // [nnz, dense dims...]
  const int64_t sparseDims = indices.size(0);
  // From the shape, not numel/nnz: a rank with no non-zeros still knows the row size.
  int64_t rowBytes = static_cast<int64_t>(values.element_size());
  for (int64_t d = 1; d < values.dim(); ++d) rowBytes *= values.size(d);

  // Phase 1: the non-zero count of every rank.
  at::Tensor counts = at::zeros({size_}, at::kLong);
  counts.data_ptr<int64_t>()[rank_] = mine._nnz();
  const std::uint32_t countSeq = nextSequence();
  auto countPlan = collectives::planAllgather(rank_, size_, equalBlocks(1, size_),
                                              counts.element_size(),
                                              thresholds(at::Tensor(), forcedSchedule(collectives::Collective::Allgather)));
  launchCollective(c10d::OpType::ALLGATHER, countSeq,
                   describe(op, {target}, "non-zero counts", countPlan.algorithm, countSeq), {},
                   std::move(countPlan.schedule), counts, std::nullopt, nullptr, opts.timeout)
      ->wait();

  // Phase 2: block r = [indices of r | values of r], in bytes.
  std::vector<collectives::Range> blocks;
  std::vector<int64_t> nnz;
  int64_t total = 0;
  for (int r = 0; r < size_; ++r) {
    nnz.push_back(counts.data_ptr<int64_t>()[r]);
    const int64_t bytes = padded(nnz.back() * (sparseDims * 8 + rowBytes));
    blocks.push_back({static_cast<std::size_t>(total), static_cast<std::size_t>(bytes)});
    total += bytes;
  }
  at::Tensor work = at::empty({total}, at::kByte);
  auto indicesOf = [work, blocks, nnz, sparseDims](int r) {
    return work.narrow(0, static_cast<int64_t>(blocks[r].offset), sparseDims * nnz[r] * 8)
        .view(at::kLong)
        .view({sparseDims, nnz[r]});
  };
  auto valuesOf = [work, blocks, nnz, sparseDims, rowBytes, values](int r) {
    std::vector<int64_t> shape = values.sizes().vec();
    shape[0] = nnz[r];
    return work.narrow(0, static_cast<int64_t>(blocks[r].offset) + sparseDims * nnz[r] * 8,
                       nnz[r] * rowBytes)
        .view(values.scalar_type())
        .view(shape);
  };
  indicesOf(rank_).copy_(indices);
  valuesOf(rank_).copy_(values);
  const std::uint32_t seq = nextSequence();
  const int p = size_;
  auto plan = collectives::planAllgather(rank_, size_, blocks, work.element_size(),
                                         thresholds(work, forcedSchedule(collectives::Collective::Allgather)));
  return launchCollective(
      c10d::OpType::ALLREDUCE, seq, describe(op, {target}, "SUM, an allgather", plan.algorithm, seq),
      tensors, std::move(plan.schedule), work, std::nullopt,
      [target, indicesOf, valuesOf, p] {
        std::vector<at::Tensor> allIndices;
        std::vector<at::Tensor> allValues;
        for (int r = 0; r < p; ++r) {
          allIndices.push_back(indicesOf(r));
          allValues.push_back(valuesOf(r));
        }
        // Summing in rank order on every rank gives every rank the same bits.
        at::Tensor sum = at::sparse_coo_tensor(at::cat(allIndices, 1), at::cat(allValues, 0),
                                               target.sizes(), target.options())
                             .coalesce();
        target.copy_(sum);
      },
      opts.timeout);
}

}  // namespace commux
