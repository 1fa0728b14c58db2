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
    for (std::size_t i = to + len; i < dst.size(); ++i)
      ASSERT_EQ(dst[i], 0xA5) << "wrote past the end";
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

// At most how many of `copies` belong to tries of the way not chosen (a first one included).
int tries(int copies) {
  return static_cast<int>(CopyChooser::kBurst) *
         (2 + copies / static_cast<int>(CopyChooser::kFirstInterval));
}

// The first copies after a switch pay for the state the other way left: a machine where a
// cached write right after streaming ones costs 10x, and 0.03 from the second on.
TEST(SlotCopy, ATryIsJudgedByItsBestCopy) {
  CopyChooser c(SlotCopyMode::Auto);
  int streamed = 0, sinceStream = 99;
  for (int i = 0; i < 4000; ++i) {
    const bool s = c.streamNext();
    streamed += s;
    sinceStream = s ? 0 : sinceStream + 1;
    c.record(s, s ? 0.05 : (sinceStream == 1 ? 0.50 : 0.03));
  }
  EXPECT_LE(streamed, tries(4000)) << "locked into streaming by the first cached copy of a try";
}

TEST(SlotCopy, AutoTakesTheFasterWayAndFollowsAChange) {
  CopyChooser c(SlotCopyMode::Auto);
  const int n = 10 * CopyChooser::kFirstInterval;
  // Cached copies cheap (the readers' caches give their lines up quickly): nearly all cached,
  // a burst of streaming now and then, ever more rarely, to look again.
  EXPECT_LE(streamedOf(c, n, 0.03, 0.05), tries(n));
  // The machine turns (a stretch where taking lines from the readers is slow): streaming wins
  // within a few copies.
  EXPECT_GE(streamedOf(c, n, 0.40, 0.05), n - tries(n) - 8);
  // And back, at the next try: tries of the way not chosen grow rarer while they confirm
  // the choice, up to one per kLastInterval copies.
  const int m = 3 * CopyChooser::kLastInterval;
  EXPECT_LE(streamedOf(c, m, 0.03, 0.05), CopyChooser::kLastInterval + tries(m));
  EXPECT_LE(streamedOf(c, m, 0.03, 0.05), tries(m)) << "stays cached once back";
  EXPECT_GT(c.estimate(true), 0.0);
  EXPECT_GT(c.estimate(false), 0.0);
}

TEST(SlotCopy, StreamsOnlyWhenCachedCopiesAreFarSlower) {
  // The writer's own time of a streamed piece leaves out its readers' extra cost.
  CopyChooser c(SlotCopyMode::Auto);
  EXPECT_LE(streamedOf(c, 1000, 0.10, 0.04), tries(1000));
}

TEST(SlotCopy, OneSlowCopyDoesNotFlipTheChoice) {
  CopyChooser c(SlotCopyMode::Auto);
  streamedOf(c, 50, 0.03, 0.05);  // settled on cached
  ASSERT_FALSE(c.streamNext());
  c.record(false, 0.5);  // preempted once
  EXPECT_FALSE(c.streamNext()) << "an average of the last few, not the last one";
}
