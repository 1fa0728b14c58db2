#pragma once
// A thread that finishes an exchange's steps that end by themselves where no message's
// completion can end them: the same-host part of a step (halo/shared_sides) has no UCX
// request whose completion would run on the progress thread, so a step whose owner asked
// for its end (a future) rather than waiting for it is finished here. Started at the first
// such step; jobs run one after another. Its owner's destruction does not wait for it (a
// job's last act may be what destroys the owner: a future's callback dropping it, or a
// thread holding Python's lock that the callback needs): the thread drains its queue and
// ends by itself, so a job must hold what it uses.
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>

namespace commux::halo {

class StepFinisher {
 public:
  StepFinisher();
  ~StepFinisher();
  StepFinisher(const StepFinisher&) = delete;
  StepFinisher& operator=(const StepFinisher&) = delete;

  /// Runs `job` on the thread, after those posted before it. A job reports its own
  /// failures: nothing may escape it.
  void post(std::function<void()> job);

 private:
  struct Queue {
    std::mutex mutex;
    std::condition_variable wake;
    std::deque<std::function<void()>> jobs;
    bool stopping = false;
    bool running = false;
  };
  static void run(const std::shared_ptr<Queue>& queue);

  std::shared_ptr<Queue> queue_;
};

}  // namespace commux::halo
