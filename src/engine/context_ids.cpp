#include "engine/context_ids.hpp"

#include <stdexcept>
#include <string>

namespace commux::engine {

std::uint32_t ContextIds::acquire() {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto n = static_cast<std::uint32_t>(inUse_.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint32_t id = (next_ + i) % n;
    if (!inUse_[id]) {
      inUse_[id] = true;
      next_ = (id + 1) % n;
      return id;
    }
  }
  throw std::runtime_error("commux: more than " + std::to_string(n) +
                           " live process groups in one process");
}

void ContextIds::release(std::uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < inUse_.size()) inUse_[id] = false;
}

}  // namespace commux::engine
