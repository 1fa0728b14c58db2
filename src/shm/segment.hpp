#pragma once
// A POSIX shared-memory segment mapped into this process (RAII: unmapped on destruction).
// One rank creates it under a fresh name, the others open it by that name, and the
// creator unlinks the name once everyone has mapped it, so a crashed job leaves nothing
// behind in /dev/shm.
#include <cstddef>
#include <memory>
#include <string>

namespace commux::shm {

class Segment {
 public:
  /// Creates and maps a zero-filled segment of `bytes` under a new unique name.
  static std::unique_ptr<Segment> create(std::size_t bytes);
  /// Maps the segment `name` that another process created; it must hold `bytes`.
  static std::unique_ptr<Segment> open(const std::string& name, std::size_t bytes);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const noexcept { return name_; }
  char* data() const noexcept { return static_cast<char*>(data_); }
  std::size_t size() const noexcept { return size_; }
  /// Removes the name (the mapping stays valid); idempotent.
  void unlink();

 private:
  Segment(std::string name, void* data, std::size_t size, bool owner);

  std::string name_;
  void* data_;
  std::size_t size_;
  bool linked_;
};

}  // namespace commux::shm
