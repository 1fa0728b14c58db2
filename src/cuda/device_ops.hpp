#pragma once
// What the core's collectives on device memory need of CUDA: where a pointer lives, device
// memory and a stream of commux's own, and copies and folds queued on a stream. Free of
// torch and of CUDA headers. libcommux_core built with a CUDA toolkit implements it over
// the CUDA runtime (device_ops_runtime.cpp, its fold kernels in device_fold.cu), where a
// core::Stream's id is the cudaStream_t itself; every other build links
// device_ops_stub.cpp, which raises Unsupported (torch's adapter moves CUDA tensors its
// own way, folding with ATen).
#include <cstddef>
#include <optional>

#include "core/dtype.hpp"
#include "core/reduce.hpp"
#include "core/stream.hpp"

namespace commux::cuda {

/// Whether this build can run the core's collectives on device memory.
bool deviceOpsCompiled() noexcept;

/// The GPU that holds `pointer` (device or managed memory), or empty for host memory
/// (pageable, pinned, or unknown to CUDA). Raises Unsupported in a build without it only
/// when CUDA is present; without CUDA every pointer is a host one.
std::optional<int> deviceOf(const void* pointer);

/// `bytes` of device memory on GPU `device`, freed with it.
class DeviceMemory {
 public:
  DeviceMemory(int device, std::size_t bytes);
  ~DeviceMemory();
  DeviceMemory(const DeviceMemory&) = delete;
  DeviceMemory& operator=(const DeviceMemory&) = delete;
  void* data() const noexcept { return data_; }

 private:
  void* data_ = nullptr;
  int device_ = -1;
};

/// A stream of commux's own on GPU `device` that does not wait for the legacy default
/// stream: the folds of a collective run there, beside the caller's work.
class OwnStream {
 public:
  explicit OwnStream(int device);
  ~OwnStream();
  OwnStream(const OwnStream&) = delete;
  OwnStream& operator=(const OwnStream&) = delete;
  const core::Stream& stream() const noexcept { return stream_; }

 private:
  core::Stream stream_;
};

/// Queues a copy of `bytes` from `from` to `to` (device or host memory) on `stream`.
void copyOnStream(void* to, const void* from, std::size_t bytes, const core::Stream& stream);
/// Queues out[i] = a[i] (op) b[i] for i < count on `stream`, with the host fold's results
/// (core/reduce.hpp): the same bits for every type and operation. `out` may be `a` or `b`.
void foldOnStream(void* out, const void* a, const void* b, std::size_t count, core::Dtype dtype,
                  core::ReduceOp op, const core::Stream& stream);

}  // namespace commux::cuda
