#pragma once
// Where the core's messages go. The default prints warnings to stderr and drops the rest
// (c10's default threshold, so a torch job's stderr reads as before); a front end installs
// its own sink (the torch adapter forwards to c10's LOG).
#include <string>

namespace commux::core {

enum class LogLevel { Info, Warning };

using LogSink = void (*)(LogLevel level, const std::string& message);
void setLogSink(LogSink sink) noexcept;  // nullptr restores the default

void log(LogLevel level, const std::string& message);

}  // namespace commux::core
