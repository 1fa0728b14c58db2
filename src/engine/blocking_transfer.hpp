#pragma once
// One send or receive of contiguous host memory that its caller waits for at once
// (ProcessGroupUCX::sendBlocking / recvBlocking, MPI_Send / MPI_Recv style). It lives on
// the caller's stack and is posted and, usually, completed on the caller's thread: no Op,
// no Work, no submission queue and no heap allocation of commux's, which is where most of a
// small message's time went on the ordinary path (docs/performance-log.md, "C++ p2p").
//
// It takes the worker only when the lock is free (the caller then falls back to the
// ordinary path), after the commands queued before it, so the order of one thread's
// messages to one (peer, tag) is the order of its calls. Its wait is Engine::wait: a short
// spin driving the worker, then a sleep, so a blocked caller burns no CPU. The UCX
// callback only records the outcome and sets the flag; the request goes back to UCX under
// the worker lock.
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstddef>

#include "engine/done_flag.hpp"
#include "engine/engine.hpp"
#include "engine/op.hpp"
#include "engine/route.hpp"
#include "wire/tag.hpp"

namespace commux::engine {

class BlockingTransfer {
 public:
  explicit BlockingTransfer(Engine& engine) : engine_(engine) {}
  /// Cancels what has not ended and gives UCX its request back.
  ~BlockingTransfer();
  BlockingTransfer(const BlockingTransfer&) = delete;
  BlockingTransfer& operator=(const BlockingTransfer&) = delete;

  /// Posts the send of `bytes` at `data` (null when `bytes` is 0) to `route` on this thread
  /// when the worker lock is free; false when another thread holds it (nothing posted).
  /// Call once.
  bool sendIfFree(const Route& route, const void* data, std::size_t bytes, wire::Tag tag);
  /// Posts the receive into `data` (room for `bytes`) the same way.
  bool recvIfFree(void* data, std::size_t bytes, wire::Tag tag, wire::Tag mask);

  bool ended() const noexcept { return flag_.done(); }
  /// Waits until it ended or `deadline`; true if it ended.
  bool waitUntil(std::chrono::steady_clock::time_point deadline);
  /// Waits until it ended, `deadline`, or `interrupted()` (asked every `every`).
  template <typename Interrupted>
  Engine::WaitEnd waitUnless(std::chrono::steady_clock::time_point deadline,
                             Interrupted&& interrupted, std::chrono::milliseconds every) {
    return engine_.waitUnless(flag_, deadline, interrupted, every, nullptr, bytes_);
  }
  /// Cancels it unless it ended, then waits up to `limit` for UCX to end it; true if it
  /// ended (possibly with success: it may have completed meanwhile). If not, the request is
  /// released, UCX calls nothing back any more, and the buffer must be treated as lost.
  bool cancel(std::chrono::milliseconds limit);

  /// Valid once ended().
  ucs_status_t status() const noexcept { return status_; }
  const RecvInfo& info() const noexcept { return info_; }

 private:
  struct Post {
    BlockingTransfer* self;
    const Route* route;  // sends only
    void* data;
    std::size_t bytes;
    wire::Tag tag;
    wire::Tag mask;
  };
  static void postSend(Engine& engine, void* post);
  static void postRecv(Engine& engine, void* post);
  static void onSend(void* request, ucs_status_t status, void* user);
  static void onRecv(void* request, ucs_status_t status, const ucp_tag_recv_info_t* info,
                     void* user);
  /// Worker-lock holders, right after the post: what the post returned.
  void posted(void* request);
  void end(void* request, ucs_status_t status, const RecvInfo& info);
  static void cancelRequest(Engine& engine, void* self);
  static void releaseRequest(Engine& engine, void* self);

  friend class Engine;  // its list of posted transfers (worker lock)

  Engine& engine_;
  DoneFlag flag_;
  // In the engine's list while UCX owns the request (worker lock).
  BlockingTransfer* prevPosted_ = nullptr;
  BlockingTransfer* nextPosted_ = nullptr;
  bool listed_ = false;
  // Written under the worker lock; read by the owner once the flag is set.
  void* request_ = nullptr;
  std::size_t bytes_ = 0;  // what the transfer moves: how long a wait spins
  bool posting_ = false;  // inside ucp_tag_*_nbx, which may call back before it returns
  bool posted_ = false;   // a ...IfFree call found the worker free
  // Set by whoever ended it, as its last touch of this object: setDone still wakes the
  // flag's waiters after the owner may have seen it set, and the flag lives on the owner's
  // stack, so the owner may not go before this is set.
  std::atomic<bool> released_{false};
  ucs_status_t status_ = UCS_INPROGRESS;
  RecvInfo info_;
};

}  // namespace commux::engine
