// The CUDA unit as torch's adapter builds it: streams and devices through c10's CUDA
// guards, which restore a device without creating a context on it.
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <stdexcept>
#include <string>

#include "cuda/cuda_support.hpp"
#include "cuda/host_function.hpp"

namespace commux::cuda {
bool compiled() { return true; }

int deviceCount() { return static_cast<int>(c10::cuda::device_count()); }

void whenStreamReaches(const core::Stream& coreStream, std::function<void()> ready) {
  const auto stream = c10::Stream::unpack3(
      coreStream.id, static_cast<c10::DeviceIndex>(coreStream.device), c10::DeviceType::CUDA);
  const c10::cuda::CUDAStream cudaStream(stream);
  const c10::cuda::CUDAGuard device(stream.device_index());
  detail::launchReady(cudaStream.stream(), std::move(ready));
}

void setDevice(int device) {
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->setDevice(c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(device)));
}

// What c10::DeviceGuard does, with the previous device kept as a number: exchangeDevice to
// enter, uncheckedSetDevice to restore (which creates no context on a device that has none).
DeviceScope::DeviceScope(const std::optional<int>& device) {
  if (!device) return;
  previous_ = c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
                  ->exchangeDevice(
                      c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(*device)))
                  .index();
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0) return;
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->uncheckedSetDevice(
          c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(previous_)));
}

}  // namespace commux::cuda
