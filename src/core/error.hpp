#pragma once
// commux's own error: the core throws it (or what a front end's factory makes of it), so the
// engine and the shared-memory channel need no torch. Its kind decides which exception a
// front end raises: torch's adapter makes InvalidArgument a ValueError and Backend a
// DistBackendError, a C API returns one code per kind.
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>

namespace commux::core {

enum class ErrorKind {
  InvalidArgument,  // the caller's arguments (sizes, dtypes, ranks) are wrong; nothing moved
  Runtime,          // the call cannot proceed in this state (a closed window, say)
  Backend,          // communication failed: a peer died, timed out, disagreed
  Network,          // the key-value store cannot be reached
  Store,            // the key-value store answered, but not in time or not as expected
  Unsupported,      // not implemented for these arguments
  Internal,         // an invariant of commux itself broke: a bug
};

const char* nameOf(ErrorKind kind) noexcept;

/// Where an error was raised, as c10's SourceLocation records it.
struct SourceSite {
  const char* function;
  const char* file;
  int line;
};

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, const std::string& message, SourceSite site)
      : std::runtime_error(message), kind_(kind), site_(site) {}
  ErrorKind kind() const noexcept { return kind_; }
  const SourceSite& site() const noexcept { return site_; }

 private:
  ErrorKind kind_;
  SourceSite site_;
};

/// Turns a core error into the exception a front end wants thrown; the torch adapter
/// installs one that builds c10's types, so Python sees the same exceptions as before the
/// core existed. Without a factory the core::Error itself is thrown.
using ErrorFactory = std::exception_ptr (*)(const Error&);
void setErrorFactory(ErrorFactory factory) noexcept;

std::exception_ptr makeError(ErrorKind kind, const std::string& message, SourceSite site);

/// What any caught exception was, in the core's words: the way back from a front end's
/// exception types (a thrown core error may be a c10::ValueError by the time it is caught).
struct ErrorReading {
  ErrorKind kind;
  std::string message;  // without a backtrace
};
/// Reads a front end's own exception types; false for an exception it does not know.
using ErrorReader = bool (*)(const std::exception_ptr& error, ErrorReading& reading);
void setErrorReader(ErrorReader reader) noexcept;
/// A core::Error's kind, else what the installed reader says, else Runtime with what() of a
/// std::exception. `error` must not be null.
ErrorReading readError(const std::exception_ptr& error);
[[noreturn]] void fail(ErrorKind kind, const std::string& message, SourceSite site);

/// The pieces of a message, streamed: what TORCH_CHECK's c10::str did.
template <typename... Pieces>
std::string concat(const Pieces&... pieces) {
  std::ostringstream out;
  (out << ... << pieces);
  return out.str();
}

}  // namespace commux::core

#define COMMUX_SITE \
  ::commux::core::SourceSite { __func__, __FILE__, __LINE__ }
/// Throws the error of this kind (an ErrorKind enumerator's name), its message the pieces.
#define COMMUX_FAIL(kind, ...)                                                               \
  ::commux::core::fail(::commux::core::ErrorKind::kind, ::commux::core::concat(__VA_ARGS__), \
                       COMMUX_SITE)
/// The message is only built when the condition is false.
#define COMMUX_CHECK(condition, kind, ...)   \
  do {                                       \
    if (__builtin_expect(!(condition), 0)) { \
      COMMUX_FAIL(kind, __VA_ARGS__);        \
    }                                        \
  } while (false)
/// An invariant of commux's own code; a failure is a bug, reported with where it is.
#define COMMUX_ASSERT(condition, ...)                                                          \
  COMMUX_CHECK(condition, Internal, "commux: internal error (please report it): ", #condition, \
               " failed at ", __FILE__, ":", __LINE__, ". ", ##__VA_ARGS__)
