#pragma once
// Communicator ids (the context field of every tag, see wire/tag.hpp), local to this
// process, handed out round robin: an id comes back only after all others were used, so
// messages still in flight for a destroyed group can never match the group that reuses it.
#include <cstdint>
#include <mutex>
#include <vector>

namespace commux::engine {

class ContextIds {
 public:
  explicit ContextIds(std::uint32_t count) : inUse_(count, false) {}
  /// Any thread. Throws when all `count` ids are in use.
  std::uint32_t acquire();
  /// Any thread; unknown or free ids are ignored.
  void release(std::uint32_t id);

 private:
  std::mutex mutex_;
  std::vector<bool> inUse_;
  std::uint32_t next_ = 0;
};

}  // namespace commux::engine
