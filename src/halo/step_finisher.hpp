#pragma once
// A thread that finishes an exchange's steps that end by themselves where no message's
// completion can end them: the same-host part of a step (halo/shared_sides) has no UCX
// request whose completion would run on the progress thread, so a step whose owner asked
// for its end (a future) rather than waiting for it is finished here. Started at the first
// such step; jobs run one after another; the destructor runs what is queued, then joins.
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace commux::halo {

class StepFinisher {
 public:
  StepFinisher() = default;
  ~StepFinisher();
  StepFinisher(const StepFinisher&) = delete;
  StepFinisher& operator=(const StepFinisher&) = delete;

  /// Runs `job` on the thread, after those posted before it.
  void post(std::function<void()> job);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> jobs_;
  bool stopping_ = false;
  std::thread thread_;  // last: started once the members above exist
};

}  // namespace commux::halo
