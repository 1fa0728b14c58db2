#include "ucx/context.hpp"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <set>
#include <sstream>

#include "ucx/loaded_library.hpp"
#include "ucx/status.hpp"

namespace commux::ucx {
namespace {

std::size_t positiveFromEnvironment(const char* name) {
  const char* raw = std::getenv(name);
  if (raw == nullptr || *raw == '\0') return 0;
  char* end = nullptr;
  const unsigned long long value = std::strtoull(raw, &end, 10);
  // A malformed value is torch's to report (env:// rendezvous); a hint just stays unset.
  return *end == '\0' && raw[0] != '-' ? static_cast<std::size_t>(value) : 0;
}

}  // namespace

JobHints JobHints::fromEnvironment() {
  JobHints hints;
  hints.endpoints = positiveFromEnvironment("WORLD_SIZE");
  hints.processesPerNode = positiveFromEnvironment("LOCAL_WORLD_SIZE");
  return hints;
}

Context::Context(bool loopbackOnly, JobHints hints) : hints_(hints) {
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
  // Both fields are in UCX 1.13's ucp_params_t (the oldest UCX commux supports).
  if (hints_.endpoints > 0) {
    params.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_EPS;
    params.estimated_num_eps = hints_.endpoints;
  }
  if (hints_.processesPerNode > 0) {
    params.field_mask |= UCP_PARAM_FIELD_ESTIMATED_NUM_PPN;
    params.estimated_num_ppn = hints_.processesPerNode;
  }
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
