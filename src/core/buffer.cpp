#include "core/buffer.hpp"

namespace commux::core {
namespace {
constexpr std::uint32_t kFrontEnd = 0x10000;
}  // namespace

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
