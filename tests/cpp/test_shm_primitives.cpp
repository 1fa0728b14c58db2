// Shared-memory segment and cross-process bell, exercised across fork().
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

#include "shm/bell.hpp"
#include "shm/segment.hpp"

using commux::shm::Bell;
using commux::shm::BellWords;
using commux::shm::Segment;
using namespace std::chrono_literals;

namespace {

// Runs `child` in a forked process; returns its exit status (or -1 if it did not exit).
template <typename F>
int inChild(F child) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    alarm(20);  // a hang fails the test instead of blocking it
    ::_exit(child());
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST(ShmSegment, OpenedMappingSharesTheCreatorsBytes) {
  auto created = Segment::create(1 << 16);
  ASSERT_EQ(created->size(), 1u << 16);
  EXPECT_EQ(created->data()[12345], 0) << "a fresh segment is zero-filled";
  auto opened = Segment::open(created->name(), 1 << 16);
  std::strcpy(created->data() + 100, "halo");
  EXPECT_STREQ(opened->data() + 100, "halo");
  EXPECT_EQ(inChild([&] { return std::strcmp(opened->data() + 100, "halo") == 0 ? 0 : 1; }), 0);
}

TEST(ShmSegment, UnlinkedNameCannotBeOpenedButMappingLives) {
  auto created = Segment::create(4096);
  const std::string name = created->name();
  created->unlink();
  created->data()[0] = 7;
  EXPECT_THROW(Segment::open(name, 4096), std::runtime_error);
  EXPECT_EQ(created->data()[0], 7);
}

TEST(ShmSegment, OpenRejectsASegmentSmallerThanAnnounced) {
  auto created = Segment::create(4096);
  EXPECT_THROW(Segment::open(created->name(), 8192), std::runtime_error);
}

// A name from the store may point at any file under /dev/shm: only a segment of this
// user's, made as commux makes them (0600, the announced size), is mapped.
TEST(ShmSegment, OpenRejectsAnyOtherShapeOfFile) {
  auto created = Segment::create(8192);
  const auto message = [&](std::size_t bytes) {
    try {
      Segment::open(created->name(), bytes);
    } catch (const std::runtime_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message(4096).find("not the 4096 its creator announced"), std::string::npos)
      << message(4096);
  const std::string path = "/dev/shm" + created->name();
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  EXPECT_NE(message(8192).find("mode 0644, not 0600"), std::string::npos) << message(8192);
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  EXPECT_EQ(message(8192), "no error");
}

// A nameless segment is reached through its creator's descriptor and never appears in
// /dev/shm; once withdrawn, nobody else can open it, while the mappings live on.
// Names from another process (the store, a neighbour's greeting) are checked before they
// are opened: only the two shapes create() makes, and with a pid only that process's.
TEST(ShmSegment, OnlyNamesAsCreateMakesThemAreWellFormed) {
  const auto named = Segment::create(4096);
  const auto nameless = Segment::create(4096, /*nameless=*/true);
  EXPECT_TRUE(Segment::wellFormedName(named->name()));
  EXPECT_TRUE(Segment::wellFormedName(nameless->name()));
  EXPECT_TRUE(Segment::wellFormedName(nameless->name(), ::getpid()));
  EXPECT_FALSE(Segment::wellFormedName(named->name(), ::getpid()));
  EXPECT_FALSE(Segment::wellFormedName(nameless->name(), ::getpid() + 1));
  EXPECT_TRUE(Segment::wellFormedName("/proc/12/fd/3", 12));
  for (const char* bad : {"", "/commux-", "/commux-xyz", "/etc/passwd", "/proc/12/fd/",
                          "/proc//fd/3", "/proc/12/fd/3x", "/proc/12/maps", "/proc/1a/fd/3",
                          "/proc/12/fd/3/../4", "/dev/shm/commux-ab", "/proc/self/fd/3"}) {
    EXPECT_FALSE(Segment::wellFormedName(bad)) << bad;
  }
  EXPECT_FALSE(Segment::wellFormedName("/proc/123/fd/3", 12));
  EXPECT_FALSE(Segment::wellFormedName("/proc/12/fd/3", 123));
  EXPECT_FALSE(Segment::wellFormedName("/commux-" + std::string(130, 'a')));
}

TEST(ShmSegment, NamelessSegmentIsOpenedThroughTheCreatorsDescriptor) {
  auto created = Segment::create(8192, true);
  EXPECT_EQ(created->name().rfind("/proc/", 0), 0u) << created->name();
  std::memcpy(created->data(), "nameless", 9);
  const std::string name = created->name();
  EXPECT_EQ(inChild([&] {
              auto opened = Segment::open(name, 8192);
              return std::strcmp(opened->data(), "nameless") == 0 ? 0 : 1;
            }),
            0);
  created->unlink();
  EXPECT_THROW(Segment::open(name, 8192), std::runtime_error);
  EXPECT_STREQ(created->data(), "nameless");
}

TEST(ShmBell, RingFromAnotherProcessWakesAWaiter) {
  auto seg = Segment::create(4096);
  auto* words = reinterpret_cast<BellWords*>(seg->data());
  auto* flag = reinterpret_cast<std::uint32_t*>(seg->data() + 64);
  const pid_t pid = ::fork();
  if (pid == 0) {
    std::this_thread::sleep_for(50ms);
    __atomic_store_n(flag, 1, __ATOMIC_SEQ_CST);
    Bell(words, 0us).ring();
    ::_exit(0);
  }
  Bell bell(words, 0us);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_TRUE(bell.waitFor([&] { return __atomic_load_n(flag, __ATOMIC_ACQUIRE) == 1; },
                           [] { return false; }));
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_GE(words->rings, 1u);
  EXPECT_EQ(words->sleepers, 0u) << "a waiter that woke must uncount itself";
}

TEST(ShmBell, InterruptEndsAWaitThatWouldNeverFinish) {
  auto seg = Segment::create(4096);
  Bell bell(reinterpret_cast<BellWords*>(seg->data()), 10us);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(bell.waitFor([] { return false; },
                            [&] { return std::chrono::steady_clock::now() - start > 100ms; }));
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, 2s) << "the sleeper re-checks its interrupt every few ms";
}

// What the wait was for came between its last look and the interruption's cause (the
// neighbour read this rank's message, then left): the wait succeeds. Checked while spinning
// (the first interruption) and once asleep (the spin ends at its first look at the clock
// with spin 0, so the second comes from the sleeper).
TEST(ShmBell, AnInterruptionAfterWhatItWaitedForCameIsNone) {
  auto seg = Segment::create(4096);
  for (const auto& [spin, quietLooks] : {std::pair{std::chrono::microseconds(100000), 0},
                                         std::pair{std::chrono::microseconds(0), 1}}) {
    Bell bell(reinterpret_cast<BellWords*>(seg->data()), spin);
    bool came = false;
    int looks = 0;
    EXPECT_TRUE(bell.waitFor([&] { return came; },
                             [&] {
                               if (looks++ < quietLooks) return false;
                               came = true;  // it came, and then the peer left
                               return true;
                             }))
        << "spin " << spin.count() << " us";
    EXPECT_EQ(looks, quietLooks + 1);
  }
  // A condition that raises after the interruption (its peer is gone) leaves the
  // interruption to report.
  Bell bell(reinterpret_cast<BellWords*>(seg->data()), 0us);
  bool gone = false;
  EXPECT_FALSE(bell.waitFor(
      [&] {
        if (gone) throw std::runtime_error("process_vm_readv: No such process");
        return false;
      },
      [&] { return gone = true; }));
}

// The gate polls while the thread's involuntary context switches barely grow, stops after a
// look that finds them growing, and polls again once they stop.
TEST(ShmPollGate, PollsOnlyWhileTheCoreIsOwn) {
  using commux::shm::PollGate;
  long switches = 0;
  PollGate gate([&] { return switches; });
  const auto waits = [&](unsigned n) {
    unsigned opened = 0;
    for (unsigned i = 0; i < n; ++i) opened += gate.open() ? 1u : 0u;
    return opened;
  };
  EXPECT_EQ(waits(2 * PollGate::kEvery), 2 * PollGate::kEvery) << "a quiet core: poll";
  switches += PollGate::kMaxSwitches;  // at the limit: still quiet enough
  EXPECT_EQ(waits(PollGate::kEvery), PollGate::kEvery);
  switches += PollGate::kMaxSwitches + 1;  // others want the core
  EXPECT_EQ(waits(PollGate::kEvery), PollGate::kEvery - 1) << "closes at the next look";
  EXPECT_EQ(waits(PollGate::kEvery - 1), 0u);
  switches += 5 * PollGate::kMaxSwitches;
  EXPECT_EQ(waits(PollGate::kEvery), 0u) << "stays closed while they keep growing";
  EXPECT_EQ(waits(PollGate::kEvery), PollGate::kEvery)
      << "reopens at the next look, once they stop";
}

// A look from another thread than the last one judges nothing: its count is its own.
TEST(ShmPollGate, ALookFromAnotherThreadJudgesNothing) {
  using commux::shm::PollGate;
  long switches = 0;
  PollGate gate([&] { return switches; });
  for (unsigned i = 0; i < PollGate::kEvery; ++i) gate.open();  // first look, this thread
  switches = 1000;  // another thread's count would differ by anything
  std::thread([&] {
    for (unsigned i = 0; i < PollGate::kEvery; ++i) EXPECT_TRUE(gate.open());
  }).join();
}

TEST(ShmPollGate, ReadsThisThreadsSwitches) {
  const long before = commux::shm::PollGate::involuntarySwitches();
  EXPECT_GE(before, 0);
  EXPECT_GE(commux::shm::PollGate::involuntarySwitches(), before);
}
