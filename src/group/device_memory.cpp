#include "group/device_memory.hpp"

#include <cstring>
#include <memory>

#include "cuda/device_ops.hpp"

namespace commux::group {

std::string describeMemory(const core::Buffer& buffer) {
  return buffer.memory == core::MemoryType::Cuda
             ? "the memory of GPU " + std::to_string(buffer.device)
             : std::string("host memory");
}

std::optional<core::Stream> streamFor(const core::Buffer& buffer,
                                      const std::optional<core::Stream>& after) {
  if (buffer.memory != core::MemoryType::Cuda) return std::nullopt;
  return after ? *after : core::Stream{buffer.device, 0};
}

core::Buffer bufferLike(const core::Buffer& like, std::size_t count) {
  if (like.memory != core::MemoryType::Cuda) return core::hostBufferLike(like, count);
  auto memory = std::make_shared<cuda::DeviceMemory>(like.device, count * like.elementSize);
  core::Buffer made = like;
  made.data = memory->data();
  made.count = count;
  made.owner = std::move(memory);
  return made;
}

core::Buffer copyOf(const core::Buffer& buffer, const std::optional<core::Stream>& stream) {
  if (buffer.memory != core::MemoryType::Cuda) return core::hostCopyOf(buffer);
  core::Buffer copy = bufferLike(buffer, buffer.count);
  copyBytes(copy.data, buffer.data, buffer.bytes(), buffer, stream);
  return copy;
}

void copyBytes(void* to, const void* from, std::size_t bytes, const core::Buffer& like,
               const std::optional<core::Stream>& stream) {
  if (bytes == 0 || to == from) return;
  if (like.memory == core::MemoryType::Cuda) {
    cuda::copyOnStream(to, from, bytes, *streamFor(like, stream));
    return;
  }
  std::memcpy(to, from, bytes);
}

}  // namespace commux::group
