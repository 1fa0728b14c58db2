#pragma once
// A shared-memory segment mapped into this process (RAII: unmapped on destruction). One rank
// creates it, the others open it, and the creator withdraws the way to open it once
// everyone has mapped it. A nameless segment (memfd) is opened through the creator's open
// descriptor (/proc/<pid>/fd/<fd>) and never appears in /dev/shm, so a job killed at any
// moment leaves nothing behind; a named one (for ranks in another PID namespace, which
// cannot reach the creator's /proc) is in /dev/shm until everyone has mapped it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace commux::shm {

class Segment {
 public:
  /// Creates and maps a zero-filled segment of `bytes`: nameless (name() is the path of its
  /// descriptor under /proc), or under a new unique name in /dev/shm.
  static std::unique_ptr<Segment> create(std::size_t bytes, bool nameless = false);
  /// Maps the segment `name` (a /dev/shm name, or a /proc/<pid>/fd/<fd> path) that another
  /// process created: only a file of this user's, mode 0600, of exactly `bytes`.
  static std::unique_ptr<Segment> open(const std::string& name, std::size_t bytes);

  /// Whether `name` is one that create() makes, as it came from another process (the
  /// store, a peer's greeting): a /dev/shm name, or a descriptor path under /proc; with
  /// `pid` (> 0), only that process's descriptor path.
  static bool wellFormedName(const std::string& name, std::int32_t pid = 0);

  ~Segment();
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;

  const std::string& name() const noexcept { return name_; }
  char* data() const noexcept { return static_cast<char*>(data_); }
  std::size_t size() const noexcept { return size_; }
  /// Withdraws the way to open it: removes the name, or closes a nameless segment's
  /// descriptor (the mapping stays valid); idempotent.
  void unlink();

 private:
  Segment(std::string name, void* data, std::size_t size, bool owner, int fd = -1);

  std::string name_;
  void* data_;
  std::size_t size_;
  bool linked_;
  int fd_;  // a nameless segment's descriptor while others may still open it, else -1
};

}  // namespace commux::shm
