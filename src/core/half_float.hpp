#pragma once
// IEEE half and bfloat16 to and from float, rounding to nearest even: the same bits as
// torch's c10::Half and c10::BFloat16, so that a reduction folded here equals one folded by
// ATen (which computes in float and rounds once per operation).
#include <cstdint>
#include <cstring>

// Also compiled into commux's CUDA fold kernels (cuda/device_fold.cu), which round alike.
#ifdef __CUDACC__
#define COMMUX_HOST_DEVICE __host__ __device__
#else
#define COMMUX_HOST_DEVICE
#endif

namespace commux::core {

COMMUX_HOST_DEVICE inline std::uint32_t bitsOf(float f) noexcept {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

COMMUX_HOST_DEVICE inline float floatOf(std::uint32_t u) noexcept {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

COMMUX_HOST_DEVICE inline float halfToFloat(std::uint16_t h) noexcept {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exponent = (h >> 10) & 0x1fu;
  const std::uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0) {
    // Zero or subnormal: mantissa x 2^-24, exact in float.
    const float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return floatOf(bitsOf(magnitude) | sign);
  }
  if (exponent == 0x1f) return floatOf(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  return floatOf(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

COMMUX_HOST_DEVICE inline std::uint16_t floatToHalf(float f) noexcept {
  const std::uint32_t x = bitsOf(f);
  const auto sign = static_cast<std::uint16_t>((x >> 16) & 0x8000u);
  const std::uint32_t magnitude = x & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return sign | 0x7e00u;  // NaN
  if (magnitude >= 0x477ff000u) return sign | 0x7c00u;  // 65520 and beyond round to inf
  const auto roundShifted = [](std::uint32_t value, std::uint32_t shift) {
    std::uint32_t kept = value >> shift;
    const std::uint32_t rest = value & ((1u << shift) - 1);
    const std::uint32_t halfway = 1u << (shift - 1);
    if (rest > halfway || (rest == halfway && (kept & 1u))) ++kept;  // may carry: still right
    return kept;
  };
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 113) {
    // Below 2^-14: a subnormal half (or zero), mantissa x 2^-24.
    if (exponent < 102) return sign;  // below 2^-25: rounds to zero
    const std::uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
    return static_cast<std::uint16_t>(sign | roundShifted(mantissa, 126 - exponent));
  }
  const std::uint32_t rebased = ((exponent - 112) << 23) | (magnitude & 0x7fffffu);
  return static_cast<std::uint16_t>(sign | roundShifted(rebased, 13));
}

COMMUX_HOST_DEVICE inline float bfloat16ToFloat(std::uint16_t b) noexcept {
  return floatOf(static_cast<std::uint32_t>(b) << 16);
}

COMMUX_HOST_DEVICE inline std::uint16_t floatToBfloat16(float f) noexcept {
  const std::uint32_t x = bitsOf(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN, as c10::BFloat16 makes it
  const std::uint32_t roundingBias = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<std::uint16_t>((x + roundingBias) >> 16);
}

}  // namespace commux::core
