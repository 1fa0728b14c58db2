#pragma once
// What a rank brings to an operation: a view of memory it owns (or keeps alive), typed.
// The core never allocates or frees it: `owner` keeps it alive for as long as the operation
// (and any peer that reads it in place, through CMA) may touch it.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/dtype.hpp"

namespace commux::core {

/// Where a buffer's bytes live. The core moves both; only host memory is folded or shared
/// through a host's shared memory.
enum class MemoryType : std::uint8_t { Host, Cuda };

struct Buffer {
  void* data = nullptr;
  std::size_t count = 0;  // elements
  Dtype dtype = Dtype::UInt8;
  std::uint16_t elementSize = 0;  // 0: no buffer (a role that brings none)
  /// The front end's own type (torch: the ScalarType's number), or -1: what ranks compare
  /// for an Opaque type, and what an installed fold (core/fold.hpp) may fold by.
  std::int16_t frontEndType = -1;
  /// Keeps the memory alive while the operation (or a peer reading it in place) may touch
  /// it; null when the caller promises that itself (an operation that holds its tensors).
  std::shared_ptr<const void> owner;
  MemoryType memory = MemoryType::Host;
  int device = -1;  // the GPU's index for Cuda memory

  bool present() const noexcept { return elementSize != 0; }
  std::size_t bytes() const noexcept { return count * elementSize; }
  char* bytePointer() const noexcept { return static_cast<char*>(data); }
};

/// A Buffer of `count` elements of a core type.
inline Buffer bufferOf(void* data, std::size_t count, Dtype dtype,
                       std::shared_ptr<const void> owner = nullptr) {
  return Buffer{data, count,           dtype, static_cast<std::uint16_t>(sizeOf(dtype)),
                -1,   std::move(owner)};
}

/// Elements [offset, offset + count) of `buffer` (same type, memory and owner).
Buffer slice(const Buffer& buffer, std::size_t offset, std::size_t count);
/// `count` elements of `like`'s type in fresh host memory the Buffer owns, zeroed when
/// `zero`.
Buffer hostBufferLike(const Buffer& like, std::size_t count, bool zero = false);
/// A copy of host `buffer` in fresh host memory the copy owns.
Buffer hostCopyOf(const Buffer& buffer);

/// What ranks compare to agree that they pass the same type (32 bits, in shared memory):
/// the core's type, or for an Opaque one the front end's.
std::uint32_t typeCode(const Buffer& buffer) noexcept;
/// "float32"; "front-end type 23" for a type only a front end knows.
std::string typeCodeName(std::uint32_t code);

}  // namespace commux::core
