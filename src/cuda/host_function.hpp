#pragma once
// How both CUDA units order an operation after a stream: a host function queued on the
// stream (cudaLaunchHostFunc) hands it to the engine when the stream reaches it, after the
// kernels that produce its inputs, with no device-wide synchronisation and without
// blocking the caller (a recorded event would need polling instead).
#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>

#include "core/stream.hpp"

namespace commux::cuda::detail {

/// The cudaStream_t a core::Stream names in the plain-runtime build (its id is the handle).
inline cudaStream_t rawStream(const core::Stream& stream) {
  return reinterpret_cast<cudaStream_t>(static_cast<std::intptr_t>(stream.id));
}

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
