#pragma once
// How both CUDA units order an operation after a stream: a host function queued on the
// stream (cudaLaunchHostFunc) hands it to the engine when the stream reaches it, after the
// kernels that produce its inputs, with no device-wide synchronisation and without
// blocking the caller (a recorded event would need polling instead).
#include <cuda_runtime_api.h>

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

namespace commux::cuda::detail {

/// Runs and frees the std::function<void()> that `arg` owns.
inline void runReady(void* arg) {
  std::unique_ptr<std::function<void()>> ready(static_cast<std::function<void()>*>(arg));
  try {
    (*ready)();
  } catch (...) {
    // Nothing can be reported from a driver thread; the engine fails the operation when
    // it shuts down, and a wait on it times out.
  }
}

/// Calls `ready` on a CUDA driver thread once `stream` reaches its current end.
inline void launchReady(cudaStream_t stream, std::function<void()> ready) {
  auto* arg = new std::function<void()>(std::move(ready));
  const cudaError_t rc = cudaLaunchHostFunc(stream, runReady, arg);
  if (rc != cudaSuccess) {
    delete arg;
    throw std::runtime_error(std::string("commux: cannot order the operation after its CUDA "
                                         "stream (cudaLaunchHostFunc: ") +
                             cudaGetErrorString(rc) + ")");
  }
}

}  // namespace commux::cuda::detail
