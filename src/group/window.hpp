#pragma once
// A one-sided window over host memory, for front ends without tensors (the C API): each
// rank exposes [base, base + bytes) of its own memory; puts, signals and flushes reach a
// peer as UCX messages that its engine lands in its window (engine/window_ops.hpp), so
// a wait for a signal sleeps and sees every put sent before that signal. This rank's own
// window takes a copy. Made and closed collectively, in the same order on every rank.
//
// The c10d adapter's window (WindowUCX) adds direct paths on one host (a peer's shared
// memory mapped here, process_vm_writev) over the same messages; this one has the
// messages only.
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/done_flag.hpp"
#include "group/request.hpp"

namespace commux::engine {
class WindowInbox;
struct Route;
}  // namespace commux::engine

namespace commux::group {

class Group;

class Window {
 public:
  /// Collective over `group`: the `index`-th window made on it (every rank counts alike).
  /// The memory must stay allocated until close() returned (or this Window is gone).
  /// Raises InvalidArgument for a null base with bytes, Backend when a rank dies or gives
  /// up first, Store when a rank does not come within the store's timeout.
  Window(Group& group, void* base, std::size_t bytes, std::uint64_t index);
  /// Without close(): peers may still put into the memory, which this cannot keep alive;
  /// close first.
  ~Window();
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;

  /// Writes `bytes` at `data` at `offset` bytes into rank `target`'s window, then (with
  /// `signal`) signals it. Done once `data` may be reused; the target sees the data when
  /// a later signal from this rank (or a flush) completes. Raises InvalidArgument, before
  /// anything moves, when it does not fit the target's window.
  std::shared_ptr<Request> put(const void* data, std::size_t bytes, int target, std::size_t offset,
                               bool signal, std::chrono::milliseconds timeout);
  /// A signal to `target`, released there after every put this rank sent it before.
  std::shared_ptr<Request> signal(int target, std::chrono::milliseconds timeout);
  /// Done when a signal from `source` arrived (each signal satisfies one wait).
  std::shared_ptr<Request> waitSignal(int source, std::chrono::milliseconds timeout);
  /// Done once every put this rank sent `target` has landed there.
  std::shared_ptr<Request> flush(int target, std::chrono::milliseconds timeout);
  /// Collective: done when every rank has closed, after every put into this window landed.
  /// Later calls raise.
  void close(std::chrono::milliseconds timeout);

 private:
  struct Peer {
    std::shared_ptr<const engine::Route> route;
    std::uint64_t bytes = 0;
  };
  const Peer& peer(const char* what, int rank) const;
  /// Cancels the inbox and gives the context back; with `drain`, first waits (bounded)
  /// until no transfer into the window is left to UCX. False when one still was.
  bool release(bool drain);

  Group& group_;
  char* base_;
  std::uint64_t index_;
  std::uint32_t context_ = 0;
  std::shared_ptr<engine::WindowInbox> inbox_;
  // Set once the inbox has ended and UCX writes the window no more.
  std::shared_ptr<engine::DoneFlag> inboxEnded_;
  std::vector<Peer> peers_;
};

}  // namespace commux::group
