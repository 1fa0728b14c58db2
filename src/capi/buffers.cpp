// The C API's arguments in the core's words: types, reductions, buffers (host memory, or
// device memory on a stream), and waits.
#include <cstdint>
#include <limits>

#include "capi/comm.hpp"
#include "core/error.hpp"
#include "cuda/cuda_support.hpp"
#include "cuda/device_ops.hpp"

namespace commux::capi {

core::Dtype dtypeOf(commuxDataType_t type, const char* what) {
  switch (type) {
    case commuxInt8:
      return core::Dtype::Int8;
    case commuxUint8:
      return core::Dtype::UInt8;
    case commuxInt16:
      return core::Dtype::Int16;
    case commuxInt32:
      return core::Dtype::Int32;
    case commuxInt64:
      return core::Dtype::Int64;
    case commuxFloat16:
      return core::Dtype::Float16;
    case commuxBfloat16:
      return core::Dtype::BFloat16;
    case commuxFloat32:
      return core::Dtype::Float32;
    case commuxFloat64:
      return core::Dtype::Float64;
    case commuxBool:
      return core::Dtype::Bool;
    case commuxComplex64:
      return core::Dtype::Complex64;
    case commuxComplex128:
      return core::Dtype::Complex128;
    case commuxNumTypes:
    case commuxDataTypeForce32:
      break;
  }
  COMMUX_FAIL(InvalidArgument, "commux: ", what, ": ", static_cast<int>(type),
              " is not a commuxDataType_t");
}

core::ReduceOp reduceOpOf(commuxRedOp_t op, const char* what) {
  switch (op) {
    case commuxSum:
      return core::ReduceOp::Sum;
    case commuxProd:
      return core::ReduceOp::Product;
    case commuxMin:
      return core::ReduceOp::Min;
    case commuxMax:
      return core::ReduceOp::Max;
    case commuxBand:
      return core::ReduceOp::BitAnd;
    case commuxBor:
      return core::ReduceOp::BitOr;
    case commuxBxor:
      return core::ReduceOp::BitXor;
    case commuxNumOps:
    case commuxRedOpForce32:
      break;
  }
  COMMUX_FAIL(InvalidArgument, "commux: ", what, ": ", static_cast<int>(op),
              " is not a commuxRedOp_t");
}

namespace {

// Whether any GPU is visible: only then can a pointer be device memory (asked once, so that
// host calls on a machine without a GPU never call CUDA).
bool anyGpu() {
  static const bool any = cuda::deviceOpsCompiled() && cuda::deviceCount() > 0;
  return any;
}

}  // namespace

core::Buffer callBuffer(const void* data, std::size_t count, commuxDataType_t type, void* stream,
                        const char* what) {
  const core::Dtype dtype = dtypeOf(type, what);
  COMMUX_CHECK(data != nullptr || count == 0, InvalidArgument, "commux: ", what,
               ": the buffer is NULL but the count is ", count);
  COMMUX_CHECK(count <= std::numeric_limits<std::size_t>::max() / core::sizeOf(dtype),
               InvalidArgument, "commux: ", what, ": ", count, " elements of ", core::nameOf(dtype),
               " overflow a byte count");
  core::Buffer buffer = core::bufferOf(const_cast<void*>(data), count, dtype);
  if (stream == nullptr) {
    // The host would read or write a device buffer passed without a stream.
    if (count != 0 && anyGpu()) {
      const auto device = cuda::deviceOf(data);
      COMMUX_CHECK(!device, InvalidArgument, "commux: ", what,
                   ": the buffer is in the memory of GPU ", device.value_or(-1),
                   " but the stream is NULL (host memory); pass the CUDA stream the call is "
                   "ordered on (cudaStreamLegacy for the default stream)");
    }
    return buffer;
  }
  COMMUX_CHECK(cuda::deviceOpsCompiled(), Unsupported, "commux: ", what,
               ": a stream was given (CUDA device memory), but this libcommux_core was built "
               "without its CUDA device path (build it with a CUDA toolkit, "
               "COMMUX_CORE_CUDA=ON); pass NULL for host memory");
  buffer.memory = core::MemoryType::Cuda;
  buffer.device = 0;  // an empty buffer's; any device serves
  if (data != nullptr) {
    const auto device = cuda::deviceOf(data);
    COMMUX_CHECK(device.has_value(), InvalidArgument, "commux: ", what,
                 ": a stream was given, but the buffer is host memory (or not memory CUDA "
                 "knows); pass NULL as the stream for host memory");
    buffer.device = *device;
  }
  return buffer;
}

std::optional<core::Stream> streamOf(const core::Buffer& buffer, void* stream) {
  if (buffer.memory != core::MemoryType::Cuda) return std::nullopt;
  return core::Stream{buffer.device,
                      static_cast<std::int64_t>(reinterpret_cast<std::intptr_t>(stream))};
}

void waitFor(const commuxComm& comm, group::Request& request) {
  try {
    request.wait(timeoutOf(&comm));
  } catch (...) {
    // A collective's timeout raises before its cancellation has run (Request::wait): the
    // caller gets its buffers back when this returns, so wait (briefly) for the
    // cancellation to end the operation first.
    request.waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
    throw;
  }
  if (auto error = request.error()) std::rethrow_exception(error);
}

}  // namespace commux::capi
