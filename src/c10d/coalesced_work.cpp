#include "c10d/coalesced_work.hpp"

#include "c10d/work_ucx.hpp"

#include <atomic>
#include <memory>
#include <mutex>

namespace commux {
namespace {

/// Completes `future` once every child future has; the first error wins.
void joinFutures(const std::vector<c10::intrusive_ptr<c10d::Work>>& works,
                 const c10::intrusive_ptr<c10::ivalue::Future>& future,
                 std::vector<at::Tensor> outputs) {
  struct Join {
    std::atomic<std::size_t> left;
    std::mutex mutex;
    std::exception_ptr error;
  };
  if (works.empty()) {
    future->markCompleted(c10::IValue(outputs));
    return;
  }
  auto join = std::make_shared<Join>();
  join->left.store(works.size());
  for (const auto& w : works) {
    w->getFuture()->addCallback([join, future, outputs](c10::ivalue::Future& child) {
      if (child.hasError()) {
        std::lock_guard<std::mutex> lock(join->mutex);
        if (!join->error) join->error = child.exception_ptr();
      }
      if (join->left.fetch_sub(1) != 1) return;
      if (join->error) {
        future->setError(join->error);
      } else {
        future->markCompleted(c10::IValue(outputs));
      }
    });
  }
}

}  // namespace

CoalescedWork::CoalescedWork(int rank, std::vector<c10::intrusive_ptr<c10d::Work>> works)
    : c10d::Work(rank, c10d::OpType::COALESCED),
      works_(std::move(works)),
      future_(c10::make_intrusive<c10::ivalue::Future>(
          c10::ListType::create(c10::TensorType::get()))) {
  joinFutures(works_, future_, result());
}

bool CoalescedWork::isCompleted() {
  for (const auto& w : works_) {
    if (!w->isCompleted()) return false;
  }
  return true;
}

bool CoalescedWork::isSuccess() const {
  for (const auto& w : works_) {
    if (!w->isSuccess()) return false;
  }
  return true;
}

std::exception_ptr CoalescedWork::exception() const {
  for (const auto& w : works_) {
    if (auto e = w->exception()) return e;
  }
  return nullptr;
}

std::vector<at::Tensor> CoalescedWork::result() {
  std::vector<at::Tensor> all;
  for (const auto& w : works_) {
    for (auto& t : w->result()) all.push_back(std::move(t));
  }
  return all;
}

void CoalescedWork::synchronize() {}

bool CoalescedWork::wait(std::chrono::milliseconds timeout) {
  // One deadline for the whole batch; each part gets what is left of it.
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& w : works_) {
    if (timeout == kNoTimeout) {
      w->wait();
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    w->wait(spentAsTiny(left));
  }
  return true;
}

void CoalescedWork::abort() {
  for (const auto& w : works_) w->abort();
}

c10::intrusive_ptr<c10::ivalue::Future> CoalescedWork::getFuture() { return future_; }

}  // namespace commux
