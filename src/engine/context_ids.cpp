#include "engine/context_ids.hpp"

#include <stdexcept>
#include <string>

#include "wire/tag.hpp"

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
  // Ids are the tag's context field; a group's id comes back when its last reference goes.
  throw std::runtime_error(
      "commux: more than " + std::to_string(n) +
      " live process groups in one process: each needs an id in the UCX tag's context field (" +
      std::to_string(n) + " ids" +
      (n < wire::kControlContext ? ", lowered by COMMUX_MAX_CONTEXTS" : "") +
      "). Destroy groups that are no longer needed (dist.destroy_process_group(group)) and drop "
      "the references to them before creating more");
}

void ContextIds::release(std::uint32_t id) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id < inUse_.size()) inUse_[id] = false;
}

}  // namespace commux::engine
