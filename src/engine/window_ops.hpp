#pragma once
// One-sided windows over UCX messages, for peers whose memory this process cannot write
// directly (another host, or no shared memory). A put is a control message (header and, up
// to kEagerBytes, the data itself) followed for larger puts by one data message that the
// target receives straight into its window (rendezvous: no copy); a signal is a control
// message. The target takes a sender's control messages in the order they were sent (one
// tag per sender, which UCX matches in send order), so a signal is released only once the
// puts before it have landed: remote completion, without the sender waiting for an ack.
//
// Why not ucp_put_nbx: with peer error handling on (failure detection) UCX drops its
// shared-memory RMA transports and emulates put over TCP with active messages anyway, and a
// put never wakes a sleeping target: every waiter would have to poll. Messages wake the
// target's worker like any receive, so a wait sleeps, and they work on every UCX (1.13 too).
// docs/design.md, "One-sided windows", has the protocol and the measurements.
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "engine/op.hpp"
#include "engine/route.hpp"

namespace commux::engine {

namespace window {

enum class Type : std::uint32_t {
  Put = 1,
  PutLarge = 2,
  Signal = 3,
  Close = 4,
  PutSignal = 5,
  Get = 6,  // also flush: a get of 0 bytes, answered once the puts before it landed
};

/// Every control message starts with this.
struct Header {
  Type type;
  std::uint32_t reserved = 0;
  std::uint64_t offset = 0;  // bytes into the target's window
  std::uint64_t bytes = 0;   // the put's length
};

/// Puts up to this size travel inside their control message (one message, one copy at the
/// target); larger ones as a second message received in place. Puts from or into CUDA
/// memory always take the second form: the engine copies no device memory itself.
inline constexpr std::size_t kEagerBytes = 8192;

/// The target's tags: control messages (payload 0) and large puts' data (payload 1); the
/// requester's: the answer to a get (payload 2).
wire::Tag controlTag(std::uint32_t context, std::uint32_t source);
wire::Tag dataTag(std::uint32_t context, std::uint32_t source);
wire::Tag replyTag(std::uint32_t context, std::uint32_t source);

}  // namespace window

class WaitSignalOp;
class CloseWindowOp;

/// The target side of one registration: receives the peers' control messages in order,
/// lands their puts in [base, base + bytes), and hands out their signals once the puts
/// sent before them have landed. Started at registration; runs until the window closes
/// (CloseWindowOp) or the engine stops. Worker lock for everything.
class WindowInbox final : public Op {
 public:
  /// `device`: the GPU [base, base + bytes) lives on; empty for host memory.
  /// `done`: told once it has ended (closed, failed, cancelled) and no transfer into the
  /// window is left to UCX.
  WindowInbox(std::uint32_t context, int rank, int groupSize, char* base, std::size_t bytes,
              std::optional<int> device, Description description, Done done = nullptr);

  void start(Engine& engine) override;
  /// The peers' windows, once the registration read them: gets are answered from then on
  /// (a get that came earlier waits for this).
  void setRoutes(Engine& engine, std::vector<std::shared_ptr<const Route>> routes);
  /// A wait for a signal from `peer`: consumed at once when one is ready, else queued.
  void addWaiter(const std::shared_ptr<WaitSignalOp>& waiter, int peer);
  /// A wait that failed (timeout, abort) gives its place up, so no signal is lost to it.
  void removeWaiter(const WaitSignalOp* waiter, int peer);
  /// The window's close: done once every peer's close message arrived after its puts.
  void addCloser(Engine& engine, const std::shared_ptr<CloseWindowOp>& closer);
  /// Signals from `peer` released and not waited for yet.
  std::uint64_t ready(int peer) const { return sources_.at(peer).ready; }
  /// `peer`'s close was released (every put it sent before has landed).
  bool closedBy(int peer) const { return sources_.at(peer).closed; }

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;
  void onFailed() override;

 private:
  struct Source {
    std::uint64_t posted = 0;     // large puts' data receives posted
    std::uint64_t doneBelow = 0;  // every one with a lower index has landed
    std::deque<bool> landed;      // for indexes [doneBelow, posted)
    // Signals and the close, in arrival order, each with the number of data receives
    // posted before it (it is released once they have all landed).
    struct Pending {
      window::Type type;
      std::uint64_t after;
      std::uint64_t offset = 0;  // a get's
      std::uint64_t bytes = 0;
    };
    std::deque<Pending> pending;
    std::uint64_t ready = 0;  // released signals nobody waited for
    std::deque<std::shared_ptr<WaitSignalOp>> waiters;
    bool closed = false;
  };
  struct DataSlot {
    bool reply = false;  // an answer to a get (a send), else a large put's data receive
    int source = -1;
    std::uint64_t index = 0;
  };
  struct Get {
    int source;
    std::uint64_t offset;
    std::uint64_t bytes;
  };

  void postControl(Engine& engine);
  void onControl(Engine& engine, int source, std::size_t length);
  void onData(Engine& engine, std::uint32_t slot);
  void release(Engine& engine, int source);
  void answer(Engine& engine, const Get& get);
  std::uint32_t takeSlot(const DataSlot& slot);
  void maybeClosed(Engine& engine);

  const std::uint32_t context_;
  const std::uint32_t rank_;
  char* const base_;
  const std::size_t bytes_;
  const ucs_memory_type_t memory_;
  std::vector<char> control_;  // one control message: header + eager data
  std::vector<Source> sources_;
  std::vector<DataSlot> slots_;  // slot 1 + i: a data receive or a get's answer
  std::vector<std::shared_ptr<const Route>> routes_;  // empty until setRoutes
  std::vector<Get> unanswered_;                       // gets released before setRoutes
  std::vector<std::uint32_t> freeSlots_;
  std::shared_ptr<CloseWindowOp> closer_;
  std::size_t closedPeers_ = 0;
  Engine* startedOn_ = nullptr;  // set at start
};

/// A put to a peer's window through UCX messages. The data is copied at the call when it
/// travels eagerly (the caller may reuse the tensor at once); a large put reads `data` until
/// it completes, which is when the target has received it. With `signal`, a signal follows
/// (put_signal): in the same message when the data travels eagerly. `device`: the GPU of
/// `data` (and of the target's window), whose stream the caller already waited for.
class WindowPutOp final : public Op {
 public:
  WindowPutOp(std::shared_ptr<const Route> route, std::uint32_t source, const void* data,
              std::size_t bytes, std::optional<int> device, std::size_t offsetBytes,
              std::shared_ptr<void> keepAlive, bool signal, Description description, Done done);
  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;

 private:
  std::shared_ptr<const Route> route_;
  std::uint32_t source_;
  const void* data_;
  std::size_t bytes_;
  ucs_memory_type_t memory_;
  bool large_ = false;  // the data travels as a second message
  std::vector<char> control_;
  window::Header signal_{};  // a large put_signal's second control message
  bool signalAfter_ = false;
  std::shared_ptr<void> keepAlive_;  // the tensor a large put reads
};

/// A signal to a peer (also used for self): one control message.
class WindowSignalOp final : public Op {
 public:
  WindowSignalOp(std::shared_ptr<const Route> route, std::uint32_t source, Description description,
                 Done done);
  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;

 private:
  std::shared_ptr<const Route> route_;
  std::uint32_t source_;
  window::Header header_{};
};

/// Reads `bytes` at `offset` of a peer's window into `data` (commux's get; 0 bytes is a
/// flush): the target answers once the puts this rank sent it before have landed.
class WindowGetOp final : public Op {
 public:
  /// `source`: this rank; `target`: the peer's rank; `context`: this rank's window context.
  WindowGetOp(std::shared_ptr<const Route> route, std::uint32_t source, std::uint32_t target,
              std::uint32_t context, void* data, std::size_t bytes,
              std::optional<int> device, std::size_t offsetBytes,
              std::shared_ptr<void> keepAlive, Description description, Done done);
  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;

 private:
  std::shared_ptr<const Route> route_;
  std::uint32_t source_;
  std::uint32_t target_;
  std::uint32_t context_;  // this rank's window context (the answer's)
  void* data_;
  std::size_t bytes_;
  ucs_memory_type_t memory_;
  window::Header header_{};
  std::shared_ptr<void> keepAlive_;
};

/// Hands the inbox its routes under the worker lock, then succeeds.
class WindowRoutesOp final : public Op {
 public:
  WindowRoutesOp(std::shared_ptr<WindowInbox> inbox,
                 std::vector<std::shared_ptr<const Route>> routes);
  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override {}

 private:
  std::shared_ptr<WindowInbox> inbox_;
  std::vector<std::shared_ptr<const Route>> routes_;
};

/// Waits for one signal from `peer`; a timeout or abort gives its place back.
class WaitSignalOp final : public Op {
 public:
  WaitSignalOp(std::shared_ptr<WindowInbox> inbox, int peer, Description description, Done done);
  void start(Engine& engine) override;
  /// The inbox hands it a signal.
  void deliver() { succeed(); }

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override {}
  void onFailed() override;

 private:
  std::shared_ptr<WindowInbox> inbox_;
  int peer_;
};

/// The collective end of a registration: a close message to every peer after this rank's
/// puts, done when they are sent and every peer's close arrived after its puts landed, so
/// no put can still land in the memory once every rank has let it go.
class CloseWindowOp final : public Op {
 public:
  CloseWindowOp(std::shared_ptr<WindowInbox> inbox, std::vector<std::shared_ptr<const Route>> peers,
                std::uint32_t source, Description description, Done done);
  void start(Engine& engine) override;
  /// The inbox saw every peer's close.
  void peersClosed();
  /// Not once `rank`'s close arrived and this rank's closes are sent.
  bool awaits(int rank) const override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;

 private:
  void maybeDone();

  std::shared_ptr<WindowInbox> inbox_;
  std::vector<std::shared_ptr<const Route>> peers_;
  std::uint32_t source_;
  window::Header header_{};
  bool sent_ = false;
  bool peersClosed_ = false;
};

}  // namespace commux::engine
