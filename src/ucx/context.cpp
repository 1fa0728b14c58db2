#include "ucx/context.hpp"

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ucx/status.hpp"

namespace commux::ucx {

namespace {

// The oldest UCX commux runs on (Debian 12's libucx0; tested in tests/python/test_system_ucx.py).
constexpr unsigned kOldestMajor = 1;
constexpr unsigned kOldestMinor = 13;

// The UCX picked at run time (COMMUX_UCX_HOME, LD_LIBRARY_PATH, the wheel) may be older than
// the headers commux was built with: say so instead of failing somewhere inside UCX.
void checkLoadedVersion() {
  unsigned major = 0, minor = 0, release = 0;
  ucp_get_version(&major, &minor, &release);
  if (major > kOldestMajor || (major == kOldestMajor && minor >= kOldestMinor)) return;
  std::string where = "libucp";
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&ucp_get_version), &info) != 0 && info.dli_fname != nullptr) {
    where = info.dli_fname;
  }
  throw std::runtime_error("commux: the UCX loaded at run time (" + where + ") is " +
                           std::to_string(major) + "." + std::to_string(minor) + "." +
                           std::to_string(release) + "; commux needs UCX " +
                           std::to_string(kOldestMajor) + "." + std::to_string(kOldestMinor) +
                           " or newer (COMMUX_UCX_HOME or LD_LIBRARY_PATH choose which UCX loads)");
}

}  // namespace

Context::Context(bool loopbackOnly) {
  checkLoadedVersion();
  ucp_config_t* config = nullptr;
  check(ucp_config_read(nullptr, nullptr, &config), "ucp_config_read");
  std::unique_ptr<ucp_config_t, decltype(&ucp_config_release)> guard(config, ucp_config_release);
  if (loopbackOnly) check(ucp_config_modify(config, "NET_DEVICES", "lo"), "ucp_config_modify");

  ucp_params_t params{};
  params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME;
  params.features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
  params.mt_workers_shared = 0;  // one worker, owned by one progress thread
  params.name = "commux";
  // ucp_init() would ask for the API of the headers commux was built with; it needs only
  // what UCX 1.13 has (the system-UCX build compiles against 1.13), and an older UCX picked
  // at run time (COMMUX_UCX_HOME) would warn that the API is incompatible.
  check(ucp_init_version(kOldestMajor, kOldestMinor, &params, config, &handle_), "ucp_init");
}

Context::~Context() {
  if (handle_ != nullptr) ucp_cleanup(handle_);
}

std::vector<std::string> Context::transports() const {
  // UCX has no stable query API for its resources; its info printout lists them as
  // "...  tl/dev ..." lines, so parse that.
  char* buffer = nullptr;
  size_t size = 0;
  FILE* stream = open_memstream(&buffer, &size);
  if (stream == nullptr) return {};
  ucp_context_print_info(handle_, stream);
  std::fclose(stream);
  std::set<std::string> found;
  std::istringstream lines(std::string(buffer, size));
  std::free(buffer);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("resource") == std::string::npos) continue;
    std::istringstream words(line);
    for (std::string word; words >> word;) {
      if (word.find('/') != std::string::npos && word.find('(') == std::string::npos) {
        found.insert(word);
      }
    }
  }
  return {found.begin(), found.end()};
}

}  // namespace commux::ucx
