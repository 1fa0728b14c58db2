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

namespace commux::cuda {
namespace {

void runReady(void* arg) {
  std::unique_ptr<std::function<void()>> ready(static_cast<std::function<void()>*>(arg));
  try {
    (*ready)();
  } catch (...) {
    // Nothing can be reported from a driver thread; the engine fails the operation when
    // it shuts down, and a wait on it times out.
  }
}

}  // namespace

bool compiled() { return true; }

int deviceCount() { return static_cast<int>(c10::cuda::device_count()); }

void whenStreamReaches(const core::Stream& coreStream, std::function<void()> ready) {
  const auto stream = c10::Stream::unpack3(coreStream.id,
                                           static_cast<c10::DeviceIndex>(coreStream.device),
                                           c10::DeviceType::CUDA);
  const c10::cuda::CUDAStream cudaStream(stream);
  const c10::cuda::CUDAGuard device(stream.device_index());
  // A host function on the stream runs when the stream reaches it: the operation starts
  // after the kernels that produce its inputs, with no device-wide synchronisation and
  // without blocking the caller (a recorded event would need polling instead).
  auto* arg = new std::function<void()>(std::move(ready));
  const cudaError_t rc = cudaLaunchHostFunc(cudaStream.stream(), runReady, arg);
  if (rc != cudaSuccess) {
    delete arg;
    throw std::runtime_error(std::string("commux: cannot order the operation after its CUDA "
                                         "stream (cudaLaunchHostFunc: ") +
                             cudaGetErrorString(rc) + ")");
  }
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
                  ->exchangeDevice(c10::Device(c10::DeviceType::CUDA,
                                               static_cast<c10::DeviceIndex>(*device)))
                  .index();
}

DeviceScope::~DeviceScope() {
  if (previous_ < 0) return;
  c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)
      ->uncheckedSetDevice(
          c10::Device(c10::DeviceType::CUDA, static_cast<c10::DeviceIndex>(previous_)));
}

}  // namespace commux::cuda
