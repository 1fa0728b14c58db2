#include "ucx/loaded_library.hpp"

#include <dlfcn.h>
#include <ucp/api/ucp.h>

#include <stdexcept>

namespace commux::ucx {

std::string loadedVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(release);
}

std::string loadedLibraryPath() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ucp_get_version), &info) != 0 && info.dli_fname != nullptr) {
    return info.dli_fname;
  }
  return "";
}

void checkLoadedVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major > kOldestMajor || (major == kOldestMajor && minor >= kOldestMinor)) return;
  const std::string where = loadedLibraryPath();
  throw std::runtime_error("commux: the UCX loaded at run time (" + (where.empty() ? "libucp" : where) +
                           ") is " + loadedVersion() + "; commux needs UCX " +
                           std::to_string(kOldestMajor) + "." + std::to_string(kOldestMinor) +
                           " or newer (COMMUX_UCX_HOME or LD_LIBRARY_PATH choose which UCX loads)");
}

}  // namespace commux::ucx
