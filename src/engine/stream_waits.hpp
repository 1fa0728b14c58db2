#pragma once
// Operations parked until a CUDA stream reaches a point (the kernels that produce an
// operation's inputs, or the folds of a collective step). CUDA calls back on a driver
// thread, possibly after the engine stopped or never (the process exits first), so each
// wait sits behind a gate: the host function hands its command to the engine only while
// the engine still runs, and the engine fails the operations whose gate is still closed
// when it stops. Without that, a Work whose host function found the engine stopped was
// dropped and never completed.
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/stream.hpp"

namespace commux::engine {

class Engine;
class Op;

class StreamWaits {
 public:
  using Command = std::function<void(Engine&)>;
  /// Queues a command for the engine's driver. Called on CUDA's driver thread: it must not
  /// call CUDA or UCX, must not block for long, and must not throw.
  using Push = std::function<void(Command)>;

  explicit StreamWaits(Push push) : push_(std::move(push)) {}
  ~StreamWaits();
  StreamWaits(const StreamWaits&) = delete;
  StreamWaits& operator=(const StreamWaits&) = delete;

  /// Pushes `command` once `stream` reaches its current end. `command` must hold its own
  /// reference to `op`. Throws when the stream cannot take a host function.
  void add(const core::Stream& stream, std::shared_ptr<Op> op, Command command);
  /// The engine stops: no command is pushed from now on. Returns the operations whose
  /// stream had not got there yet, for the engine to fail. Commands pushed before this
  /// returns must still be run (or failed) by the engine.
  std::vector<std::shared_ptr<Op>> close();

 private:
  struct Gate;
  void forget(Gate* gate);

  Push push_;
  std::mutex mutex_;
  std::unordered_map<Gate*, std::shared_ptr<Gate>> open_;
};

}  // namespace commux::engine
