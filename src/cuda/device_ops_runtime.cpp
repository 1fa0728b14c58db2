// The device operations over the CUDA runtime (libcommux_core built with a CUDA toolkit):
// a core::Stream's id is the cudaStream_t itself, as the C API's callers pass it.
#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/error.hpp"
#include "cuda/cuda_support.hpp"
#include "cuda/device_ops.hpp"
#include "cuda/fold_kernels.hpp"
#include "cuda/host_function.hpp"

namespace commux::cuda {
namespace {

void check(cudaError_t rc, const char* what) {
  COMMUX_CHECK(rc == cudaSuccess, Runtime, "commux: ", what, " failed: ", cudaGetErrorName(rc),
               " (", cudaGetErrorString(rc), ")");
}

}  // namespace

bool deviceOpsCompiled() noexcept { return true; }

std::optional<int> deviceOf(const void* pointer) {
  if (pointer == nullptr) return std::nullopt;
  cudaPointerAttributes attributes{};
  const cudaError_t rc = cudaPointerGetAttributes(&attributes, pointer);
  if (rc != cudaSuccess) {
    // No driver or no GPU: nothing can be device memory. Clear the error, which the
    // runtime would otherwise report again at the next call.
    cudaGetLastError();
    return std::nullopt;
  }
  if (attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged) {
    return attributes.device;
  }
  return std::nullopt;
}

DeviceMemory::DeviceMemory(int device, std::size_t bytes) : device_(device) {
  if (bytes == 0) return;
  const DeviceScope onDevice(device);
  check(cudaMalloc(&data_, bytes), "cudaMalloc of the collective's scratch memory");
}

DeviceMemory::~DeviceMemory() {
  if (data_ == nullptr) return;
  const DeviceScope onDevice(device_);
  cudaFree(data_);  // waits for the GPU's use of it to end
}

OwnStream::OwnStream(int device) {
  const DeviceScope onDevice(device);
  cudaStream_t made = nullptr;
  check(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  stream_ = core::Stream{device, static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(made))};
}

OwnStream::~OwnStream() {
  const DeviceScope onDevice(stream_.device);
  cudaStreamDestroy(detail::rawStream(stream_));  // returns at once; queued work still completes
}

void copyOnStream(void* to, const void* from, std::size_t bytes, const core::Stream& stream) {
  if (bytes == 0) return;
  const DeviceScope onDevice(stream.device);
  check(cudaMemcpyAsync(to, from, bytes, cudaMemcpyDefault, detail::rawStream(stream)),
        "cudaMemcpyAsync");
}

void foldOnStream(void* out, const void* a, const void* b, std::size_t count, core::Dtype dtype,
                  core::ReduceOp op, const core::Stream& stream) {
  const DeviceScope onDevice(stream.device);
  bool unsupported = false;
  const int rc = launchFold(out, a, b, count, dtype, op, detail::rawStream(stream), unsupported);
  COMMUX_CHECK(!unsupported, InvalidArgument, "commux: ", core::nameOf(op), " is not defined on ",
               core::nameOf(dtype));
  check(static_cast<cudaError_t>(rc), "the fold kernel's launch");
}

}  // namespace commux::cuda
