// core::Error without any front end: what the core throws when no factory is installed, and
// that an installed factory decides the exception type (as the torch adapter's does).
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "core/error.hpp"

namespace commux::core {
namespace {

int evaluated = 0;
int countEvaluation() { return ++evaluated; }

TEST(CoreError, WithoutAFactoryTheCoreErrorIsThrownWithItsKindAndSite) {
  try {
    COMMUX_FAIL(InvalidArgument, "commux: ", 3, " elements, expected ", 4.5);
    FAIL() << "nothing thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::InvalidArgument);
    EXPECT_STREQ(e.what(), "commux: 3 elements, expected 4.5");
    EXPECT_NE(std::string(e.site().file).find("test_error.cpp"), std::string::npos);
    EXPECT_GT(e.site().line, 0);
  }
}

TEST(CoreError, ACheckThatHoldsBuildsNoMessage) {
  evaluated = 0;
  COMMUX_CHECK(1 + 1 == 2, Runtime, "never built ", countEvaluation());
  EXPECT_EQ(evaluated, 0);
  EXPECT_THROW(COMMUX_CHECK(1 + 1 == 3, Runtime, "built ", countEvaluation()), Error);
  EXPECT_EQ(evaluated, 1);
}

TEST(CoreError, EveryKindIsCaughtAsAStandardException) {
  for (const ErrorKind kind :
       {ErrorKind::InvalidArgument, ErrorKind::Runtime, ErrorKind::Backend, ErrorKind::Network,
        ErrorKind::Store, ErrorKind::Unsupported, ErrorKind::Internal}) {
    try {
      fail(kind, "message", COMMUX_SITE);
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "message") << nameOf(kind);
      EXPECT_EQ(dynamic_cast<const Error&>(e).kind(), kind);
    }
  }
}

TEST(CoreError, AnAssertionNamesTheConditionAndWhereItIs) {
  const int ranks = 2;
  try {
    COMMUX_ASSERT(ranks == 3, "while counting");
    FAIL() << "nothing thrown";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.kind(), ErrorKind::Internal);
    EXPECT_NE(what.find("ranks == 3"), std::string::npos) << what;
    EXPECT_NE(what.find("test_error.cpp:"), std::string::npos) << what;
    EXPECT_NE(what.find("while counting"), std::string::npos) << what;
  }
  EXPECT_THROW(COMMUX_ASSERT(ranks == 3), Error);
}

struct FrontEndError : std::logic_error {
  using std::logic_error::logic_error;
};

TEST(CoreError, AnInstalledFactoryDecidesWhatIsThrown) {
  setErrorFactory([](const Error& e) {
    return std::make_exception_ptr(FrontEndError(std::string(nameOf(e.kind())) + ": " + e.what()));
  });
  try {
    COMMUX_FAIL(Backend, "rank ", 1, " died");
    FAIL() << "nothing thrown";
  } catch (const FrontEndError& e) {
    EXPECT_STREQ(e.what(), "backend: rank 1 died");
  }
  setErrorFactory(nullptr);
  EXPECT_THROW(COMMUX_FAIL(Backend, "again"), Error);
}

TEST(CoreError, ReadingAnErrorGivesItsKindAndMessage) {
  const auto reading = readError(makeError(ErrorKind::Store, "commux: no answer", COMMUX_SITE));
  EXPECT_EQ(reading.kind, ErrorKind::Store);
  EXPECT_EQ(reading.message, "commux: no answer");
  const auto other = readError(std::make_exception_ptr(std::out_of_range("index 9")));
  EXPECT_EQ(other.kind, ErrorKind::Runtime);
  EXPECT_EQ(other.message, "index 9");
  EXPECT_EQ(readError(std::make_exception_ptr(42)).message, "an unknown error");
}

TEST(CoreError, AnInstalledReaderReadsAFrontEndsOwnTypes) {
  setErrorReader([](const std::exception_ptr& error, ErrorReading& reading) {
    try {
      std::rethrow_exception(error);
    } catch (const FrontEndError& e) {
      reading = {ErrorKind::InvalidArgument, std::string("front end: ") + e.what()};
      return true;
    } catch (...) {
      return false;
    }
  });
  const auto known = readError(std::make_exception_ptr(FrontEndError("bad size")));
  EXPECT_EQ(known.kind, ErrorKind::InvalidArgument);
  EXPECT_EQ(known.message, "front end: bad size");
  const auto unknown = readError(std::make_exception_ptr(std::runtime_error("other")));
  EXPECT_EQ(unknown.kind, ErrorKind::Runtime);
  EXPECT_EQ(unknown.message, "other");
  setErrorReader(nullptr);
}

}  // namespace
}  // namespace commux::core
