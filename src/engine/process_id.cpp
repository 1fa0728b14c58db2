#include "engine/process_id.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

namespace commux::engine {
namespace {

std::string currentPidSpace() {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  struct stat st {};
  if (boot.empty() || ::stat("/proc/self/ns/pid", &st) != 0) return "";
  return boot + "|" + std::to_string(st.st_dev) + ":" + std::to_string(st.st_ino);
}

}  // namespace

std::uint64_t ProcessId::startTicksOf(std::int32_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  // The command name (field 2) may hold spaces and parentheses: fields restart after the
  // last ')'. Field 22 is then the 20th word.
  const auto close = line.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream words(line.substr(close + 1));
  std::string word;
  for (int field = 3; field <= 22 && (words >> word); ++field) {
    if (field == 22) return std::stoull(word);
  }
  return 0;
}

const std::string& ProcessId::localPidSpace() {
  static const std::string space = currentPidSpace();
  return space;
}

ProcessId ProcessId::self() {
  ProcessId p;
  p.pidSpace = localPidSpace();
  p.pid = static_cast<std::int32_t>(::getpid());
  p.startTicks = startTicksOf(p.pid);
  return p;
}

}  // namespace commux::engine
