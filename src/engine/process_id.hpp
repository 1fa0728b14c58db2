#pragma once
// Who a process is, in a form another process can check: the kernel it runs on and its
// PID namespace (so a pid means the same process to both), its pid, and its start time
// (so a pid the kernel handed to a new process after ours died is not mistaken for it).
#include <cstdint>
#include <string>

namespace commux::engine {

struct ProcessId {
  /// Kernel boot id + PID-namespace inode; empty when unknown (then nothing is watched).
  std::string pidSpace;
  std::int32_t pid = 0;
  /// Start time in clock ticks since boot (field 22 of /proc/<pid>/stat).
  std::uint64_t startTicks = 0;

  /// This process (read anew each time: a forked child is another process).
  static ProcessId self();
  /// This process's PID-space id (fixed for its life; read once).
  static const std::string& localPidSpace();
  /// The start time of `pid` as /proc shows it now; 0 when it no longer exists.
  static std::uint64_t startTicksOf(std::int32_t pid);
  /// True when `other` lives in the same PID namespace of the same kernel as this process.
  bool sameSpace(const ProcessId& other) const noexcept {
    return !pidSpace.empty() && pidSpace == other.pidSpace;
  }
};

}  // namespace commux::engine
