#include "bootstrap/keyed_digest.hpp"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace commux::bootstrap {
namespace {

constexpr std::uint64_t rotl(std::uint64_t x, int b) noexcept { return (x << b) | (x >> (64 - b)); }

std::uint64_t le64(const std::uint8_t* p) noexcept {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

struct SipState {
  std::uint64_t v0, v1, v2, v3;
  void round() noexcept {
    v0 += v1;
    v1 = rotl(v1, 13);
    v1 ^= v0;
    v0 = rotl(v0, 32);
    v2 += v3;
    v3 = rotl(v3, 16);
    v3 ^= v2;
    v0 += v3;
    v3 = rotl(v3, 21);
    v3 ^= v0;
    v2 += v1;
    v1 = rotl(v1, 17);
    v1 ^= v2;
    v2 = rotl(v2, 32);
  }
  void absorb(std::uint64_t m) noexcept {
    v3 ^= m;
    round();
    round();
    v0 ^= m;
  }
};

}  // namespace

std::uint64_t sipHash24(const DigestKey& key, const void* data, std::size_t size) noexcept {
  const std::uint64_t k0 = le64(key.data()), k1 = le64(key.data() + 8);
  SipState s{0x736f6d6570736575ull ^ k0, 0x646f72616e646f6dull ^ k1, 0x6c7967656e657261ull ^ k0,
             0x7465646279746573ull ^ k1};
  const auto* p = static_cast<const std::uint8_t*>(data);
  const std::size_t whole = size - size % 8;
  for (std::size_t i = 0; i < whole; i += 8) s.absorb(le64(p + i));
  std::uint64_t last = static_cast<std::uint64_t>(size & 0xff) << 56;
  for (std::size_t i = 0; i < size % 8; ++i) last |= static_cast<std::uint64_t>(p[whole + i]) << (8 * i);
  s.absorb(last);
  s.v2 ^= 0xff;
  for (int i = 0; i < 4; ++i) s.round();
  return s.v0 ^ s.v1 ^ s.v2 ^ s.v3;
}

Digest keyedDigest(const DigestKey& key, const void* data, std::size_t size) {
  std::vector<std::uint8_t> input(size + 1);
  if (size) std::memcpy(input.data() + 1, data, size);
  Digest out{};
  for (std::uint8_t domain = 1; domain <= 2; ++domain) {
    input[0] = domain;
    const std::uint64_t h = sipHash24(key, input.data(), input.size());
    std::memcpy(out.data() + 8 * (domain - 1), &h, 8);
  }
  return out;
}

std::array<std::uint8_t, 16> randomBytes16() {
  std::array<std::uint8_t, 16> out{};
  std::size_t got = 0;
  while (got < out.size()) {
    const ssize_t n = ::getrandom(out.data() + got, out.size() - got, 0);
    COMMUX_CHECK(n > 0 || errno == EINTR, Runtime, "commux: getrandom failed: ",
                 std::strerror(errno));
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  return out;
}

bool sameDigest(const Digest& a, const Digest& b) noexcept {
  std::uint8_t diff = 0;
  for (std::size_t i = 0; i < a.size(); ++i) diff |= static_cast<std::uint8_t>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace commux::bootstrap
