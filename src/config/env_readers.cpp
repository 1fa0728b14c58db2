#include "config/env_readers.hpp"

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>

namespace commux {
namespace env {
namespace {

// A wait longer than a minute is a mistake, not a tuning (and would overflow the clock's
// arithmetic further up).
constexpr unsigned long long kMaxMicros = 60'000'000;
constexpr unsigned long long kMaxNanos = 1'000'000'000;

unsigned long long readUnsigned(const char* name, const char* raw) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long value = std::strtoull(raw, &end, 10);
  if (errno != 0 || end == raw || *end != '\0' || raw[0] == '-' || raw[0] == '+' || raw[0] == ' ') {
    throw std::invalid_argument(std::string(name) + "='" + raw + "' is not a non-negative integer");
  }
  return value;
}

template <typename T>
void readRange(const char* name, T& out, unsigned long long lo, unsigned long long hi,
               const std::string& unit) {
  const char* raw = rawValue(name);
  if (raw == nullptr) return;
  const unsigned long long v = readUnsigned(name, raw);
  if (v > static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
    throw std::invalid_argument(std::string(name) + "='" + raw + "' is too large (at most " +
                                std::to_string(std::numeric_limits<T>::max()) + ")");
  }
  if (v < lo || v > hi) {
    throw std::invalid_argument(std::string(name) + "=" + raw + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]" + unit);
  }
  out = static_cast<T>(v);
}

}  // namespace

const char* rawValue(const char* name) {
  const char* raw = std::getenv(name);
  return raw == nullptr || *raw == '\0' ? nullptr : raw;
}

void readBool(const char* name, bool& out) {
  const char* raw = rawValue(name);
  if (raw == nullptr) return;
  const std::string v(raw);
  if (v == "1" || v == "true" || v == "on" || v == "yes") {
    out = true;
  } else if (v == "0" || v == "false" || v == "off" || v == "no") {
    out = false;
  } else {
    throw std::invalid_argument(std::string(name) + "='" + raw +
                                "' is not a boolean (use 1, true, on or yes; 0, false, off or no)");
  }
}

void readMicros(const char* name, std::chrono::microseconds& out) {
  long long us = out.count();
  readRange(name, us, 0, kMaxMicros, " microseconds");
  out = std::chrono::microseconds(us);
}

void readInRange(const char* name, std::size_t& out, unsigned long long lo, unsigned long long hi,
                 const char* unit) {
  readRange(name, out, lo, hi, std::string(" ") + unit);
}

void readInRange(const char* name, int& out, unsigned long long lo, unsigned long long hi,
                 const char* unit) {
  readRange(name, out, lo, hi, std::string(" ") + unit);
}

void readBounded(const char* name, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi) {
  const char* raw = rawValue(name);
  if (raw == nullptr) return;
  const unsigned long long v = readUnsigned(name, raw);
  if (v < lo || v > hi) {
    throw std::invalid_argument(std::string(name) + "=" + raw + " is outside [" +
                                std::to_string(lo) + ", " + std::to_string(hi) + "]" +
                                (v > hi ? ": the tag's field holds no more" : ""));
  }
  out = static_cast<std::uint32_t>(v);
}

void readPowerOfTwo(const char* name, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi) {
  readBounded(name, out, lo, hi);
  if ((out & (out - 1)) != 0) {
    throw std::invalid_argument(std::string(name) + "=" + std::to_string(out) +
                                " is not a power of two");
  }
}

void readText(const char* name, std::string& out) {
  if (const char* raw = std::getenv(name); raw != nullptr) out = raw;
}

void readNanos(const char* name, std::optional<std::chrono::nanoseconds>& out) {
  if (rawValue(name) == nullptr) return;
  long long ns = 0;
  readRange(name, ns, 0, kMaxNanos, " nanoseconds");
  out = std::chrono::nanoseconds(ns);
}

void refuseChoice(const char* name, const char* raw, const std::vector<std::string>& words) {
  std::string listed;
  for (std::size_t i = 0; i < words.size(); ++i) {
    listed += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  }
  throw std::invalid_argument(std::string(name) + "='" + raw + "' is not " + listed);
}

}  // namespace env
}  // namespace commux
