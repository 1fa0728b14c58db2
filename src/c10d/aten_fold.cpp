#include "c10d/aten_fold.hpp"

#include <ATen/core/grad_mode.h>

namespace commux {
namespace {

// Above this, ATen's vectorised kernels win over a plain loop.
constexpr std::size_t kRawMaxBytes = 64 * 1024;

}  // namespace

std::optional<core::Dtype> coreDtype(at::ScalarType dtype) {
  switch (dtype) {
    case at::kByte: return core::Dtype::UInt8;
    case at::kChar: return core::Dtype::Int8;
    case at::kShort: return core::Dtype::Int16;
    case at::kInt: return core::Dtype::Int32;
    case at::kLong: return core::Dtype::Int64;
    case at::kHalf: return core::Dtype::Float16;
    case at::kBFloat16: return core::Dtype::BFloat16;
    case at::kFloat: return core::Dtype::Float32;
    case at::kDouble: return core::Dtype::Float64;
    case at::kBool: return core::Dtype::Bool;
    case at::kComplexFloat:
      return core::Dtype::Complex64;
    case at::kComplexDouble:
      return core::Dtype::Complex128;
    default: return std::nullopt;
  }
}

bool reduceRaw(void* acc, const void* in, std::size_t count, at::ScalarType dtype, core::ReduceOp kind) {
  const auto core = coreDtype(dtype);
  if (!core || count * core::sizeOf(*core) > kRawMaxBytes) return false;
  // Complex tensors keep ATen's folds, whose results differ from the core's pairs in the
  // last bit (fused multiply-adds where the CPU has them) and at infinities (add computes
  // a + 1 * b, and inf * (1 + 0i) has a NaN part): a torch job gets torch's numbers.
  if (*core == core::Dtype::Complex64 || *core == core::Dtype::Complex128) return false;
  return core::reduceInto(acc, in, count, *core, kind);
}

bool atenHostFold(void* out, const void* a, const void* b, std::size_t count,
                  const core::Buffer& like, core::ReduceOp kind) {
  if (like.frontEndType < 0) return false;  // not a tensor's: the core's kernels
  const auto dtype = static_cast<at::ScalarType>(like.frontEndType);
  if (out == a && reduceRaw(out, b, count, dtype, kind)) return true;
  const auto options = at::TensorOptions().dtype(dtype);
  const auto view = [&](const void* data) {
    return at::from_blob(const_cast<void*>(data), {static_cast<int64_t>(count)}, options);
  };
  reduceOut(view(out), view(a), view(b), kind);
  return true;
}

void reduceInto(const at::Tensor& acc, const at::Tensor& in, core::ReduceOp kind) {
  reduceOut(acc, acc, in, kind);
}

void reduceOut(const at::Tensor& out, const at::Tensor& a, const at::Tensor& b, core::ReduceOp kind) {
  // Buffers may alias gradients that require grad (create_graph=True); folding them is
  // not part of any graph.
  const at::NoGradGuard noGrad;
  at::Tensor result = out;  // the *_out ops take a mutable reference
  switch (kind) {
    case core::ReduceOp::Sum:
      at::add_out(result, a, b);
      break;
    case core::ReduceOp::Product:
      at::mul_out(result, a, b);
      break;
    case core::ReduceOp::Min:
      at::minimum_out(result, a, b);
      break;
    case core::ReduceOp::Max:
      at::maximum_out(result, a, b);
      break;
    case core::ReduceOp::BitAnd:
      at::bitwise_and_out(result, a, b);
      break;
    case core::ReduceOp::BitOr:
      at::bitwise_or_out(result, a, b);
      break;
    case core::ReduceOp::BitXor:
      at::bitwise_xor_out(result, a, b);
      break;
  }
}

}  // namespace commux
