#pragma once
// What the engine's drive and sleep protocol needs of its worker, and nothing else: make
// progress, arm the event fd (one-shot; refused while events are pending), wake a sleeper
// on it. The engine drives UCX's worker through this port; its tests drive a fake one
// (tests/cpp/test_engine_fake_worker.cpp) to run the shipped protocol, not a copy of it.
// Operations still post to UCX's worker directly (Engine::worker()).
namespace commux::ucx {
class Worker;
}

namespace commux::engine {

class WorkerPort {
 public:
  virtual ~WorkerPort() = default;
  /// Worker-lock holders: one round of progress; nonzero when it did something.
  virtual unsigned progress() = 0;
  /// Worker-lock holders: arms eventFd(); false when events are pending (progress first).
  virtual bool arm() = 0;
  /// Any thread: makes eventFd() readable, waking whoever sleeps on it.
  virtual void signal() = 0;
  /// The descriptor a sleeper polls: readable after signal() or an event while armed.
  virtual int eventFd() const = 0;
};

/// UCX's worker as the engine's port.
class UcxWorkerPort final : public WorkerPort {
 public:
  explicit UcxWorkerPort(ucx::Worker& worker) : worker_(worker) {}
  unsigned progress() override;
  bool arm() override;
  void signal() override;
  int eventFd() const override;

 private:
  ucx::Worker& worker_;
};

}  // namespace commux::engine
