#pragma once
// An Op is one communication operation in flight (a point-to-point call, a collective).
// It is created on the caller's thread, then lives under the engine's worker lock (on
// whichever thread drives the worker: the caller, a waiter, the progress thread): it posts
// UCX requests, reacts to their completions, and reports success or failure exactly once
// through its Done callback.
#include <ucp/api/ucp.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/inline_vector.hpp"
#include "core/stream.hpp"
#include "engine/description.hpp"
#include "wire/tag.hpp"

namespace commux::engine {

class Engine;
class Op;

/// Told when a transfer of an operation fails because its connection broke. A peer's death
/// does that, and the death watch confirms it moments later (PeerWatch, on its own
/// thread): UCX's bare status ("Input/output error") would leave the caller without the
/// rank that died, which survivors need to go on without it. A group's witness names it.
class FailureWitness {
 public:
  virtual ~FailureWitness() = default;
  /// Worker-lock holder, never blocking or driving: `op` (whose one peer is group rank
  /// `peer`, or -1 when it talks to all) had a transfer fail with `error`. Returns the
  /// error to fail it with now, or null when the witness sees to its failure itself, soon
  /// and boundedly (through the engine, as a cancel does), once it can name the death.
  virtual std::exception_ptr connectionFailed(const std::shared_ptr<Op>& op, int peer,
                                              std::exception_ptr error) = 0;
};

struct RecvInfo {
  std::size_t length = 0;
  wire::Tag senderTag = 0;
};

/// One posted UCX request. Owned by the engine from posting until its completion has been
/// handled; the Op it serves stays alive as long as any of its requests does, so UCX never
/// touches a freed buffer.
struct Pending {
  std::shared_ptr<Op> op;
  Engine* engine = nullptr;
  std::uint32_t slot = 0;
  void* request = nullptr;
  // A receive: UCX writes its buffer until it completes.
  bool receive = false;
};

class Op : public std::enable_shared_from_this<Op> {
 public:
  /// Called once, under the worker lock: (nullptr, source rank) on success, (error, -1)
  /// on failure. The source rank is meaningful for receives from any source.
  using Done = std::function<void(std::exception_ptr, int)>;

  Op(Description description, Done done);
  virtual ~Op();
  Op(const Op&) = delete;
  Op& operator=(const Op&) = delete;

  /// For messages: formatted on each call.
  std::string description() const { return description_.str(); }
  /// A collective's number in its group; absent for anything else.
  std::optional<std::uint32_t> sequence() const { return description_.sequence(); }
  /// The caller's CUDA stream (set for operations on CUDA tensors): work done for the
  /// caller after the transfer (copies back, AVG division) is queued on it, so the
  /// caller's later kernels see the result without a host synchronisation.
  void setUserStream(core::Stream stream) { userStream_ = stream; }
  const std::optional<core::Stream>& userStream() const noexcept { return userStream_; }
  /// The GPU its buffers are on; empty for host memory.
  const std::optional<int>& cudaDevice() const noexcept { return cudaDevice_; }
  /// True when its caller already waited for the CUDA stream that produced its buffers
  /// (a window call): it starts at once instead of behind that stream, so it keeps its
  /// place among the caller's operations.
  bool callerSynchronised() const noexcept { return callerSynchronised_; }
  bool finished() const noexcept { return finished_.load(std::memory_order_acquire); }

  /// Worker-lock holder: post the first requests.
  virtual void start(Engine& engine) = 0;
  /// False for operations whose work is not UCX's (a shared-memory collective): starting
  /// them needs no progress round.
  virtual bool usesWorker() const noexcept { return true; }
  /// A thread about to wait for this operation (not one that drives the worker) may do the
  /// operation's work itself instead of waking another thread to do it; `deadline` is its
  /// wait's. Most operations have nothing to do here.
  virtual void assist(std::chrono::steady_clock::time_point deadline) {}
  /// Whether assist() may do anything (a waiter of the others skips it).
  virtual bool assists() const noexcept { return false; }
  /// Any thread, when the caller stops waiting for this operation before it finished (a
  /// timeout, an abort), before the caller gets its buffers back: stop others from relying
  /// on them now (a shared-memory collective abandons its channel, so a peer that reads this
  /// rank's buffer directly knows its read may be torn). The cancellation that follows,
  /// which may be queued for the driver, does the rest.
  virtual void withdraw() noexcept {}
  /// Worker-lock holder: whether the operation still needs anything from or to group rank
  /// `rank`; a peer's death fails only the operations that do (Submission::failAfterDraining).
  /// A window's close that already has the peer's close message does not: that peer did
  /// all it had to, and may have left.
  virtual bool awaits(int rank) const { return true; }
  /// Before it starts: who is told when a transfer of it fails because its connection
  /// broke (see FailureWitness); `peer`: its one peer's group rank, or -1.
  void setFailureWitness(std::shared_ptr<FailureWitness> witness, int peer) {
    witness_ = std::move(witness);
    witnessPeer_ = peer;
  }
  /// Worker-lock holder: fail the operation now and cancel its outstanding requests. Its
  /// callback runs once no receive of it is left to UCX: a receive UCX already matched (a
  /// rendezvous under way) cannot be cancelled and writes the buffer until its transfer
  /// ends, and the caller gets the buffer back only after that. Not so for an operation a
  /// peer's death or a broken connection fails (failOnDeath, or a transfer of it that broke):
  /// a transfer from a dead peer may never end (UCX leaves such a receive matched), and the
  /// caller must hear of the death now.
  void fail(Engine& engine, std::exception_ptr error);
  /// Worker-lock holder: fail() for a member's death.
  void failOnDeath(Engine& engine, std::exception_ptr error) {
    peerGone_ = true;
    fail(engine, std::move(error));
  }
  /// Worker-lock holder: route one request's completion.
  void handle(Engine& engine, Pending& pending, ucs_status_t status, const RecvInfo& info);

 protected:
  /// Completion of a request in `slot` that finished with UCS_OK.
  virtual void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) = 0;
  /// Called once when the operation fails (error, timeout, abort), before its callback.
  virtual void onFailed() {}
  /// Describes a failed request of `slot` for the error message.
  virtual std::string describeFailure(std::uint32_t slot, ucs_status_t status,
                                      const RecvInfo& info) const;

  /// `count` is in units of `datatype`: bytes for the default contiguous type, entries of
  /// a ucp_dt_iov_t array (which must live until completion) for ucp_dt_make_iov().
  /// `memory` tells UCX where the buffer lives, so it need not look it up per call.
  void postSend(Engine& engine, ucp_ep_h ep, const void* data, std::size_t count, wire::Tag tag,
                std::uint32_t slot, ucs_memory_type_t memory,
                ucp_datatype_t datatype = ucp_dt_make_contig(1));
  void postRecv(Engine& engine, void* data, std::size_t count, wire::Tag tag, wire::Tag mask,
                std::uint32_t slot, ucs_memory_type_t memory,
                ucp_datatype_t datatype = ucp_dt_make_contig(1));
  void succeed(int sourceRank = -1);
  /// Succeeds and cancels the requests still posted (an operation that keeps a receive
  /// posted until it is told to stop: a window's inbox).
  void retire(Engine& engine);
  std::size_t outstanding() const noexcept { return outstanding_; }
  /// Its buffers are on GPU `index`.
  void placeOnCudaDevice(int index);

 private:
  friend class Engine;
  void track(Engine& engine, Pending* pending, void* request);
  /// Runs the callback with `error` (a failure's).
  void report(std::exception_ptr error);
  /// Worker-lock holder: cancels the requests still owned by UCX (a cancelled one still
  /// completes, through handle()).
  void cancelInflight(Engine& engine);

  Description description_;
  std::optional<core::Stream> userStream_;

 protected:
  std::optional<int> cudaDevice_;
  bool callerSynchronised_ = false;

 private:
  Engine* engine_ = nullptr;  // set by Engine before start()
  // Engine's list of started, unfinished operations (worker lock).
  Op* prevActive_ = nullptr;
  Op* nextActive_ = nullptr;
  bool listed_ = false;
  Done done_;
  std::atomic<bool> finished_{false};
  std::shared_ptr<FailureWitness> witness_;
  int witnessPeer_ = -1;
  // Worker lock: a broken connection doomed it and the witness will fail it; the
  // completions still to come change nothing.
  bool witnessed_ = false;
  // Worker lock: a peer's death or a broken connection fails it: fail() does not wait for
  // its receives (see there).
  bool peerGone_ = false;
  std::size_t outstanding_ = 0;
  // Receives posted and not yet completed (worker lock).
  std::size_t receivesOwed_ = 0;
  // Set by fail() while receives are owed: the callback's error, given once they are not.
  std::exception_ptr drainingError_;
  // Requests still owned by UCX, for cancellation; inline for the usual one or two.
  core::InlineVector<Pending*, 4> inflight_;
};

}  // namespace commux::engine
