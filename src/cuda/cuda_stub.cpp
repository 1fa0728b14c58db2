#include <stdexcept>

#include "cuda/cuda_support.hpp"

namespace commux::cuda {
namespace {

[[noreturn]] void noCuda() {
  throw std::runtime_error("commux: this build has no CUDA support (torch was CPU-only when "
                           "commux was built); rebuild commux against a CUDA torch");
}

}  // namespace

bool compiled() { return false; }

int deviceCount() { return 0; }

void whenStreamReaches(const core::Stream&, std::function<void()>) { noCuda(); }

void setDevice(int) { noCuda(); }

DeviceScope::DeviceScope(const std::optional<int>& device) {
  if (device) noCuda();
}

DeviceScope::~DeviceScope() = default;

}  // namespace commux::cuda
