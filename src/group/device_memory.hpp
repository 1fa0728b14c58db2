#pragma once
// Host or device memory alike for the core's collectives: a buffer's working copy, and
// copies between buffers, on the host at once or queued on the caller's CUDA stream (device
// memory; cuda/device_ops.hpp), so that a collective's own copies keep the stream's order.
#include <cstddef>
#include <optional>
#include <string>

#include "core/buffer.hpp"
#include "core/stream.hpp"

namespace commux::group {

/// "host memory", "the memory of GPU 1".
std::string describeMemory(const core::Buffer& buffer);
/// The stream a collective on `buffer` is ordered after: `after`, or for device memory
/// without one the device's legacy default stream; empty for host memory.
std::optional<core::Stream> streamFor(const core::Buffer& buffer,
                                      const std::optional<core::Stream>& after);
/// `count` elements of `like`'s type in fresh memory of `like`'s kind, which the Buffer owns.
core::Buffer bufferLike(const core::Buffer& like, std::size_t count);
/// A copy of `buffer` in fresh memory of its kind (for device memory queued on `stream`).
core::Buffer copyOf(const core::Buffer& buffer, const std::optional<core::Stream>& stream);
/// Copies `bytes` from `from` to `to`, both in `like`'s kind of memory: at once on the
/// host, queued on `stream` for device memory.
void copyBytes(void* to, const void* from, std::size_t bytes, const core::Buffer& like,
               const std::optional<core::Stream>& stream);

}  // namespace commux::group
