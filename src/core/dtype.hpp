#pragma once
// The element types commux moves and reduces, named by commux itself: the core takes plain
// buffers (a pointer, a count, a Dtype) and knows nothing of torch's ScalarType, which the
// c10d adapter maps onto these.
#include <cstddef>
#include <cstdint>

namespace commux::core {

enum class Dtype : std::uint8_t {
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Bool,        // one byte, 0 or 1
  Complex64,   // two float32: real, imaginary
  Complex128,  // two float64
  Opaque,      // moved, never reduced: its size and identity are the Buffer's (core/buffer.hpp)
};

constexpr std::size_t sizeOf(Dtype dtype) noexcept {
  switch (dtype) {
    case Dtype::UInt8:
    case Dtype::Int8:
    case Dtype::Bool:
      return 1;
    case Dtype::Int16:
    case Dtype::Float16:
    case Dtype::BFloat16:
      return 2;
    case Dtype::Int32:
    case Dtype::Float32:
      return 4;
    case Dtype::Int64:
    case Dtype::Float64:
    case Dtype::Complex64:
      return 8;
    case Dtype::Complex128:
      return 16;
    case Dtype::Opaque:
      return 0;
  }
  return 0;
}

const char* nameOf(Dtype dtype) noexcept;

}  // namespace commux::core
