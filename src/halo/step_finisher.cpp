#include "halo/step_finisher.hpp"

#include <thread>
#include <utility>

namespace commux::halo {

StepFinisher::StepFinisher() : queue_(std::make_shared<Queue>()) {}

StepFinisher::~StepFinisher() {
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->stopping = true;
  }
  queue_->wake.notify_all();
}

void StepFinisher::post(std::function<void()> job) {
  bool start = false;
  {
    std::lock_guard<std::mutex> lock(queue_->mutex);
    queue_->jobs.push_back(std::move(job));
    start = !queue_->running;
    queue_->running = true;
  }
  if (start) {
    try {
      std::thread([queue = queue_] { run(queue); }).detach();
    } catch (...) {
      std::lock_guard<std::mutex> lock(queue_->mutex);
      queue_->jobs.pop_back();
      queue_->running = false;
      throw;
    }
  } else {
    queue_->wake.notify_one();
  }
}

void StepFinisher::run(const std::shared_ptr<Queue>& queue) {
  std::unique_lock<std::mutex> lock(queue->mutex);
  for (;;) {
    queue->wake.wait(lock, [&] { return queue->stopping || !queue->jobs.empty(); });
    if (queue->jobs.empty()) return;  // stopping, with nothing left to run
    auto job = std::move(queue->jobs.front());
    queue->jobs.pop_front();
    lock.unlock();
    job();
    job = nullptr;  // what it held goes here, off the lock
    lock.lock();
  }
}

}  // namespace commux::halo
