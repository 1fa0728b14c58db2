#pragma once
// The seed of a seeded test: COMMUX_TEST_SEED when given (to replay a failure), else a fresh
// one; printed either way, so a failing run says how to replay it.
#include <cstdio>
#include <cstdlib>
#include <random>

namespace commux::testing {

inline unsigned testSeed() {
  const char* given = std::getenv("COMMUX_TEST_SEED");
  const unsigned seed = given ? static_cast<unsigned>(std::strtoul(given, nullptr, 10))
                              : static_cast<unsigned>(std::random_device{}());
  std::printf("COMMUX_TEST_SEED=%u\n", seed);
  return seed;
}

}  // namespace commux::testing
