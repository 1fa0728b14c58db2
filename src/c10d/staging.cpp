#include "c10d/staging.hpp"

#include <algorithm>

#include "commux/options.hpp"

namespace commux {

collectives::Thresholds thresholds() {
  const Config& c = Config::get();
  return collectives::Thresholds{c.allreduceRingMinBytes, c.chainMinBytes, c.pipelineChunkBytes};
}

at::Tensor flat(const at::Tensor& t) {
  return t.is_contiguous() ? t.view({-1}) : t.contiguous().view({-1});
}

std::vector<collectives::Range> equalBlocks(std::size_t count, int size) {
  std::vector<collectives::Range> blocks;
  for (int r = 0; r < size; ++r) blocks.push_back({static_cast<std::size_t>(r) * count, count});
  return blocks;
}

void scatterBack(const at::Tensor& work, const std::vector<at::Tensor>& tensors) {
  for (const auto& t : tensors) {
    if (t.is_contiguous() && t.data_ptr() == work.data_ptr()) continue;
    t.copy_(work.view(t.sizes()));
  }
}

std::string describe(const char* op, const std::vector<at::Tensor>& tensors,
                     const std::string& detail, const char* algorithm, std::uint32_t seq) {
  std::string s = std::string(op) + " (";
  if (!detail.empty()) s += detail + ", ";
  if (!tensors.empty()) {
    s += std::to_string(elementCount(tensors[0])) + " x " +
         std::string(c10::toString(tensors[0].scalar_type()));
    if (tensors.size() > 1) s += " x " + std::to_string(tensors.size()) + " tensors";
    s += ", ";
  }
  return s + algorithm + ", collective #" + std::to_string(seq) + ")";
}

std::size_t ringChunk(std::size_t elementSize) {
  return std::max<std::size_t>(1, Config::get().pipelineChunkBytes / std::max<std::size_t>(elementSize, 1));
}

}  // namespace commux
