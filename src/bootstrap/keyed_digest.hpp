#pragma once
// A keyed digest for the bootstrap store's greeting: each side proves it holds the job's
// secret without sending it, over nonces the other side chose, so a store of another job
// (or a process that merely listens on the port) cannot pass for this job's, and a recorded
// greeting cannot be replayed. SipHash-2-4 (Aumasson and Bernstein), a keyed function made
// for short inputs; two runs with distinct domain bytes give 128 bits.
#include <array>
#include <cstddef>
#include <cstdint>

namespace commux::bootstrap {

using DigestKey = std::array<std::uint8_t, 16>;
using Digest = std::array<std::uint8_t, 16>;

/// SipHash-2-4 of [data, data + size) under `key`.
std::uint64_t sipHash24(const DigestKey& key, const void* data, std::size_t size) noexcept;
/// 128 bits: SipHash-2-4 of the input behind the domain bytes 1 and 2.
Digest keyedDigest(const DigestKey& key, const void* data, std::size_t size);
/// 16 random bytes from the system (nonces, secrets, the server's instance).
std::array<std::uint8_t, 16> randomBytes16();
/// Compares in time that does not depend on where the two differ.
bool sameDigest(const Digest& a, const Digest& b) noexcept;

}  // namespace commux::bootstrap
