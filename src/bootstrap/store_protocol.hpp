#pragma once
// The bootstrap store's wire format, shared by its server and its clients. Little-endian
// integers. A connection opens with a greeting in which each side proves it holds the job's
// secret without sending it (keyed_digest.hpp):
//   client: magic, version, client nonce (16)
//   server: magic, version, server nonce (16), instance (16),
//           proof = digest(secret, 'S' | client nonce | server nonce | instance)
//   client: proof = digest(secret, 'C' | server nonce | client nonce)
//   server: Ok (one byte)
// then carries one request at a time, each answered before the next is read. Every length
// is checked against a limit before anything is allocated: a peer's bytes are never trusted.
#include <chrono>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

namespace commux::bootstrap::protocol {

inline constexpr std::uint32_t kMagic = 0x584d4d43;  // "CMMX"
inline constexpr std::uint16_t kVersion = 2;
inline constexpr std::size_t kSecretBytes = 16;
inline constexpr std::size_t kNonceBytes = 16;
inline constexpr std::size_t kHelloBytes = 4 + 2 + kNonceBytes;
inline constexpr std::size_t kChallengeBytes = 4 + 2 + 2 * kNonceBytes + 16;  // nonce, instance, proof

inline constexpr std::uint32_t kMaxKeyBytes = 4096;
inline constexpr std::uint32_t kMaxValueBytes = 64u << 20;
inline constexpr std::uint32_t kMaxKeys = 1u << 16;
/// A request's bytes at most (a Get of many long keys, a Set of the largest value).
inline constexpr std::size_t kMaxRequestBytes = std::size_t{kMaxValueBytes} + 2 * kMaxKeyBytes + 64;
/// A reply's bytes at most: a Get of more is refused (Failed) instead of built.
inline constexpr std::size_t kMaxReplyBytes = std::size_t{kMaxValueBytes} + 64 * 1024;
/// What one server holds at most, values and keys together (counters included).
inline constexpr std::size_t kMaxStoredBytes = std::size_t{1} << 30;
/// A Failed reply's text, and a joining process's description, at most.
inline constexpr std::uint32_t kMaxTextBytes = 1024;
/// Connections that have not finished their greeting at once, at most: a new one past
/// this drops the oldest (a flood of idle connections cannot keep a job's ranks out).
inline constexpr std::size_t kMaxUngreeted = 64;
/// How long a connection may take to finish its greeting (a job's ranks take a few ms).
inline constexpr std::chrono::seconds kGreetingDeadline{10};

enum class Command : std::uint8_t { Set = 1, Get = 2, Check = 3, Add = 4, Join = 5 };
/// Failed carries a text (u32 length, bytes): why the server refused the request, or why it
/// refuses everything (two jobs met on it). Join's Ok carries the generation (i64).
enum class Reply : std::uint8_t { Ok = 0, TimedOut = 1, Refused = 2, Failed = 3 };

/// Appends little-endian integers and length-prefixed byte strings.
class Writer {
 public:
  std::vector<std::uint8_t>& bytes() noexcept { return bytes_; }
  Writer& u8(std::uint8_t v) {
    bytes_.push_back(v);
    return *this;
  }
  Writer& u16(std::uint16_t v) { return raw(&v, sizeof(v)); }
  Writer& u32(std::uint32_t v) { return raw(&v, sizeof(v)); }
  Writer& i64(std::int64_t v) { return raw(&v, sizeof(v)); }
  Writer& raw(const void* data, std::size_t size) {
    auto* p = static_cast<const std::uint8_t*>(data);
    bytes_.insert(bytes_.end(), p, p + size);
    return *this;
  }
  Writer& str(const void* data, std::size_t size) {
    u32(static_cast<std::uint32_t>(size));
    return raw(data, size);
  }
  Writer& str(const std::string& s) { return str(s.data(), s.size()); }
  Writer& str(const std::vector<std::uint8_t>& s) { return str(s.data(), s.size()); }

 private:
  std::vector<std::uint8_t> bytes_;
};

/// Reads what a Writer wrote from bytes that may end early: each read returns false when
/// the bytes end before it (wait for more) and `bad()` turns true when a length breaks its
/// limit (drop the connection).
class Reader {
 public:
  Reader(const std::uint8_t* data, std::size_t size) : p_(data), end_(data + size) {}
  bool u8(std::uint8_t& v) { return raw(&v, 1); }
  bool u16(std::uint16_t& v) { return raw(&v, sizeof(v)); }
  bool u32(std::uint32_t& v) { return raw(&v, sizeof(v)); }
  bool i64(std::int64_t& v) { return raw(&v, sizeof(v)); }
  bool raw(void* out, std::size_t size) {
    if (static_cast<std::size_t>(end_ - p_) < size) return false;
    std::memcpy(out, p_, size);
    p_ += size;
    return true;
  }
  template <typename Bytes>
  bool str(Bytes& out, std::uint32_t limit) {
    std::uint32_t size = 0;
    if (!u32(size)) return false;
    if (size > limit) {
      bad_ = true;
      return false;
    }
    if (static_cast<std::size_t>(end_ - p_) < size) return false;
    out.assign(p_, p_ + size);
    p_ += size;
    return true;
  }
  bool bad() const noexcept { return bad_; }
  void markBad() noexcept { bad_ = true; }
  std::size_t consumed(const std::uint8_t* start) const noexcept {
    return static_cast<std::size_t>(p_ - start);
  }

 private:
  const std::uint8_t* p_;
  const std::uint8_t* end_;
  bool bad_ = false;
};

}  // namespace commux::bootstrap::protocol
