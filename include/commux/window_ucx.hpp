#pragma once
// commux's c10d::Window: one-sided puts, signals and waits on a registered tensor
// (dist._new_window). Each registration is collective: every rank publishes where its
// tensor is and how it can be reached, then each put picks the cheapest way to its target
// rank, once per registration:
//  - this rank: a copy;
//  - a peer on this host whose tensor is in shared memory (tensor.share_memory_()): a copy
//    into that memory, mapped here once (this is also what map_remote_tensor returns);
//  - another peer on this host: one process_vm_writev into its tensor (CMA) from 256 KiB
//    on, UCX messages below (measured: the syscall costs more than a message there);
//  - any other peer (another host, COMMUX_SHM=0, CMA refused): UCX messages
//    (engine/window_ops.hpp), received into the tensor by the target's engine.
// The first three complete in the caller; a signal always travels as a UCX message after
// them, so when the waiter's wait_signal returns, the puts sent before the signal are in its
// tensor. A window on a CUDA tensor is reached through messages only (UCX moves the device
// memory; this rank's own through a copy on the device), and each call waits for the
// caller's current stream first. docs/design.md, "One-sided windows".
#include <torch/csrc/distributed/c10d/Backend.hpp>

#ifdef C10D_BACKEND_HAS_WINDOW
#include <torch/csrc/distributed/c10d/Window.hpp>

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace commux {

namespace engine {
class Engine;
class WindowInbox;
struct Route;
}  // namespace engine

class ProcessGroupUCX;
class WorkUCX;

class WindowUCX final : public c10d::Window {
 public:
  /// `index`: the how-manyth window of `group` (windows are made collectively, in order).
  WindowUCX(c10::intrusive_ptr<ProcessGroupUCX> group, std::uint64_t index);
  ~WindowUCX() override;

  void tensor_register(const at::Tensor& tensor, bool owning = true) override;
  /// The checks a registration makes before it talks to anyone (raising what is wrong);
  /// true when the tensor's storage then moves into shared memory.
  static bool checkRegistrable(ProcessGroupUCX& group, const at::Tensor& tensor, bool owning);
  void tensor_deregister() override;
  c10::intrusive_ptr<c10d::Work> put(const at::Tensor& tensor, int64_t dstRank,
                                     int64_t targetOffsetNelems, bool asyncOp,
                                     const c10d::PutOptions& opts = c10d::PutOptions()) override;
  at::Tensor map_remote_tensor(int64_t rank) override;
  c10::intrusive_ptr<c10d::Work> signal(
      int64_t peerRank, bool asyncOp,
      const c10d::SignalOptions& opts = c10d::SignalOptions()) override;
  c10::intrusive_ptr<c10d::Work> wait_signal(
      int64_t peerRank, bool asyncOp,
      const c10d::WaitSignalOptions& opts = c10d::WaitSignalOptions()) override;
  /// UNIFIED for a rank whose window this one can load and store directly (this rank, and
  /// a same-host peer whose tensor is in shared memory: map_remote_tensor works); SEPARATE
  /// for the others, reached through put and signal only.
  c10d::WindowAttr get_attr(int64_t peerRank) override;

  // commux's extensions (Python: the same names on the window dist._new_window returns).
  /// A put followed by a signal to the same rank, in one message where the data is small
  /// (shmem_put_signal): the wait_signal that it satisfies sees the data.
  c10::intrusive_ptr<c10d::Work> putSignal(const at::Tensor& tensor, int64_t dstRank,
                                           int64_t targetOffsetNelems, bool asyncOp,
                                           std::chrono::milliseconds timeout);
  /// Reads `tensor.numel()` elements at `sourceOffsetNelems` of `srcRank`'s window into
  /// `tensor`; it sees every put this rank made to that window before it.
  c10::intrusive_ptr<c10d::Work> get(const at::Tensor& tensor, int64_t srcRank,
                                     int64_t sourceOffsetNelems, bool asyncOp,
                                     std::chrono::milliseconds timeout);
  /// Done once every put this rank made to `peerRank` before it is in the peer's memory.
  c10::intrusive_ptr<c10d::Work> flush(int64_t peerRank, bool asyncOp,
                                       std::chrono::milliseconds timeout);
  /// How puts reach `rank`: "self", "mapped", "cma" or "messages" (diagnostics, tests).
  std::string path(int64_t rank);

 private:
  /// How this rank reaches one peer's registered tensor.
  struct Peer {
    enum class Path : std::uint8_t { Self, Mapped, Cma, Messages };
    Path path = Path::Messages;
    std::shared_ptr<const engine::Route> route;  // the peer's window context
    std::uint64_t elements = 0;
    c10::ScalarType dtype = c10::ScalarType::Undefined;
    bool cuda = false;        // its tensor is in CUDA memory
    char* address = nullptr;  // its tensor, in its address space (CMA)
    pid_t pid = 0;
    std::shared_ptr<void> mapping;  // Mapped: the peer's memory, mapped here
    char* mapped = nullptr;         // Mapped: its tensor in that mapping
    bool messagesInFlight = false;  // Cma: small puts went as messages since the last
                                    // get or flush through the inbox
  };

  c10::intrusive_ptr<c10d::Work> putAndMaybeSignal(const char* op, const at::Tensor& tensor,
                                                   int64_t dstRank, int64_t targetOffsetNelems,
                                                   bool asyncOp, std::chrono::milliseconds timeout,
                                                   bool signal);
  void checkRegistered(const char* op) const;
  /// Checks a put's or get's tensor and range against `peer`'s window (rank `rank`);
  /// returns its length and its offset in bytes.
  static std::pair<std::size_t, std::size_t> checkTransfer(const char* what,
                                                           const at::Tensor& tensor,
                                                           const Peer& peer, int64_t rank,
                                                           int64_t offset);
  const Peer& target(const char* op, int64_t rank) const;
  /// Throws DistBackendError when the group knows `rank` died.
  void checkAlive(const char* what, int rank) const;
  /// This rank's own window as a flat tensor of `count` elements from `offsetBytes`.
  at::Tensor ownSlice(std::size_t offsetBytes, std::int64_t count) const;
  /// Lets the window go, then waits for `work` when the caller asked for a blocking call.
  static c10::intrusive_ptr<c10d::Work> finishCall(std::unique_lock<std::mutex>& lock,
                                                   const c10::intrusive_ptr<c10d::Work>& work,
                                                   bool asyncOp);
  /// Lets the window go; the Work of an operation that already happened here (a copy).
  c10::intrusive_ptr<c10d::Work> doneNow(std::unique_lock<std::mutex>& lock,
                                         c10d::OpType type) const;
  /// Stops receiving and gives the context back (deregister, or destruction without it).
  /// Lets the registration go; `closed`: every peer agreed (deregister), so none writes into
  /// the memory any more; otherwise the group keeps the tensor alive.
  void dropRegistration(bool closed);

  c10::intrusive_ptr<ProcessGroupUCX> group_;
  std::shared_ptr<engine::Engine> engine_;
  const std::uint64_t index_;
  std::uint64_t registrations_ = 0;

  mutable std::mutex mutex_;
  bool registered_ = false;
  at::Tensor owned_;  // the registered tensor, when the window owns it
  at::Tensor registeredTensor_;  // the registered tensor, owned or not, while registered
  // The word the peers' same-host probe reads (a fresh random value per registration),
  // kept while registered: a peer may probe it any time before its registration returns.
  std::shared_ptr<const std::uint64_t> canary_;
  char* base_ = nullptr;
  c10::Device device_{c10::kCPU};
  std::uint32_t context_ = 0;
  std::shared_ptr<engine::WindowInbox> inbox_;
  std::vector<Peer> peers_;
};

}  // namespace commux

#endif  // C10D_BACKEND_HAS_WINDOW
