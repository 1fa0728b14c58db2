// The C API's arguments in the core's words: types, reductions, host buffers, and waits.
#include <limits>

#include "capi/comm.hpp"
#include "core/error.hpp"

namespace commux::capi {

core::Dtype dtypeOf(commuxDataType_t type, const char* what) {
  switch (type) {
    case commuxInt8: return core::Dtype::Int8;
    case commuxUint8: return core::Dtype::UInt8;
    case commuxInt16: return core::Dtype::Int16;
    case commuxInt32: return core::Dtype::Int32;
    case commuxInt64: return core::Dtype::Int64;
    case commuxFloat16: return core::Dtype::Float16;
    case commuxBfloat16: return core::Dtype::BFloat16;
    case commuxFloat32: return core::Dtype::Float32;
    case commuxFloat64: return core::Dtype::Float64;
    case commuxBool: return core::Dtype::Bool;
    case commuxComplex64: return core::Dtype::Complex64;
    case commuxComplex128: return core::Dtype::Complex128;
    case commuxNumTypes:
    case commuxDataTypeForce32:
      break;
  }
  COMMUX_FAIL(InvalidArgument, "commux: ", what, ": ", static_cast<int>(type),
              " is not a commuxDataType_t");
}

core::ReduceOp reduceOpOf(commuxRedOp_t op, const char* what) {
  switch (op) {
    case commuxSum: return core::ReduceOp::Sum;
    case commuxProd: return core::ReduceOp::Product;
    case commuxMin: return core::ReduceOp::Min;
    case commuxMax: return core::ReduceOp::Max;
    case commuxBand: return core::ReduceOp::BitAnd;
    case commuxBor: return core::ReduceOp::BitOr;
    case commuxBxor: return core::ReduceOp::BitXor;
    case commuxNumOps:
    case commuxRedOpForce32:
      break;
  }
  COMMUX_FAIL(InvalidArgument, "commux: ", what, ": ", static_cast<int>(op),
              " is not a commuxRedOp_t");
}

core::Buffer hostBuffer(const void* data, std::size_t count, commuxDataType_t type, void* stream,
                        const char* what) {
  const core::Dtype dtype = dtypeOf(type, what);
  COMMUX_CHECK(stream == nullptr, Unsupported, "commux: ", what,
               ": streams (CUDA device memory) are not supported by this version; pass NULL "
               "for host memory");
  COMMUX_CHECK(data != nullptr || count == 0, InvalidArgument, "commux: ", what,
               ": the buffer is NULL but the count is ", count);
  COMMUX_CHECK(count <= std::numeric_limits<std::size_t>::max() / core::sizeOf(dtype),
               InvalidArgument, "commux: ", what, ": ", count, " elements of ",
               core::nameOf(dtype), " overflow a byte count");
  return core::bufferOf(const_cast<void*>(data), count, dtype);
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
