#pragma once
// What the CUDA unit offers the rest of commux. Only cuda_support.cpp (built when torch has
// CUDA) includes CUDA headers; cuda_stub.cpp stands in otherwise, so the library loads
// and runs with no GPU and no CUDA runtime.
#include <c10/core/Stream.h>

#include <functional>

namespace commux::cuda {

/// True when this build of commux compiled its CUDA unit.
bool compiled();
/// Number of CUDA devices visible now (0 without a driver or GPU).
int deviceCount();
/// Calls `ready` once the GPU has finished everything queued on `stream` so far, without
/// blocking the caller or synchronising the device. `ready` runs on a CUDA driver thread:
/// it must be quick and must not call CUDA (it only hands an operation to the engine).
/// Throws when this build has no CUDA unit.
void whenStreamReaches(const c10::Stream& stream, std::function<void()> ready);

}  // namespace commux::cuda
