#include "c10d/staging.hpp"

#include "commux/process_group_ucx.hpp"

#include <algorithm>

#include "commux/options.hpp"
#include "group/collectives.hpp"

namespace commux {

OpEntry::OpEntry(const ProcessGroupUCX& group) { group.checkEntry(); }

CollectiveEntry::CollectiveEntry(ProcessGroupUCX& group) : entry_(group) { group.joinSetUp(); }

collectives::Thresholds thresholds(const at::Tensor& buffer, const char* forced) {
  return group::thresholds(buffer.defined() && buffer.is_cuda(), forced);
}

at::Tensor flat(const at::Tensor& t) {
  return t.is_contiguous() ? t.view({-1}) : t.contiguous().view({-1});
}

namespace {
/// Whether `t` is `work` itself, so nothing needs copying back into it.
bool isWork(const at::Tensor& t, const at::Tensor& work) {
  return t.is_contiguous() && t.data_ptr() == work.data_ptr();
}
}  // namespace

bool scatterBackNeeded(const at::Tensor& work, const std::vector<at::Tensor>& tensors) {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const at::Tensor& t) { return !isWork(t, work); });
}

void scatterBack(const at::Tensor& work, const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (!isWork(t, work)) t.copy_(work.view(t.sizes()));
  }
}

engine::Description describe(const char* op, c10::ArrayRef<at::Tensor> tensors, std::string detail,
                             const char* algorithm, std::uint32_t seq) {
  const bool any = !tensors.empty();
  return engine::Description::collective(
      op, std::move(detail), tensors.size(), any ? tensors[0].numel() : 0,
      any ? c10::toString(tensors[0].scalar_type()) : "", algorithm, seq);
}

}  // namespace commux
