#include "engine/stream_waits.hpp"

#include <utility>

#include "cuda/cuda_support.hpp"

namespace commux::engine {

struct StreamWaits::Gate {
  std::mutex mutex;
  StreamWaits* owner = nullptr;  // null once passed (pushed) or closed
  std::shared_ptr<Op> op;
  Command command;
};

StreamWaits::~StreamWaits() { close(); }

void StreamWaits::add(const core::Stream& stream, std::shared_ptr<Op> op, Command command) {
  auto gate = std::make_shared<Gate>();
  gate->owner = this;
  gate->op = std::move(op);
  gate->command = std::move(command);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.emplace(gate.get(), gate);
  }
  try {
    cuda::whenStreamReaches(stream, [gate] {
      std::lock_guard<std::mutex> lock(gate->mutex);
      if (gate->owner == nullptr) return;  // the engine stopped and failed the operation
      // Drop our reference first: the command holds one, and the last one must not go on
      // this thread (freeing an operation's CUDA tensors here would call CUDA).
      gate->op.reset();
      gate->owner->push_(std::move(gate->command));
      gate->owner->forget(gate.get());
      gate->owner = nullptr;
    });
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    open_.erase(gate.get());
    throw;
  }
}

void StreamWaits::forget(Gate* gate) {
  std::lock_guard<std::mutex> lock(mutex_);
  open_.erase(gate);
}

std::vector<std::shared_ptr<Op>> StreamWaits::close() {
  std::unordered_map<Gate*, std::shared_ptr<Gate>> open;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    open.swap(open_);
  }
  std::vector<std::shared_ptr<Op>> stranded;
  for (const auto& [key, gate] : open) {
    std::lock_guard<std::mutex> lock(gate->mutex);
    if (gate->owner == nullptr) continue;  // pushed while we were swapping
    gate->owner = nullptr;
    stranded.push_back(std::move(gate->op));
    gate->command = nullptr;
  }
  return stranded;
}

}  // namespace commux::engine
