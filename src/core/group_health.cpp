#include "core/group_health.hpp"

#include "core/error.hpp"

namespace commux::core {

bool GroupHealth::markDead(int rank, const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = dead_.at(static_cast<std::size_t>(rank));
  if (!slot.empty()) return false;
  slot = why.empty() ? "it was found dead" : why;
  anyDead_.store(true, std::memory_order_release);
  return true;
}

std::string GroupHealth::deadWhy(int rank) const {
  if (!anyDead()) return "";
  std::lock_guard<std::mutex> lock(mutex_);
  return dead_.at(static_cast<std::size_t>(rank));
}

int GroupHealth::firstDead(std::string* why) const {
  if (!anyDead()) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t r = 0; r < dead_.size(); ++r) {
    if (!dead_[r].empty()) {
      if (why != nullptr) *why = dead_[r];
      return static_cast<int>(r);
    }
  }
  return -1;
}

std::vector<int> GroupHealth::deadRanks() const {
  std::vector<int> ranks;
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t r = 0; r < dead_.size(); ++r) {
    if (!dead_[r].empty()) ranks.push_back(static_cast<int>(r));
  }
  return ranks;
}

void GroupHealth::collectiveFailed(std::exception_ptr error) {
  if (!error || collectiveFailed_.load(std::memory_order_acquire)) return;
  const core::ErrorReading reading = core::readError(error);
  if (reading.kind == core::ErrorKind::InvalidArgument) return;
  collectiveFailed(reading.message);
}

void GroupHealth::collectiveFailed(const std::string& why) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (collectiveFailed_.load(std::memory_order_relaxed)) return;
  collectiveWhy_ = why;
  collectiveFailed_.store(true, std::memory_order_release);
}

std::string GroupHealth::collectiveFailure() const {
  if (!collectiveFailed_.load(std::memory_order_acquire)) return "";
  std::lock_guard<std::mutex> lock(mutex_);
  return collectiveWhy_;
}

}  // namespace commux::core
