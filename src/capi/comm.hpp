#pragma once
// What a C API handle holds, and the one way every C call turns C++ outcomes into a
// result code and the thread's last-error message.
#include <atomic>
#include <chrono>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "commux/commux.h"
#include "core/buffer.hpp"
#include "core/stream.hpp"
#include "core/kv_store.hpp"
#include "core/reduce.hpp"
#include "engine/engine.hpp"
#include "group/group.hpp"
#include "group/request.hpp"

namespace commux::bootstrap {
class TcpStore;
}
namespace commux::capi {
class MembershipWatch;
}

struct commuxComm {
  std::shared_ptr<commux::engine::Engine> engine;
  std::unique_ptr<commux::group::Group> group;
  std::atomic<std::int64_t> timeoutMs{30 * 60 * 1000};
  /// The communicator's keys in the bootstrap store (its generation's prefix), for
  /// commuxCommFinalize; and whether this process serves that store.
  std::shared_ptr<commux::bootstrap::TcpStore> store;
  bool servesStore = false;
  /// An init's communicator: the watch of the connection it joined the store from, and
  /// what the store said when two jobs met there (then every call fails with it).
  std::unique_ptr<commux::capi::MembershipWatch> membership;
  std::mutex poisonMutex;
  std::string poisoned;
  /// Ends the membership watch (before the group goes); in the destructor too.
  ~commuxComm();
  /// commuxCommSplit and commuxWinCreate calls so far: every rank counts them alike (they
  /// are collective).
  /// Open commuxGroupStart/End groups (on any thread) that hold this communicator: it
  /// cannot be destroyed until they end, which still use it.
  std::atomic<int> openGroups{0};
  std::uint32_t splits = 0;
  std::uint32_t shrinks = 0;
  std::uint64_t windows = 0;
};

struct commuxRequest {
  commuxComm* comm = nullptr;
  std::shared_ptr<commux::group::Request> request;
  int tag = 0;
};

namespace commux::capi {

/// Runs `body`, returning commuxSuccess, or the code of what it threw (and recording the
/// message as this thread's last error). Nothing escapes into C.
template <typename Body>
commuxResult_t guarded(Body&& body) noexcept;

/// Records `message` as this thread's last error and returns `result`.
commuxResult_t failWith(commuxResult_t result, const std::string& message) noexcept;
/// The code and message of the exception being handled.
commuxResult_t translateCurrent() noexcept;

/// The communicator's timeout (0: none, as a limit far beyond any job).
std::chrono::milliseconds timeoutOf(const commuxComm* comm);
/// Raises InvalidArgument for a null or destroyed handle.
commuxComm& checkComm(commuxComm_t comm);
/// A Buffer over the caller's memory: host memory with a NULL `stream`, device memory with
/// one (a cudaStream_t). Raises InvalidArgument for a bad type, a null pointer with a
/// nonzero count, a count whose bytes overflow, host memory with a stream or device memory
/// without one; Unsupported for a stream in a build without the CUDA device path.
core::Buffer callBuffer(const void* data, std::size_t count, commuxDataType_t type,
                        void* stream, const char* what);
/// The stream a call on `buffer` is ordered after: empty for host memory.
std::optional<core::Stream> streamOf(const core::Buffer& buffer, void* stream);
core::Dtype dtypeOf(commuxDataType_t type, const char* what);
core::ReduceOp reduceOpOf(commuxRedOp_t op, const char* what);
/// Waits for `request` (the communicator's timeout), raising its error.
void waitFor(const commuxComm& comm, group::Request& request);
/// Inside commuxGroupStart/End on this thread: keeps `request` for commuxGroupEnd to wait
/// for and returns true; else false (the caller waits).
bool deferToGroup(commuxComm& comm, std::shared_ptr<group::Request> request);
/// Whether this thread is between commuxGroupStart and commuxGroupEnd, and notes that
/// `comm` takes part (its batch is opened at its first call).
bool inGroup(commuxComm& comm);

template <typename Body>
commuxResult_t guarded(Body&& body) noexcept {
  try {
    body();
    return commuxSuccess;
  } catch (...) {
    return translateCurrent();
  }
}

}  // namespace commux::capi
