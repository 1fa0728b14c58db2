#include "core/error.hpp"

#include <atomic>

namespace commux::core {
namespace {
std::atomic<ErrorFactory> installedFactory{nullptr};
std::atomic<ErrorReader> installedReader{nullptr};
}  // namespace

const char* nameOf(ErrorKind kind) noexcept {
  switch (kind) {
    case ErrorKind::InvalidArgument:
      return "invalid argument";
    case ErrorKind::Runtime:
      return "runtime";
    case ErrorKind::Backend:
      return "backend";
    case ErrorKind::Network:
      return "network";
    case ErrorKind::Store:
      return "store";
    case ErrorKind::Unsupported:
      return "unsupported";
    case ErrorKind::Internal:
      return "internal";
  }
  return "unknown";
}

void setErrorFactory(ErrorFactory factory) noexcept {
  installedFactory.store(factory, std::memory_order_release);
}

std::exception_ptr makeError(ErrorKind kind, const std::string& message, SourceSite site) {
  Error error(kind, message, site);
  if (const ErrorFactory factory = installedFactory.load(std::memory_order_acquire)) {
    return factory(error);
  }
  return std::make_exception_ptr(std::move(error));
}

void setErrorReader(ErrorReader reader) noexcept {
  installedReader.store(reader, std::memory_order_release);
}

ErrorReading readError(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  } catch (...) {
  }
  ErrorReading reading{ErrorKind::Runtime, ""};
  if (const ErrorReader reader = installedReader.load(std::memory_order_acquire)) {
    if (reader(error, reading)) return reading;
  }
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    reading.message = e.what();
  } catch (...) {
    reading.message = "an unknown error";
  }
  return reading;
}

void fail(ErrorKind kind, const std::string& message, SourceSite site) {
  std::rethrow_exception(makeError(kind, message, site));
}

}  // namespace commux::core
