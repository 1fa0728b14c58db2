#include "core/group_health.hpp"

#include "core/error.hpp"

namespace commux::core {

std::string lostMember(int rank, const std::string& why) {
  const bool left = why.rfind(kClosedByPeer, 0) == 0;
  return "rank " + std::to_string(rank) + (left ? " left the group" : " died") +
         (why.empty() ? "" : " (" + why + ")");
}

namespace {

// Wrap-safe "collective `sequence` comes before `through`".
bool before(std::uint32_t sequence, std::uint32_t through) {
  return static_cast<std::int32_t>(sequence - through) < 0;
}

}  // namespace

bool GroupHealth::markDead(int rank, const std::string& why,
                           std::optional<std::uint32_t> through) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& slot = dead_.at(static_cast<std::size_t>(rank));
  if (!slot.empty()) return false;
  slot = why.empty() ? "it was found dead" : why;
  through_[static_cast<std::size_t>(rank)] = through;
  order_.push_back(rank);
  anyDead_.store(true, std::memory_order_release);
  return true;
}

std::optional<std::uint32_t> GroupHealth::leftThrough(int rank) const {
  if (!anyDead()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mutex_);
  return through_.at(static_cast<std::size_t>(rank));
}

int GroupHealth::firstDeadFor(std::uint32_t sequence, std::string* why) const {
  if (!anyDead()) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  for (const int r : order_) {
    const auto& through = through_[static_cast<std::size_t>(r)];
    if (through && before(sequence, *through)) continue;
    if (why != nullptr) *why = dead_[static_cast<std::size_t>(r)];
    return r;
  }
  return -1;
}

int GroupHealth::firstLostForAnySource(std::string* why) const {
  if (!anyDead()) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  int found = -1;
  for (const int r : order_) {
    if (!through_[static_cast<std::size_t>(r)]) {
      found = r;
      break;
    }
  }
  // A member never finds itself gone: every other one is when all but one are.
  if (found < 0 && !order_.empty() && order_.size() + 1 >= dead_.size()) found = order_.front();
  if (found >= 0 && why != nullptr) *why = dead_[static_cast<std::size_t>(found)];
  return found;
}

bool GroupHealth::lostFor(int rank, std::uint32_t sequence) const {
  if (!anyDead()) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto r = static_cast<std::size_t>(rank);
  if (r >= dead_.size() || dead_[r].empty()) return false;
  return !(through_[r] && before(sequence, *through_[r]));
}

std::string GroupHealth::deadWhy(int rank) const {
  if (!anyDead()) return "";
  std::lock_guard<std::mutex> lock(mutex_);
  return dead_.at(static_cast<std::size_t>(rank));
}

int GroupHealth::firstDead(std::string* why) const {
  if (!anyDead()) return -1;
  std::lock_guard<std::mutex> lock(mutex_);
  if (order_.empty()) return -1;
  if (why != nullptr) *why = dead_[static_cast<std::size_t>(order_.front())];
  return order_.front();
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
