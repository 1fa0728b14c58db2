// core::log without a front end, and with a sink installed (as the torch adapter does).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "core/log.hpp"

namespace commux::core {
namespace {

std::vector<std::pair<LogLevel, std::string>> logged;

TEST(CoreLog, TheDefaultPrintsWarningsAndDropsInfo) {
  testing::internal::CaptureStderr();
  log(LogLevel::Info, "commux: an info line");
  log(LogLevel::Warning, "commux: a warning");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "commux: a warning\n");
}

TEST(CoreLog, AnInstalledSinkGetsEveryLevel) {
  setLogSink(
      [](LogLevel level, const std::string& message) { logged.emplace_back(level, message); });
  testing::internal::CaptureStderr();
  log(LogLevel::Info, "one");
  log(LogLevel::Warning, "two");
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  setLogSink(nullptr);
  ASSERT_EQ(logged.size(), 2u);
  EXPECT_EQ(logged[0], std::make_pair(LogLevel::Info, std::string("one")));
  EXPECT_EQ(logged[1], std::make_pair(LogLevel::Warning, std::string("two")));
}

}  // namespace
}  // namespace commux::core
