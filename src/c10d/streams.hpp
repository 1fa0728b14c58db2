#pragma once
// torch's CUDA streams as the core carries them (core/stream.hpp), and back: the id is
// c10's StreamId, so the round trip gives the same stream.
#include <c10/core/Stream.h>

#include <optional>

#include "core/stream.hpp"

namespace commux {

inline core::Stream toCore(const c10::Stream& stream) {
  const auto packed = stream.pack3();
  return core::Stream{packed.device_index, packed.stream_id};
}

inline c10::Stream toC10(const core::Stream& stream) {
  return c10::Stream::unpack3(stream.id, static_cast<c10::DeviceIndex>(stream.device),
                              c10::DeviceType::CUDA);
}

inline std::optional<c10::Stream> toC10(const std::optional<core::Stream>& stream) {
  if (!stream) return std::nullopt;
  return toC10(*stream);
}

}  // namespace commux
