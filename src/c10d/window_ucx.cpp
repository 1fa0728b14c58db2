#include "commux/window_ucx.hpp"

#ifdef C10D_BACKEND_HAS_WINDOW

#include <ATen/MapAllocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/util/Exception.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cstring>
#include <limits>
#include <sstream>

#include "group/peer_table.hpp"
#include "group/shm_setup.hpp"
#include "c10d/validation.hpp"
#include "c10d/work_ucx.hpp"
#include "commux/options.hpp"
#include "commux/process_group_ucx.hpp"
#include "group/group.hpp"
#include "core/group_health.hpp"
#include "core/setup_store.hpp"
#include "cuda/cuda_support.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "engine/process_id.hpp"
#include "engine/window_ops.hpp"
#include "shm/cma.hpp"

namespace commux {
namespace {

// What each rank publishes at a registration, one field per line.
struct Record {
  std::uint32_t context = 0;
  std::int32_t dtype = 0;
  std::uint64_t elements = 0;
  std::uint64_t address = 0;
  std::int64_t pid = 0;
  std::uint64_t canary = 0;       // the address of this registration's CMA canary
  std::uint64_t canaryValue = 0;  // and the value it holds (shm::freshCmaCanary)
  std::int32_t fd = -1;      // shared-memory file of the tensor's storage, or -1
  std::uint64_t mapOffset = 0;
  std::uint64_t mapBytes = 0;
  std::int32_t device = -1;  // the CUDA device of the tensor, -1 for CPU memory
  std::string pidSpace;
  std::string host;

  std::string encode() const {
    std::ostringstream out;
    out << context << '\n'
        << dtype << '\n'
        << elements << '\n'
        << address << '\n'
        << pid << '\n'
        << canary << '\n'
        << canaryValue << '\n'
        << fd << '\n'
        << mapOffset << '\n'
        << mapBytes << '\n'
        << device << '\n'
        << pidSpace << '\n'
        << host << '\n';
    return out.str();
  }
  /// `rank`'s record as read from the store: nothing in it is trusted until checked here
  /// (anyone who can reach the store can write it).
  static Record decode(int rank, const std::string& raw) {
    std::istringstream in(raw);
    Record r;
    in >> r.context >> r.dtype >> r.elements >> r.address >> r.pid >> r.canary >> r.canaryValue >> r.fd >>
        r.mapOffset >> r.mapBytes >> r.device;
    const auto refuse = [rank](const std::string& why) {
      C10_THROW_ERROR(DistBackendError,
                      "commux: window.tensor_register: rank " + std::to_string(rank) +
                          "'s record in the store " + why +
                          "; another program or job may be writing this store's keys");
    };
    if (in.fail()) refuse("is malformed");
    in.ignore();
    std::getline(in, r.pidSpace);
    std::getline(in, r.host);
    if (r.dtype < 0 || r.dtype >= static_cast<std::int32_t>(c10::ScalarType::NumOptions) ||
        r.dtype == static_cast<std::int32_t>(c10::ScalarType::Undefined)) {
      refuse("names no dtype (" + std::to_string(r.dtype) + ")");
    }
    const std::uint64_t es = c10::elementSize(static_cast<c10::ScalarType>(r.dtype));
    if (es == 0 || r.elements > std::numeric_limits<std::uint64_t>::max() / es) {
      refuse("claims " + std::to_string(r.elements) + " elements, more than memory holds");
    }
    if (r.pid <= 0 || r.pid > std::numeric_limits<std::int32_t>::max()) {
      refuse("names no process (pid " + std::to_string(r.pid) + ")");
    }
    if (r.fd >= 0 && (r.mapOffset > r.mapBytes || r.elements * es > r.mapBytes - r.mapOffset)) {
      refuse("places " + std::to_string(r.elements * es) + " bytes at offset " +
             std::to_string(r.mapOffset) + " of a mapping of " + std::to_string(r.mapBytes));
    }
    return r;
  }
};

// A peer's shared memory, mapped into this process.
struct Mapping {
  void* base = MAP_FAILED;
  std::size_t bytes = 0;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, bytes);
  }
};

// Why the file behind a peer's record may not be mapped, or empty when it may: it must be
// what torch's share_memory_() makes (a shared-memory file of this user's, mode 0600) and
// hold what the record claims. A record written by someone else cannot make this rank map
// and write into another file.
std::string unmappable(int fd, const Record& r) {
  struct stat st {};
  if (::fstat(fd, &st) != 0) return "fstat failed";
  if (!S_ISREG(st.st_mode)) return "it is not a regular file";
  struct statfs fs {};
  if (::fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC) return "it is not in shared memory";
  if (st.st_uid != ::geteuid()) return "another user owns it";
  if ((st.st_mode & 07777) != 0600) return "its mode is not 0600";
  if (static_cast<std::uint64_t>(st.st_size) < r.mapBytes) {
    return "it holds " + std::to_string(st.st_size) + " bytes, not the " +
           std::to_string(r.mapBytes) + " its record claims";
  }
  return {};
}

std::shared_ptr<Mapping> mapPeer(int rank, const Record& r) {
  if (r.fd < 0 || r.mapBytes == 0) return nullptr;
  const std::string path = "/proc/" + std::to_string(r.pid) + "/fd/" + std::to_string(r.fd);
  const int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return nullptr;
  if (const std::string why = unmappable(fd, r); !why.empty()) {
    ::close(fd);
    TORCH_WARN("commux: window.tensor_register: rank ", rank, "'s window memory (", path,
               ") is not mapped: ", why, ". Its puts and gets go through messages");
    return nullptr;
  }
  auto mapping = std::make_shared<Mapping>();
  mapping->bytes = r.mapBytes;
  mapping->base = ::mmap(nullptr, r.mapBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (mapping->base == MAP_FAILED) return nullptr;
  return mapping;
}

// Puts to a same-host peer (not mapped) from this size on go through process_vm_writev.
constexpr std::size_t kCmaPutMinBytes = 256 * 1024;

// What tensor.share_memory_() does (torch's file-descriptor strategy), from C++: the
// storage's bytes move to a new shared-memory file whose descriptor stays open, and the
// storage points there from now on, so every tensor on it follows.
// Only storage that torch's CPU allocator made moves: another owner (torch.from_numpy's
// array, from_blob's caller, the pinned-memory allocator) would keep the old memory.
void moveToSharedMemory(const at::Tensor& tensor) {
  const c10::Storage& storage = tensor.storage();
  if (storage.nbytes() == 0 || at::MapAllocator::fromDataPtr(storage.data_ptr()) != nullptr) {
    return;
  }
  const c10::DeleterFnPtr deleter = storage.data_ptr().get_deleter();
  if (deleter != c10::GetDefaultCPUAllocator()->raw_deleter() &&
      deleter != c10::GetCPUAllocator()->raw_deleter()) {
    return;
  }
  const int flags = at::ALLOCATOR_MAPPED_SHAREDMEM | at::ALLOCATOR_MAPPED_EXCLUSIVE |
                    at::ALLOCATOR_MAPPED_KEEPFD | at::ALLOCATOR_MAPPED_UNLINK;
  at::DataPtr shared;
  try {
    shared = at::MapAllocator::makeDataPtr(at::NewProcessWideShmHandle(), flags, storage.nbytes(),
                                           nullptr);
  } catch (const c10::Error& e) {
    // /dev/shm is full or small (a container's 64 MiB): the tensor stays where it is, and
    // this registration goes on with the others (same-host peers write through CMA).
    TORCH_WARN_ONCE(
        "commux: window.tensor_register: could not move the tensor (", storage.nbytes(),
        " bytes) into shared memory, so peers on this host ",
        "reach it through process_vm_writev (slower below 256 KiB): ", e.what_without_backtrace());
    return;
  }
  std::memcpy(shared.get(), storage.data(), storage.nbytes());
  storage.set_data_ptr_noswap(std::move(shared));
}

// Windows hold CPU tensors, and CUDA tensors where this commux compiled its CUDA unit.
void checkDevice(const char* what, const at::Tensor& tensor) {
  TORCH_CHECK_NOT_IMPLEMENTED(tensor.device().is_cpu() || tensor.is_cuda(), "commux: ", what,
                              ": the tensor is on ", tensor.device(),
                              "; commux windows hold cpu and cuda tensors");
  TORCH_CHECK_NOT_IMPLEMENTED(!tensor.is_cuda() || cuda::compiled(), "commux: ", what,
                              ": the tensor is on ", tensor.device(),
                              ", and this commux was built without CUDA");
}

std::optional<int> deviceOf(const at::Tensor& tensor) {
  return tensor.is_cuda() ? std::optional<int>(tensor.device().index()) : std::nullopt;
}

// A call with a CUDA tensor waits for the caller's current stream, so that what the stream
// wrote is what moves, and a later signal cannot overtake the data (host-staged ordering).
void waitForCallerStream(const at::Tensor& tensor) {
  if (!tensor.is_cuda()) return;
  c10::impl::getDeviceGuardImpl(tensor.device().type())->getStream(tensor.device()).synchronize();
}

// The Work of a call that finished in the caller (a copy into mapped memory, a CMA write):
// born complete, without the engine's bookkeeping, which would cost more than the copy of a
// small put (a WorkUCX's construction and release were a fifth of such a put's time).
class DoneWork final : public c10d::Work {
 public:
  DoneWork(int rank, c10d::OpType type) : c10d::Work(rank, type) { finish(); }
  std::vector<at::Tensor> result() override { return {}; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    auto future =
        c10::make_intrusive<c10::ivalue::Future>(c10::ListType::create(c10::TensorType::get()));
    future->markCompleted(c10::IValue(std::vector<at::Tensor>{}));
    return future;
  }
};

std::string windowKey(std::uint64_t window, std::uint64_t registration, int rank) {
  return storeKeyPrefix() + "window/" + std::to_string(window) + "/" +
         std::to_string(registration) + "/" + std::to_string(rank);
}

}  // namespace

WindowUCX::WindowUCX(c10::intrusive_ptr<ProcessGroupUCX> group, std::uint64_t index)
    : group_(std::move(group)), engine_(group_->group_->sharedEngine()), index_(index) {}

WindowUCX::~WindowUCX() {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    if (registered_) dropRegistration(false);
  } catch (...) {
    // A destructor must not throw; the engine may be stopping (process exit).
  }
}

void WindowUCX::checkRegistered(const char* op) const {
  TORCH_CHECK(registered_, "commux: ", op,
              ": no tensor is registered with this window (call tensor_register first, on "
              "every rank)");
}

bool WindowUCX::checkRegistrable(ProcessGroupUCX& group, const at::Tensor& tensor, bool owning) {
  checkTensors("window.tensor_register", {tensor}, false);
  checkDevice("window.tensor_register", tensor);
  TORCH_CHECK_VALUE(tensor.is_contiguous(),
                    "commux: window.tensor_register: the tensor must "
                    "be contiguous");
  // Only a tensor that is its whole storage moves: a view's storage holds more than what
  // is registered, and all of it would be copied (and exposed to the peers' mappings).
  // With COMMUX_SHM=0 no peer maps it: the move would only cost.
  const bool whole = tensor.storage_offset() == 0 && tensor.nbytes() == tensor.storage().nbytes();
  const bool moves = Config::get().windowShare && Config::get().shm && owning && group.size_ > 1 &&
                     !tensor.is_cuda() && whole;
  // The move frees the old memory: never under a transfer still using it.
  if (moves) group.checkStorageIdle("window.tensor_register", tensor);
  return moves;
}

void WindowUCX::tensor_register(const at::Tensor& tensor, bool owning) {
  std::lock_guard<std::mutex> lock(mutex_);
  group_->checkUsable();
  TORCH_CHECK(!registered_,
              "commux: window.tensor_register: a tensor is registered already; "
              "call tensor_deregister first");
  const bool moves = checkRegistrable(*group_, tensor, owning);
  const int rank = group_->rank_;
  const int size = group_->size_;
  shm::allowReaders();
  const bool onCuda = tensor.is_cuda();
  if (moves) moveToSharedMemory(tensor);

  Record mine;
  mine.context = engine_->contexts().acquire();
  mine.dtype = static_cast<std::int32_t>(tensor.scalar_type());
  mine.elements = static_cast<std::uint64_t>(tensor.numel());
  char* base = tensor.numel() == 0 ? nullptr : static_cast<char*>(tensor.data_ptr());
  mine.address = reinterpret_cast<std::uintptr_t>(base);
  const engine::ProcessId self = engine::ProcessId::self();
  mine.pid = self.pid;
  mine.pidSpace = self.pidSpace;
  auto canary = shm::freshCmaCanary();
  mine.canary = reinterpret_cast<std::uintptr_t>(canary.get());
  mine.canaryValue = *canary;
  mine.host = hostIdentity();
  if (onCuda) mine.device = tensor.device().index();
  if (auto* map = onCuda ? nullptr : at::MapAllocator::fromDataPtr(tensor.storage().data_ptr());
      map != nullptr && map->fd() >= 0 && base != nullptr) {
    mine.fd = map->fd();
    mine.mapOffset = static_cast<std::uint64_t>(base - static_cast<char*>(map->data()));
    mine.mapBytes = static_cast<std::uint64_t>(map->size());
  }

  const std::size_t bytes = mine.elements * tensor.element_size();
  auto inbox = std::make_shared<engine::WindowInbox>(
      mine.context, rank, size, base, bytes, deviceOf(tensor),
      engine::Description("window #" + std::to_string(index_) + " on rank " +
                          std::to_string(rank)));
  try {
    engine_->submit(engine::Submission::start(inbox));
    // A rank that dies before it publishes is found within the failure detection's bound,
    // and a rank that gives up says so in its key, instead of the store's timeout.
    const core::SetupDeaths deaths = group_->group_->setupDeaths("a window registration");
    core::SetupStore store(*group_->group_->store(), deaths);
    const std::string mineKey = windowKey(index_, registrations_, rank);
    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) {
      keys.push_back(windowKey(index_, registrations_, r));
      ranks.push_back(r);
    }
    std::vector<std::string> raw;
    try {
      store.put(mineKey, mine.encode());
      raw = store.takeAll(keys, ranks);
    } catch (const core::SetupAbandoned& e) {
      try {
        store.abandon(e.what(), {mineKey});
      } catch (const std::exception&) {
        // The store itself is gone: the others' waits end with its errors.
      }
      C10_THROW_ERROR(DistBackendError,
                      std::string("commux: window.tensor_register (window #") +
                          std::to_string(index_) + ") was given up: " + e.what());
    }
    const auto routes = group_->group_->peers().get(ranks, "a window registration");
    std::vector<Peer> peers(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      const Record theirs = Record::decode(r, raw[static_cast<std::size_t>(r)]);
      // The process this rank's peer record names (and the group watches): a record naming
      // another would point this rank's writes (mapped, CMA) at that process.
      if (const std::int64_t pid = group_->group_->peers().pidOf(r); theirs.pid != pid) {
        C10_THROW_ERROR(DistBackendError,
                        "commux: window.tensor_register: rank " + std::to_string(r) +
                            "'s record in the store names process " + std::to_string(theirs.pid) +
                            ", but its peer record names " + std::to_string(pid) +
                            "; another program or job may be writing this store's keys");
      }
      Peer& peer = peers[static_cast<std::size_t>(r)];
      auto route = std::make_shared<engine::Route>();
      route->address = routes[static_cast<std::size_t>(r)]->address;
      route->context = theirs.context;
      peer.route = std::move(route);
      peer.elements = theirs.elements;
      peer.dtype = static_cast<c10::ScalarType>(theirs.dtype);
      peer.cuda = theirs.device >= 0;
      peer.address = reinterpret_cast<char*>(static_cast<std::uintptr_t>(theirs.address));
      peer.pid = static_cast<pid_t>(theirs.pid);
      if (r == rank) {
        peer.path = Peer::Path::Self;
        continue;
      }
      // A process of this host, in this PID namespace, that this one may write into.
      const bool local = !mine.host.empty() && theirs.host == mine.host && !mine.pidSpace.empty() &&
                         theirs.pidSpace == mine.pidSpace;
      if (!local || peer.cuda) continue;  // device memory: UCX messages (cuda_ipc or staged)
      if (auto mapping = mapPeer(r, theirs)) {
        peer.mapped = static_cast<char*>(mapping->base) + theirs.mapOffset;
        peer.mapping = std::move(mapping);
        peer.path = Peer::Path::Mapped;
        continue;
      }
      std::uint64_t canary = 0;
      if (shm::cmaRead(peer.pid,
                       reinterpret_cast<const void*>(static_cast<std::uintptr_t>(theirs.canary)),
                       &canary, sizeof(canary)) &&
          canary == theirs.canaryValue) {
        peer.path = Peer::Path::Cma;
      }
    }
    std::vector<std::shared_ptr<const engine::Route>> replyRoutes;
    for (const auto& peer : peers) replyRoutes.push_back(peer.route);
    engine_->submit(engine::Submission::start(
        std::make_shared<engine::WindowRoutesOp>(inbox, std::move(replyRoutes))));
    peers_ = std::move(peers);
  } catch (...) {
    engine_->submit(
        engine::Submission::cancel(inbox, engine::commError("commux: window registration failed")));
    engine_->contexts().release(mine.context);
    throw;
  }
  ++registrations_;
  if (owning) owned_ = tensor;
  registeredTensor_ = tensor;
  base_ = base;
  device_ = tensor.device();
  context_ = mine.context;
  inbox_ = std::move(inbox);
  canary_ = std::move(canary);
  registered_ = true;
}

void WindowUCX::dropRegistration(bool closed) {
  if (!inbox_->finished()) {
    engine_->submit(
        engine::Submission::cancel(inbox_, engine::commError("commux: the window was released")));
  }
  if (!closed && base_ != nullptr) {
    // Not every peer agreed the window is closed: a peer may still put into this memory (a
    // message landing, or process_vm_writev into it directly). It lives as long as the
    // group, not the window, so no later allocation can sit where such a write lands.
    group_->keepUntilDestroyed(registeredTensor_);
  }
  registeredTensor_ = at::Tensor();
  engine_->submit(engine::Submission::purge(context_));
  engine_->contexts().release(context_);
  inbox_.reset();
  peers_.clear();
  owned_ = at::Tensor();
  base_ = nullptr;
  registered_ = false;
}

void WindowUCX::tensor_deregister() {
  std::lock_guard<std::mutex> lock(mutex_);
  checkRegistered("window.tensor_deregister");
  std::vector<std::shared_ptr<const engine::Route>> others;
  for (int r = 0; r < group_->size_; ++r) {
    if (r != group_->rank_) others.push_back(peers_[static_cast<std::size_t>(r)].route);
  }
  // Whatever happens, this rank lets the memory go: a failed close (a dead peer) raises.
  try {
    auto work = group_->makeWork(
        c10d::OpType::BARRIER, {},
        engine::Description("window.tensor_deregister (window #" + std::to_string(index_) + ")"),
        c10d::kUnsetTimeout);
    group_->launch(work, std::make_shared<engine::CloseWindowOp>(
                             inbox_, std::move(others), static_cast<std::uint32_t>(group_->rank_),
                             work->parts(), work->completer()));
    work->wait();
  } catch (...) {
    dropRegistration(false);
    throw;
  }
  dropRegistration(true);
}

const WindowUCX::Peer& WindowUCX::target(const char* op, int64_t rank) const {
  checkRegistered(op);
  TORCH_CHECK_VALUE(rank == static_cast<int>(rank), "commux: ", op, ": invalid peer rank ", rank);
  checkPeer(op, "peer", static_cast<int>(rank), group_->size_);
  return peers_[static_cast<std::size_t>(rank)];
}

std::pair<std::size_t, std::size_t> WindowUCX::checkTransfer(const char* what,
                                                             const at::Tensor& tensor,
                                                             const Peer& peer, int64_t rank,
                                                             int64_t offset) {
  checkTensors(what, {tensor}, false);
  checkDevice(what, tensor);
  TORCH_CHECK_VALUE(tensor.is_contiguous(), "commux: ", what, ": the tensor must be contiguous");
  TORCH_CHECK_VALUE(tensor.is_cuda() == peer.cuda, "commux: ", what, ": the tensor is on ",
                    tensor.device(), " but rank ", rank, "'s window is in ",
                    peer.cuda ? "cuda" : "cpu", " memory");
  TORCH_CHECK_VALUE(tensor.scalar_type() == peer.dtype, "commux: ", what, ": the tensor is ",
                    tensor.scalar_type(), " but rank ", rank, "'s window holds ", peer.dtype);
  const auto count = static_cast<std::uint64_t>(tensor.numel());
  TORCH_CHECK_VALUE(offset >= 0 && static_cast<std::uint64_t>(offset) <= peer.elements &&
                        count <= peer.elements - static_cast<std::uint64_t>(offset),
                    "commux: ", what, ": ", count, " elements at offset ", offset,
                    " do not fit rank ", rank, "'s window of ", peer.elements, " elements");
  const std::size_t itemBytes = tensor.element_size();
  return {count * itemBytes, static_cast<std::size_t>(offset) * itemBytes};
}

void WindowUCX::checkAlive(const char* what, int rank) const {
  // A copy into a dead peer's mapped memory would succeed and reach nobody: fail it as a
  // message to it fails (group::Group::checkHealthy), naming the rank.
  const std::string why = group_->group_->deadWhy(rank);
  if (!why.empty()) {
    C10_THROW_ERROR(DistBackendError, std::string("commux: ") + what + ": " +
                                          core::lostMember(rank, why) +
                                          "; operations with it fail from now on");
  }
}

at::Tensor WindowUCX::ownSlice(std::size_t offsetBytes, std::int64_t count) const {
  return at::from_blob(base_ + offsetBytes, {count},
                       at::TensorOptions()
                           .dtype(peers_[static_cast<std::size_t>(group_->rank_)].dtype)
                           .device(device_));
}

c10::intrusive_ptr<c10d::Work> WindowUCX::finishCall(std::unique_lock<std::mutex>& lock,
                                                     const c10::intrusive_ptr<c10d::Work>& work,
                                                     bool asyncOp) {
  lock.unlock();  // a wait must not hold the window, nor a completion's callbacks run under it
  if (!asyncOp) work->wait();
  return work;
}

c10::intrusive_ptr<c10d::Work> WindowUCX::doneNow(std::unique_lock<std::mutex>& lock,
                                                  c10d::OpType type) const {
  lock.unlock();
  return c10::make_intrusive<DoneWork>(group_->rank_, type);
}
c10::intrusive_ptr<c10d::Work> WindowUCX::put(const at::Tensor& tensor, int64_t dstRank,
                                              int64_t targetOffsetNelems, bool asyncOp,
                                              const c10d::PutOptions& opts) {
  // The hint "signal" makes it put_signal for callers that only see c10d::Window (C++, or
  // code written for any backend); other backends' hints are ignored, as hints are.
  bool signal = false;
  if (auto hint = opts.hints.find("signal"); hint != opts.hints.end()) {
    TORCH_CHECK_VALUE(hint->second == "1" || hint->second == "0" || hint->second == "true" ||
                          hint->second == "false",
                      "commux: window.put: the hint \"signal\" is \"", hint->second,
                      "\"; use \"1\" or \"0\"");
    signal = hint->second == "1" || hint->second == "true";
  }
  return putAndMaybeSignal(signal ? "window.put_signal" : "window.put", tensor, dstRank,
                           targetOffsetNelems, asyncOp, opts.timeout, signal);
}

c10::intrusive_ptr<c10d::Work> WindowUCX::putSignal(const at::Tensor& tensor, int64_t dstRank,
                                                    int64_t targetOffsetNelems, bool asyncOp,
                                                    std::chrono::milliseconds timeout) {
  return putAndMaybeSignal("window.put_signal", tensor, dstRank, targetOffsetNelems, asyncOp,
                           timeout, true);
}

std::string WindowUCX::path(int64_t rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  switch (target("window.path", rank).path) {
    case Peer::Path::Self:
      return "self";
    case Peer::Path::Mapped:
      return "mapped";
    case Peer::Path::Cma:
      return "cma";
    case Peer::Path::Messages:
      return "messages";
  }
  return "unknown";
}

c10::intrusive_ptr<c10d::Work> WindowUCX::putAndMaybeSignal(
    const char* op, const at::Tensor& tensor, int64_t dstRank, int64_t targetOffsetNelems,
    bool asyncOp, std::chrono::milliseconds timeout, bool signal) {
  std::unique_lock<std::mutex> lock(mutex_);
  const char* what = op;
  const Peer& peer = target(what, dstRank);
  const auto [bytes, offsetBytes] = checkTransfer(what, tensor, peer, dstRank, targetOffsetNelems);
  const int dst = static_cast<int>(dstRank);
  const bool onCuda = tensor.is_cuda();
  group_->checkUsable();
  checkAlive(what, dst);
  waitForCallerStream(tensor);
  const void* data = bytes == 0 ? nullptr : tensor.data_ptr();
  bool copied = true;
  switch (peer.path) {
    case Peer::Path::Self:
      if (bytes != 0 && onCuda) {
        ownSlice(offsetBytes, tensor.numel()).copy_(tensor.view({-1}));
        waitForCallerStream(tensor);
      } else if (bytes != 0) {
        std::memmove(base_ + offsetBytes, data, bytes);
      }
      break;
    case Peer::Path::Mapped:
      if (bytes != 0) std::memcpy(peer.mapped + offsetBytes, data, bytes);
      break;
    case Peer::Path::Cma:
      // process_vm_writev pins the target's pages for every call: below this size a UCX
      // message over shared memory is faster (benchmarks/window.py, docs/performance.md).
      if (bytes < kCmaPutMinBytes) {
        copied = false;
        break;
      }
      if (!shm::cmaWrite(peer.pid, peer.address + offsetBytes, data, bytes)) {
        const int error = errno;
        TORCH_CHECK(!engine_->peerFailed(peer.route->address), "commux: ", what, " to rank ",
                    dstRank, " failed: the rank is gone");
        // The kernel refused (a ptrace policy changed): messages from now on.
        TORCH_WARN_ONCE("commux: ", what, ": writing into rank ", dstRank, "'s memory failed (",
                        std::strerror(error), "); its puts go through UCX messages from now on");
        peers_[static_cast<std::size_t>(dst)].path = Peer::Path::Messages;
        copied = false;
      }
      break;
    case Peer::Path::Messages:
      copied = false;
      break;
  }
  if (!copied && peer.path == Peer::Path::Cma) {
    // A later get must not read around this put: it goes through the inbox until then.
    peers_[static_cast<std::size_t>(dst)].messagesInFlight = true;
  }
  if (copied && !signal) {
    return doneNow(lock, c10d::OpType::SEND);
  }
  // A CUDA put's Work is not tied to the stream: the call waited for it already.
  auto work = group_->makeWork(
      c10d::OpType::SEND, onCuda ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{tensor},
      engine::Description::p2p(signal ? "window put_signal" : "window put", "to", dst, 0, bytes, 1),
      timeout);
  work->setPeer(dst);
  if (copied) {
    // The data is in place: the signal alone travels.
    group_->launch(work, std::make_shared<engine::WindowSignalOp>(
                             peer.route, static_cast<std::uint32_t>(group_->rank_), work->parts(),
                             work->completer()));
  } else {
    group_->launch(work,
                   std::make_shared<engine::WindowPutOp>(
                       peer.route, static_cast<std::uint32_t>(group_->rank_), data, bytes,
                       deviceOf(tensor), offsetBytes,
                       std::shared_ptr<void>(new at::Tensor(tensor),
                                             [](void* t) { delete static_cast<at::Tensor*>(t); }),
                       signal, work->parts(), work->completer()));
  }
  return finishCall(lock, work, asyncOp);
}

c10::intrusive_ptr<c10d::Work> WindowUCX::get(const at::Tensor& tensor, int64_t srcRank,
                                              int64_t sourceOffsetNelems, bool asyncOp,
                                              std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const char* what = "window.get";
  const Peer& peer = target(what, srcRank);
  const auto [bytes, offsetBytes] = checkTransfer(what, tensor, peer, srcRank, sourceOffsetNelems);
  const int src = static_cast<int>(srcRank);
  const bool onCuda = tensor.is_cuda();
  group_->checkUsable();
  checkAlive(what, src);
  waitForCallerStream(tensor);
  void* data = bytes == 0 ? nullptr : tensor.data_ptr();
  bool copied = true;
  switch (peer.path) {
    case Peer::Path::Self:
      if (bytes != 0 && onCuda) {
        tensor.view({-1}).copy_(ownSlice(offsetBytes, tensor.numel()));
        waitForCallerStream(tensor);
      } else if (bytes != 0) {
        std::memmove(data, base_ + offsetBytes, bytes);
      }
      break;
    case Peer::Path::Mapped:
      if (bytes != 0) std::memcpy(data, peer.mapped + offsetBytes, bytes);
      break;
    case Peer::Path::Cma:
      if (peer.messagesInFlight) {
        // Puts that went as messages may not have landed: the inbox orders this get after
        // them (and then nothing is in flight any more).
        peers_[static_cast<std::size_t>(src)].messagesInFlight = false;
        copied = false;
        break;
      }
      if (bytes != 0 && !shm::cmaRead(peer.pid, peer.address + offsetBytes, data, bytes)) {
        TORCH_CHECK(!engine_->peerFailed(peer.route->address), "commux: ", what, " from rank ",
                    srcRank, " failed: the rank is gone");
        copied = false;  // the kernel refused this once: ask the peer instead
      }
      break;
    case Peer::Path::Messages:
      copied = false;
      break;
  }
  if (copied) {
    return doneNow(lock, c10d::OpType::RECV);
  }
  auto work = group_->makeWork(
      c10d::OpType::RECV, onCuda ? std::vector<at::Tensor>{} : std::vector<at::Tensor>{tensor},
      engine::Description::p2p("window get", "from", src, 0, bytes, 1), timeout);
  work->setPeer(src);
  group_->launch(
      work,
      std::make_shared<engine::WindowGetOp>(
          peer.route, static_cast<std::uint32_t>(group_->rank_), static_cast<std::uint32_t>(src),
          context_, data, bytes, deviceOf(tensor), offsetBytes,
          std::shared_ptr<void>(new at::Tensor(tensor),
                                [](void* t) { delete static_cast<at::Tensor*>(t); }),
          work->parts(), work->completer()));
  return finishCall(lock, work, asyncOp);
}

c10::intrusive_ptr<c10d::Work> WindowUCX::flush(int64_t peerRank, bool asyncOp,
                                                std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Peer& peer = target("window.flush", peerRank);
  const int dst = static_cast<int>(peerRank);
  group_->checkUsable();
  if (peer.path == Peer::Path::Cma && peer.messagesInFlight) {
    peers_[static_cast<std::size_t>(dst)].messagesInFlight = false;
  } else if (peer.path != Peer::Path::Messages) {
    // Those puts completed in the caller.
    return doneNow(lock, c10d::OpType::SEND);
  }
  auto work =
      group_->makeWork(c10d::OpType::SEND, {},
                       engine::Description::p2p("window flush", "to", dst, 0, 0, 0), timeout);
  work->setPeer(dst);
  group_->launch(work, std::make_shared<engine::WindowGetOp>(
                           peer.route, static_cast<std::uint32_t>(group_->rank_),
                           static_cast<std::uint32_t>(dst), context_, nullptr, 0, std::nullopt, 0,
                           nullptr, work->parts(), work->completer()));
  return finishCall(lock, work, asyncOp);
}

c10::intrusive_ptr<c10d::Work> WindowUCX::signal(int64_t peerRank, bool asyncOp,
                                                 const c10d::SignalOptions& opts) {
  std::unique_lock<std::mutex> lock(mutex_);
  const Peer& peer = target("window.signal", peerRank);
  const int dst = static_cast<int>(peerRank);
  auto work =
      group_->makeWork(c10d::OpType::SEND, {},
                       engine::Description::p2p("window signal", "to", dst, 0, 0, 0), opts.timeout);
  work->setPeer(dst);
  group_->launch(work, std::make_shared<engine::WindowSignalOp>(
                           peer.route, static_cast<std::uint32_t>(group_->rank_), work->parts(),
                           work->completer()));
  return finishCall(lock, work, asyncOp);
}

c10::intrusive_ptr<c10d::Work> WindowUCX::wait_signal(int64_t peerRank, bool asyncOp,
                                                      const c10d::WaitSignalOptions& opts) {
  std::unique_lock<std::mutex> lock(mutex_);
  target("window.wait_signal", peerRank);
  const int src = static_cast<int>(peerRank);
  auto work = group_->makeWork(c10d::OpType::RECV, {},
                               engine::Description::p2p("window wait_signal", "from", src, 0, 0, 0),
                               opts.timeout);
  work->setPeer(src);
  group_->launch(
      work, std::make_shared<engine::WaitSignalOp>(inbox_, src, work->parts(), work->completer()));
  return finishCall(lock, work, asyncOp);
}

at::Tensor WindowUCX::map_remote_tensor(int64_t rank) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Peer& peer = target("window.map_remote_tensor", rank);
  const auto elements = static_cast<int64_t>(peer.elements);
  if (peer.path == Peer::Path::Self) {
    if (owned_.defined()) return owned_.view({-1});
    return ownSlice(0, elements);
  }
  const auto options = at::TensorOptions().dtype(peer.dtype).device(at::kCPU);
  TORCH_CHECK(peer.path == Peer::Path::Mapped, "commux: window.map_remote_tensor: rank ", rank,
              "'s window is not mappable from rank ", group_->rank_,
              (peer.cuda ? " (it is in cuda memory)"
               : peer.path == Peer::Path::Messages
                   ? " (it is on another host, or shared memory is off)"
                   : " (its tensor is not in shared memory: register a tensor made with "
                     "share_memory_() to map it)"),
              "; use put and signal, and get_attr to ask first");
  auto mapping = peer.mapping;
  return at::from_blob(
      peer.mapped, {elements}, [mapping](void*) mutable { mapping.reset(); }, options);
}

c10d::WindowAttr WindowUCX::get_attr(int64_t peerRank) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Peer& peer = target("window.get_attr", peerRank);
  c10d::WindowAttr attr;
  attr.access_type = peer.path == Peer::Path::Self || peer.path == Peer::Path::Mapped
                         ? c10d::WindowAccessType::UNIFIED
                         : c10d::WindowAccessType::SEPARATE;
  return attr;
}

c10::intrusive_ptr<c10d::Window> ProcessGroupUCX::new_window(
    const std::optional<at::Tensor>& tensor) {
  checkUsable();
  // Before the window takes its number: a refusal here leaves the numbering as it was, so
  // the next window of this rank still meets the same window of the others.
  if (tensor) WindowUCX::checkRegistrable(*this, *tensor, true);
  auto window = c10::make_intrusive<WindowUCX>(
      c10::intrusive_ptr<ProcessGroupUCX>::reclaim_copy(this), windows_++);
  if (tensor) window->tensor_register(*tensor, true);
  return window;
}

}  // namespace commux

#endif  // C10D_BACKEND_HAS_WINDOW
