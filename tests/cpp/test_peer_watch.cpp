// The peer watch: a process that dies is reported once, within milliseconds, by pidfd.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/peer_watch.hpp"

using commux::engine::PeerWatch;
using commux::engine::ProcessId;
using namespace std::chrono_literals;

namespace {

struct Reports {
  std::mutex mutex;
  std::condition_variable cv;
  std::vector<std::pair<std::string, std::string>> seen;

  PeerWatch::Notify sink() {
    return [this](const std::string& key, const std::string& why) {
      std::lock_guard<std::mutex> lock(mutex);
      seen.emplace_back(key, why);
      cv.notify_all();
    };
  }
  bool waitFor(std::size_t n, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(mutex);
    return cv.wait_for(lock, limit, [&] { return seen.size() >= n; });
  }
};

// A child that sleeps until killed; returns its id as the parent sees it.
ProcessId sleeper(pid_t* pid) {
  *pid = ::fork();
  if (*pid == 0) {
    alarm(30);
    for (;;) ::pause();
  }
  ProcessId id = ProcessId::self();
  id.pid = *pid;
  id.startTicks = ProcessId::startTicksOf(*pid);
  return id;
}

}  // namespace

TEST(ProcessId, SelfIsReadable) {
  const ProcessId me = ProcessId::self();
  EXPECT_EQ(me.pid, ::getpid());
  EXPECT_GT(me.startTicks, 0u);
  EXPECT_FALSE(me.pidSpace.empty());
  EXPECT_TRUE(me.sameSpace(ProcessId::self()));
  EXPECT_EQ(ProcessId::startTicksOf(-5), 0u);
}

TEST(PeerWatch, KilledProcessIsReportedOnceAndFast) {
  Reports reports;
  PeerWatch watch(reports.sink());
  pid_t pid = 0;
  const ProcessId id = sleeper(&pid);
  ASSERT_TRUE(watch.watch("peer-a", id));
  ASSERT_TRUE(watch.watch("peer-a", id)) << "watching twice is harmless";
  EXPECT_FALSE(watch.failed("peer-a"));
  const auto start = std::chrono::steady_clock::now();
  ::kill(pid, SIGKILL);
  ASSERT_TRUE(reports.waitFor(1, 5s)) << "no report within 5 s";
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, 1s);
  EXPECT_TRUE(watch.failed("peer-a"));
  ::waitpid(pid, nullptr, 0);
  std::this_thread::sleep_for(50ms);
  std::lock_guard<std::mutex> lock(reports.mutex);
  ASSERT_EQ(reports.seen.size(), 1u);
  EXPECT_EQ(reports.seen[0].first, "peer-a");
  EXPECT_NE(reports.seen[0].second.find(std::to_string(pid)), std::string::npos)
      << reports.seen[0].second;
}

TEST(PeerWatch, ProcessAlreadyGoneOrPidReusedIsReportedAtOnce) {
  Reports reports;
  PeerWatch watch(reports.sink());
  pid_t pid = 0;
  ProcessId id = sleeper(&pid);
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);  // reaped: the pid no longer exists
  ASSERT_TRUE(watch.watch("gone", id));
  // A live process with the wrong start time is someone else, not the peer.
  ProcessId impostor = ProcessId::self();
  impostor.startTicks += 12345;
  ASSERT_TRUE(watch.watch("reused", impostor));
  ASSERT_TRUE(reports.waitFor(2, 5s));
  EXPECT_TRUE(watch.failed("gone"));
  EXPECT_TRUE(watch.failed("reused"));
}

TEST(PeerWatch, OtherPidSpacesAreLeftToOtherDetectors) {
  Reports reports;
  PeerWatch watch(reports.sink());
  ProcessId remote = ProcessId::self();
  remote.pidSpace = "another-host|1:2";
  EXPECT_FALSE(watch.watch("remote", remote));
  watch.report("remote", "UCX says so");
  ASSERT_TRUE(reports.waitFor(1, 5s));
  watch.report("remote", "twice");
  std::this_thread::sleep_for(50ms);
  std::lock_guard<std::mutex> lock(reports.mutex);
  ASSERT_EQ(reports.seen.size(), 1u) << "a key is reported once";
  EXPECT_EQ(reports.seen[0].second, "UCX says so");
}
