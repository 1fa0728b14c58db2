// The CUDA unit as libcommux_core builds it with a CUDA toolkit and no torch: the plain CUDA
// runtime (linked statically, so the library loads where no driver is, and only the first
// CUDA call looks for one), with a core::Stream's id the cudaStream_t itself.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

#include "cuda/cuda_support.hpp"
#include "cuda/host_function.hpp"

namespace commux::cuda {
bool compiled() { return true; }

int deviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // no driver or no GPU: none
    return 0;
  }
  return count;
}

void whenStreamReaches(const core::Stream& stream, std::function<void()> ready) {
  const DeviceScope onDevice(stream.device);
  detail::launchReady(detail::rawStream(stream), std::move(ready));
}

void setDevice(int device) {
  const cudaError_t rc = cudaSetDevice(device);
  if (rc != cudaSuccess) {
    throw std::runtime_error(std::string("commux: cudaSetDevice(") + std::to_string(device) +
                             "): " + cudaGetErrorString(rc));
  }
}

DeviceScope::DeviceScope(const std::optional<int>& device) {
  if (!device) return;
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) current = 0;
  if (current != *device) setDevice(*device);
  previous_ = current;
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0) return;
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) cudaSetDevice(previous_);
}

}  // namespace commux::cuda
