// Writing large pieces into shared-memory slots: the streaming copy moves every byte at any
// alignment and length, and the chooser follows the timings it is given.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "shm/slot_copy.hpp"

using commux::shm::CopyChooser;
using commux::shm::SlotCopy;
using commux::shm::SlotCopyMode;
using commux::shm::streamCopy;

TEST(SlotCopy, StreamCopyMovesEveryByteAtAnyAlignmentAndLength) {
  const std::uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);
  std::vector<unsigned char> src(1 << 18), dst(1 << 18);
  for (auto& b : src) b = static_cast<unsigned char>(rng());
  for (int trial = 0; trial < 400; ++trial) {
    const std::size_t from = rng() % 97, to = rng() % 97;
    std::size_t len = trial < 100 ? rng() % 200 : rng() % (src.size() - 200);
    std::fill(dst.begin(), dst.end(), 0xA5);
    streamCopy(dst.data() + to, src.data() + from, len);
    ASSERT_EQ(0, std::memcmp(dst.data() + to, src.data() + from, len))
        << "from " << from << " to " << to << " length " << len;
    for (std::size_t i = 0; i < to; ++i) ASSERT_EQ(dst[i], 0xA5) << "wrote before the start";
    for (std::size_t i = to + len; i < dst.size(); ++i) ASSERT_EQ(dst[i], 0xA5) << "wrote past the end";
  }
}

TEST(SlotCopy, EveryModeCopiesCorrectly) {
  std::vector<unsigned char> src(300000), dst(300000);
  for (std::size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (auto mode : {SlotCopyMode::Auto, SlotCopyMode::Cached, SlotCopyMode::Streaming}) {
    SlotCopy copy(mode);
    for (std::size_t len : {std::size_t{10}, std::size_t{70000}, src.size() - 1}) {
      for (int again = 0; again < 3; ++again) {  // auto tries both ways first
        std::fill(dst.begin(), dst.end(), 0);
        copy.copy(dst.data() + 1, src.data(), len);
        ASSERT_EQ(0, std::memcmp(dst.data() + 1, src.data(), len)) << len;
      }
    }
  }
}

TEST(SlotCopy, FixedModesNeverChange) {
  CopyChooser cached(SlotCopyMode::Cached), streaming(SlotCopyMode::Streaming);
  for (int i = 0; i < 1000; ++i) {
    EXPECT_FALSE(cached.streamNext());
    cached.record(false, 100.0);  // however slow
    EXPECT_TRUE(streaming.streamNext());
    streaming.record(true, 100.0);
  }
}

// Plays the chooser against a machine whose cached copies cost `cached` ns per byte and
// streaming ones `streaming`; returns how many of `copies` streamed.
int streamedOf(CopyChooser& c, int copies, double cached, double streaming) {
  int streamed = 0;
  for (int i = 0; i < copies; ++i) {
    const bool s = c.streamNext();
    streamed += s;
    c.record(s, s ? streaming : cached);
  }
  return streamed;
}

TEST(SlotCopy, AutoTakesTheFasterWayAndFollowsAChange) {
  CopyChooser c(SlotCopyMode::Auto);
  const int n = 10 * CopyChooser::kExploreEvery;
  // Cached copies cheap (the readers' caches give their lines up quickly): nearly all cached,
  // one in kExploreEvery streamed to look again.
  EXPECT_LE(streamedOf(c, n, 0.03, 0.05), n / CopyChooser::kExploreEvery + 2);
  // The machine turns (a stretch where taking lines from the readers is slow): streaming wins
  // from the next look on.
  EXPECT_GE(streamedOf(c, n, 0.40, 0.05), n - 2 * CopyChooser::kExploreEvery);
  // And back.
  EXPECT_LE(streamedOf(c, n, 0.03, 0.05), 2 * CopyChooser::kExploreEvery);
  EXPECT_GT(c.estimate(true), 0.0);
  EXPECT_GT(c.estimate(false), 0.0);
}

TEST(SlotCopy, StreamsOnlyWhenCachedCopiesAreFarSlower) {
  // The writer's own time of a streamed piece leaves out its readers' extra cost.
  CopyChooser c(SlotCopyMode::Auto);
  EXPECT_LE(streamedOf(c, 1000, 0.06, 0.04), 1000 / CopyChooser::kExploreEvery + 2);
}

TEST(SlotCopy, OneSlowCopyDoesNotFlipTheChoice) {
  CopyChooser c(SlotCopyMode::Auto);
  streamedOf(c, 50, 0.03, 0.05);  // settled on cached
  ASSERT_FALSE(c.streamNext());
  c.record(false, 0.5);  // preempted once
  EXPECT_FALSE(c.streamNext()) << "an average of the last few, not the last one";
}
