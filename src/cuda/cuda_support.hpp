#pragma once
// What the CUDA unit offers the rest of commux. Only cuda_support.cpp (built when torch has
// CUDA) includes CUDA headers; cuda_stub.cpp stands in otherwise, so the library loads
// and runs with no GPU and no CUDA runtime. This header is torch-free: the engine calls it.
#include <functional>
#include <optional>

#include "core/stream.hpp"

namespace commux::cuda {

/// True when this build of commux compiled its CUDA unit.
bool compiled();
/// Number of CUDA devices visible now (0 without a driver or GPU).
int deviceCount();
/// Calls `ready` once the GPU has finished everything queued on `stream` so far, without
/// blocking the caller or synchronising the device. `ready` runs on a CUDA driver thread:
/// it must be quick and must not call CUDA (it only hands an operation to the engine).
/// Throws when this build has no CUDA unit.
void whenStreamReaches(const core::Stream& stream, std::function<void()> ready);
/// Makes GPU `device` this thread's current one, for good (the progress thread, whose
/// later progress calls need the device of the transfers it drives).
void setDevice(int device);

/// Makes GPU `device` current while it lives, then restores the previous one (nothing when
/// empty): UCX's CUDA transports work in the current device's context.
class DeviceScope {
 public:
  explicit DeviceScope(const std::optional<int>& device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;  // the device to restore; -1 when none was given
};

}  // namespace commux::cuda
