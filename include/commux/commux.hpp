// C++ over commux's C API (commux.h): a communicator, a request and a group as RAII
// objects, element types taken from the buffer's type, and failures as exceptions that keep
// the C API's code and message. Header-only: it links libcommux_core like a C program, and
// adds no ABI of its own. Thread safety, streams and timeouts are the C API's (commux.h).
#pragma once

#include <chrono>
#include <complex>
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "commux/commux.h"

namespace commux {

/// A failed call: what() is commuxGetLastError's message, code() the C API's result.
class Error : public std::runtime_error {
 public:
  Error(commuxResult_t code, const std::string& message)
      : std::runtime_error(message), code_(code) {}
  commuxResult_t code() const noexcept { return code_; }

 private:
  commuxResult_t code_;
};

namespace detail {
inline void check(commuxResult_t result) {
  if (result != commuxSuccess) throw Error(result, commuxGetLastError(nullptr));
}
}  // namespace detail

/// The C API's type for a C++ element type (a compile error for one it has none for).
/// Half-precision types have no standard C++ type: use the raw calls with commuxFloat16
/// or commuxBfloat16 over uint16_t storage.
template <typename T>
constexpr commuxDataType_t dataTypeOf() {
  if constexpr (std::is_same_v<T, std::int8_t>) return commuxInt8;
  else if constexpr (std::is_same_v<T, std::uint8_t>) return commuxUint8;
  else if constexpr (std::is_same_v<T, std::int16_t>) return commuxInt16;
  else if constexpr (std::is_same_v<T, std::int32_t>) return commuxInt32;
  else if constexpr (std::is_same_v<T, std::int64_t>) return commuxInt64;
  else if constexpr (std::is_same_v<T, float>) return commuxFloat32;
  else if constexpr (std::is_same_v<T, double>) return commuxFloat64;
  else if constexpr (std::is_same_v<T, bool>) return commuxBool;
  else if constexpr (std::is_same_v<T, std::complex<float>>) return commuxComplex64;
  else if constexpr (std::is_same_v<T, std::complex<double>>) return commuxComplex128;
  else static_assert(sizeof(T) == 0, "commux: no commuxDataType_t for this element type");
}

/// A unique id (commuxGetUniqueId): make it on one rank, pass its bytes to the others.
class UniqueId {
 public:
  static UniqueId make() {
    UniqueId id;
    detail::check(commuxGetUniqueId(&id.id_));
    return id;
  }
  static UniqueId fromBytes(const void* bytes) {
    UniqueId id;
    std::memcpy(id.id_.internal, bytes, sizeof(id.id_.internal));
    return id;
  }
  const char* bytes() const noexcept { return id_.internal; }
  static constexpr std::size_t size() noexcept { return COMMUX_UNIQUE_ID_BYTES; }
  const commuxUniqueId& raw() const noexcept { return id_; }

 private:
  commuxUniqueId id_{};
};

/// A non-blocking message; destroying one that is still in flight cancels it.
class Request {
 public:
  Request() = default;
  explicit Request(commuxRequest_t raw) noexcept : raw_(raw) {}
  Request(Request&& other) noexcept : raw_(std::exchange(other.raw_, nullptr)) {}
  Request& operator=(Request&& other) noexcept {
    if (this != &other) {
      reset();
      raw_ = std::exchange(other.raw_, nullptr);
    }
    return *this;
  }
  ~Request() { reset(); }

  /// Waits for it and returns its status; raises its error.
  commuxStatus wait() {
    commuxStatus status{-1, -1};
    detail::check(commuxWait(std::exchange(raw_, nullptr), &status));
    return status;
  }
  /// True (and its status) once done; raises its error then.
  bool test(commuxStatus* status = nullptr) {
    int done = 0;
    commuxResult_t result = commuxTest(raw_, &done, status);
    if (done) raw_ = nullptr;
    detail::check(result);
    return done != 0;
  }
  bool pending() const noexcept { return raw_ != nullptr; }

 private:
  void reset() noexcept {
    if (raw_) commuxRequestFree(std::exchange(raw_, nullptr));
  }
  commuxRequest_t raw_ = nullptr;
};

/// commuxGroupStart on construction, commuxGroupEnd on end() (or destruction, which cannot
/// raise: call end() to see the group's error).
class Group {
 public:
  Group() { detail::check(commuxGroupStart()); }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  ~Group() {
    if (open_) commuxGroupEnd();
  }
  void end() {
    open_ = false;
    detail::check(commuxGroupEnd());
  }

 private:
  bool open_ = true;
};

enum class ReduceOp { Sum = commuxSum, Prod = commuxProd, Min = commuxMin, Max = commuxMax,
                      Band = commuxBand, Bor = commuxBor, Bxor = commuxBxor };

/// A communicator; destroying it destroys the C API's (cancelling what is in flight).
class Comm {
 public:
  /// commuxCommInitRank.
  Comm(int size, const UniqueId& id, int rank) {
    detail::check(commuxCommInitRank(&comm_, size, id.raw(), rank));
  }
  /// commuxCommInitFromEnv.
  static Comm fromEnvironment() {
    commuxComm_t raw = nullptr;
    detail::check(commuxCommInitFromEnv(&raw));
    return Comm(raw);
  }
  Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    if (this != &other) {
      commuxCommDestroy(comm_);
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm() { commuxCommDestroy(comm_); }

  int rank() const {
    int r = -1;
    detail::check(commuxCommUserRank(comm_, &r));
    return r;
  }
  int size() const {
    int n = -1;
    detail::check(commuxCommCount(comm_, &n));
    return n;
  }
  void setTimeout(std::chrono::milliseconds timeout) {
    detail::check(commuxCommSetTimeout(comm_, timeout.count()));
  }
  /// True while no member died and no collective failed here.
  bool healthy() const {
    commuxResult_t async = commuxSuccess;
    detail::check(commuxCommGetAsyncError(comm_, &async));
    return async == commuxSuccess;
  }
  void abort() { detail::check(commuxCommAbort(comm_)); }
  /// commuxCommFinalize: the orderly end, before the last rank leaves.
  void finalize() { detail::check(commuxCommFinalize(comm_)); }
  commuxComm_t raw() const noexcept { return comm_; }

  template <typename T>
  void send(const T* data, std::size_t count, int peer, int tag) {
    detail::check(commuxSend(data, count, dataTypeOf<T>(), peer, tag, comm_, nullptr));
  }
  template <typename T>
  commuxStatus recv(T* data, std::size_t count, int peer, int tag) {
    commuxStatus status{-1, -1};
    detail::check(commuxRecv(data, count, dataTypeOf<T>(), peer, tag, comm_, nullptr, &status));
    return status;
  }
  template <typename T>
  Request isend(const T* data, std::size_t count, int peer, int tag) {
    commuxRequest_t raw = nullptr;
    detail::check(commuxIsend(data, count, dataTypeOf<T>(), peer, tag, comm_, nullptr, &raw));
    return Request(raw);
  }
  template <typename T>
  Request irecv(T* data, std::size_t count, int peer, int tag) {
    commuxRequest_t raw = nullptr;
    detail::check(commuxIrecv(data, count, dataTypeOf<T>(), peer, tag, comm_, nullptr, &raw));
    return Request(raw);
  }

  template <typename T>
  void allReduce(const T* send, T* recv, std::size_t count, ReduceOp op = ReduceOp::Sum) {
    detail::check(commuxAllReduce(send, recv, count, dataTypeOf<T>(),
                                  static_cast<commuxRedOp_t>(op), comm_, nullptr));
  }
  template <typename T>
  void allReduce(std::vector<T>& inPlace, ReduceOp op = ReduceOp::Sum) {
    allReduce(inPlace.data(), inPlace.data(), inPlace.size(), op);
  }
  template <typename T>
  void reduce(const T* send, T* recv, std::size_t count, int root, ReduceOp op = ReduceOp::Sum) {
    detail::check(commuxReduce(send, recv, count, dataTypeOf<T>(), static_cast<commuxRedOp_t>(op),
                               root, comm_, nullptr));
  }
  template <typename T>
  void broadcast(const T* send, T* recv, std::size_t count, int root) {
    detail::check(commuxBroadcast(send, recv, count, dataTypeOf<T>(), root, comm_, nullptr));
  }
  template <typename T>
  void broadcast(std::vector<T>& inPlace, int root) {
    broadcast(inPlace.data(), inPlace.data(), inPlace.size(), root);
  }
  template <typename T>
  void allGather(const T* send, T* recv, std::size_t sendCount) {
    detail::check(commuxAllGather(send, recv, sendCount, dataTypeOf<T>(), comm_, nullptr));
  }
  template <typename T>
  void reduceScatter(const T* send, T* recv, std::size_t recvCount, ReduceOp op = ReduceOp::Sum) {
    detail::check(commuxReduceScatter(send, recv, recvCount, dataTypeOf<T>(),
                                      static_cast<commuxRedOp_t>(op), comm_, nullptr));
  }
  template <typename T>
  void allToAll(const T* send, T* recv, std::size_t count) {
    detail::check(commuxAllToAll(send, recv, count, dataTypeOf<T>(), comm_, nullptr));
  }
  template <typename T>
  void allToAllv(const T* send, const std::vector<std::size_t>& sendCounts, T* recv,
                 const std::vector<std::size_t>& recvCounts) {
    const auto n = static_cast<std::size_t>(size());
    if (sendCounts.size() != n || recvCounts.size() != n) {
      throw Error(commuxInvalidArgument, "commux: allToAllv: the counts need one entry per rank (" +
                                             std::to_string(n) + ")");
    }
    detail::check(commuxAllToAllv(send, sendCounts.data(), recv, recvCounts.data(),
                                  dataTypeOf<T>(), comm_, nullptr));
  }
  template <typename T>
  void gather(const T* send, T* recv, std::size_t sendCount, int root) {
    detail::check(commuxGather(send, recv, sendCount, dataTypeOf<T>(), root, comm_, nullptr));
  }
  template <typename T>
  void scatter(const T* send, T* recv, std::size_t recvCount, int root) {
    detail::check(commuxScatter(send, recv, recvCount, dataTypeOf<T>(), root, comm_, nullptr));
  }
  void barrier() { detail::check(commuxBarrier(comm_, nullptr)); }

 private:
  explicit Comm(commuxComm_t raw) noexcept : comm_(raw) {}
  commuxComm_t comm_ = nullptr;
};

/// A one-sided window (commuxWinCreate): this rank's [base, base + bytes) exposed to the
/// group's puts. Destroying it frees it collectively (cannot raise: call free() to see an
/// error); the memory must outlive it.
class Window {
 public:
  Window(Comm& comm, void* base, std::size_t bytes) {
    detail::check(commuxWinCreate(comm.raw(), base, bytes, &win_));
  }
  Window(const Window&) = delete;
  Window& operator=(const Window&) = delete;
  ~Window() {
    if (win_) commuxWinFree(win_);
  }
  void put(const void* data, std::size_t bytes, int target, std::size_t offset) {
    detail::check(commuxWinPut(win_, data, bytes, target, offset));
  }
  void putSignal(const void* data, std::size_t bytes, int target, std::size_t offset) {
    detail::check(commuxWinPutSignal(win_, data, bytes, target, offset));
  }
  void signal(int target) { detail::check(commuxWinSignal(win_, target)); }
  void waitSignal(int source) { detail::check(commuxWinWaitSignal(win_, source)); }
  void flush(int target) { detail::check(commuxWinFlush(win_, target)); }
  void free() { detail::check(commuxWinFree(std::exchange(win_, nullptr))); }

 private:
  commuxWin_t win_ = nullptr;
};

/// MPI_Dims_create (commuxDimsCreate): `dims` with its 0 entries filled for `ranks`.
inline std::vector<int> dimsCreate(int ranks, std::vector<int> dims) {
  detail::check(commuxDimsCreate(ranks, static_cast<int>(dims.size()), dims.data()));
  return dims;
}

/// A persistent neighbourhood exchange (commuxExchangeCreate / commuxHaloCreate): built
/// once, then start() and wait() (or exchange()) each step. The memory and the
/// communicator must outlive it; destroying it ends a step in flight.
class Exchange {
 public:
  /// Along a graph: per neighbour, the pieces sent to it and those its message fills.
  Exchange(Comm& comm, const std::vector<commuxNeighbour>& neighbours, int tag) {
    detail::check(
        commuxExchangeCreate(comm.raw(), neighbours.data(), neighbours.size(), tag, &ex_));
  }
  /// The ghost cells of `fields` (dense row-major arrays of `shape`, the grid's dimensions
  /// first) on a Cartesian grid of `dims` ranks, `widths` cells on each side. Collective
  /// (commuxHaloCreate).
  template <typename T>
  static Exchange halo(Comm& comm, const std::vector<int>& dims, const std::vector<int>& periodic,
                       bool diagonals, const std::vector<T*>& fields,
                       const std::vector<std::int64_t>& shape,
                       const std::vector<std::int64_t>& widths, int tag) {
    if (periodic.size() != dims.size() || widths.size() != dims.size() ||
        shape.size() < dims.size()) {
      // commuxHaloCreate is collective: take part with arguments it refuses (no periodic),
      // so the other ranks raise too rather than wait for this one.
      commuxExchange_t none = nullptr;
      commuxHaloCreate(comm.raw(), static_cast<int>(dims.size()), dims.data(), nullptr, 0, 0,
                       nullptr, nullptr, 0, nullptr, nullptr, tag, &none);
      throw Error(commuxInvalidArgument,
                  "commux: Exchange::halo: periodic and widths need one entry per grid "
                  "dimension, shape at least one");
    }
    std::vector<void*> raw(fields.begin(), fields.end());
    std::vector<commuxDataType_t> types(fields.size(), dataTypeOf<T>());
    Exchange out;
    detail::check(commuxHaloCreate(comm.raw(), static_cast<int>(dims.size()), dims.data(),
                                   periodic.data(), diagonals ? 1 : 0,
                                   static_cast<int>(fields.size()), raw.data(), types.data(),
                                   static_cast<int>(shape.size()), shape.data(), widths.data(),
                                   tag, &out.ex_));
    return out;
  }
  Exchange(Exchange&& other) noexcept : ex_(std::exchange(other.ex_, nullptr)) {}
  Exchange& operator=(Exchange&& other) noexcept {
    if (this != &other) {
      commuxExchangeFree(ex_);
      ex_ = std::exchange(other.ex_, nullptr);
    }
    return *this;
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;
  ~Exchange() { commuxExchangeFree(ex_); }

  void start() { detail::check(commuxExchangeStart(ex_)); }
  /// Partitioned: the receives only; ready(rank) sends a neighbour's message, wait() the rest.
  void startReceives() { detail::check(commuxExchangeStartReceives(ex_)); }
  void ready(int rank) { detail::check(commuxExchangeReady(ex_, rank)); }
  void wait() { detail::check(commuxExchangeWait(ex_)); }
  /// Without blocking: whether the step has ended (commuxExchangeTest).
  bool test() {
    int done = 0;
    detail::check(commuxExchangeTest(ex_, &done));
    return done != 0;
  }
  void exchange() {
    start();
    wait();
  }
  commuxExchange_t raw() const noexcept { return ex_; }

 private:
  Exchange() = default;
  commuxExchange_t ex_ = nullptr;
};

}  // namespace commux
