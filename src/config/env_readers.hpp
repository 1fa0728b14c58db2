#pragma once
// Reading one COMMUX_* variable, each kind its own way: an unset or empty variable leaves
// the value as it was (its default); anything else is checked, and a value that does not
// fit raises std::invalid_argument naming the variable. Used by the settings table only.
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace commux {
namespace env {

void readBool(const char* name, bool& out);
/// A duration in microseconds, at most a minute.
void readMicros(const char* name, std::chrono::microseconds& out);
/// A size or count in [lo, hi]; `unit` names what it counts in the error.
void readInRange(const char* name, std::size_t& out, unsigned long long lo, unsigned long long hi,
                 const char* unit);
void readInRange(const char* name, int& out, unsigned long long lo, unsigned long long hi,
                 const char* unit);
/// The limits of the tag's fields (wire/tag.hpp): tests lower them, nothing raises them.
void readBounded(const char* name, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi);
void readPowerOfTwo(const char* name, std::uint32_t& out, std::uint32_t lo, std::uint32_t hi);
void readText(const char* name, std::string& out);
/// Nanoseconds in [0, 1 s]; unset stays unset (chosen per host).
void readNanos(const char* name, std::optional<std::chrono::nanoseconds>& out);

/// One of a few named values, each with its word(s).
template <typename E>
using Choices = std::initializer_list<std::pair<const char*, E>>;
/// Raises naming the variable, the value and the words it takes.
[[noreturn]] void refuseChoice(const char* name, const char* raw,
                               const std::vector<std::string>& words);
const char* rawValue(const char* name);  // null when unset or empty

template <typename E>
void readChoice(const char* name, E& out, Choices<E> choices) {
  const char* raw = rawValue(name);
  if (raw == nullptr) return;
  std::vector<std::string> words;  // as the error lists them: not the 0/1 aliases
  for (const auto& [word, value] : choices) {
    if (std::string(word) == raw) {
      out = value;
      return;
    }
    if (std::string(word) != "0" && std::string(word) != "1") words.emplace_back(word);
  }
  refuseChoice(name, raw, words);
}

/// The first word naming `value` (what commux.config() shows).
template <typename E>
std::string nameOf(Choices<E> choices, E value) {
  for (const auto& [word, v] : choices) {
    if (v == value) return word;
  }
  return "?";
}

}  // namespace env
}  // namespace commux
