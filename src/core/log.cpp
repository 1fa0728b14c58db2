#include "core/log.hpp"

#include <atomic>
#include <cstdio>

namespace commux::core {
namespace {

void toStderr(LogLevel level, const std::string& message) {
  if (level == LogLevel::Warning) std::fprintf(stderr, "%s\n", message.c_str());
}

std::atomic<LogSink> installedSink{nullptr};

}  // namespace

void setLogSink(LogSink sink) noexcept { installedSink.store(sink, std::memory_order_release); }

void log(LogLevel level, const std::string& message) {
  const LogSink sink = installedSink.load(std::memory_order_acquire);
  (sink ? sink : toStderr)(level, message);
}

}  // namespace commux::core
