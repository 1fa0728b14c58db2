#include "collectives/schedule.hpp"

#include <algorithm>

namespace commux::collectives {

std::vector<int> Schedule::peers() const {
  std::vector<int> out;
  for (const auto& step : steps) {
    for (const auto& t : step.sends) out.push_back(t.peer);
    for (const auto& t : step.recvs) out.push_back(t.peer);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

void Schedule::add(Step step) {
  if (step.sends.empty() && step.recvs.empty() && step.copies.empty()) return;
  if (step.recvMode == RecvMode::Reduce) {
    std::size_t total = 0;
    for (const auto& t : step.recvs) total += t.count;
    scratchElements = std::max(scratchElements, total);
  }
  steps.push_back(std::move(step));
}

Range blockRange(std::size_t count, int parts, int index) {
  const std::size_t p = static_cast<std::size_t>(parts);
  const std::size_t i = static_cast<std::size_t>(index);
  const std::size_t base = count / p;
  const std::size_t extra = count % p;
  return Range{i * base + std::min(i, extra), base + (i < extra ? 1 : 0)};
}

Transfer chunkTransfer(std::size_t count, std::size_t chunk, std::size_t index, int peer) {
  const std::size_t offset = std::min(count, index * chunk);
  return Transfer{peer, static_cast<std::uint32_t>(index), offset, std::min(chunk, count - offset)};
}

std::size_t chunkCount(std::size_t count, std::size_t chunk) {
  return std::max<std::size_t>(1, (count + chunk - 1) / chunk);
}

int floorLog2(std::uint64_t x) {
  int r = -1;
  while (x != 0) {
    x >>= 1;
    ++r;
  }
  return r;
}

}  // namespace commux::collectives
