#include "core/buffer.hpp"

#include <cstring>
#include <memory>
#include <vector>

namespace commux::core {
namespace {
constexpr std::uint32_t kFrontEnd = 0x10000;
}  // namespace

Buffer slice(const Buffer& buffer, std::size_t offset, std::size_t count) {
  Buffer part = buffer;
  part.data = buffer.bytePointer() + offset * buffer.elementSize;
  part.count = count;
  return part;
}

Buffer hostBufferLike(const Buffer& like, std::size_t count, bool zero) {
  // Not value-initialised: most callers overwrite it at once.
  const std::size_t size = count * like.elementSize;
  std::shared_ptr<char[]> bytes(new char[size == 0 ? 1 : size]);
  if (zero && size != 0) std::memset(bytes.get(), 0, size);
  Buffer buffer = like;
  buffer.data = bytes.get();
  buffer.count = count;
  buffer.memory = MemoryType::Host;
  buffer.device = -1;
  buffer.owner = std::move(bytes);
  return buffer;
}

Buffer hostCopyOf(const Buffer& buffer) {
  Buffer copy = hostBufferLike(buffer, buffer.count);
  if (buffer.bytes() != 0) std::memcpy(copy.data, buffer.data, buffer.bytes());
  return copy;
}

std::uint32_t typeCode(const Buffer& buffer) noexcept {
  if (buffer.dtype == Dtype::Opaque) {
    return kFrontEnd | static_cast<std::uint16_t>(buffer.frontEndType);
  }
  return static_cast<std::uint32_t>(buffer.dtype);
}

std::string typeCodeName(std::uint32_t code) {
  if (code & kFrontEnd) return "front-end type " + std::to_string(code & 0xffff);
  if (code <= static_cast<std::uint32_t>(Dtype::Opaque)) return nameOf(static_cast<Dtype>(code));
  return "type code " + std::to_string(code);
}

}  // namespace commux::core
