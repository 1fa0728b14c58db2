#include "engine/reduce_kernels.hpp"

#include <ATen/core/grad_mode.h>

namespace commux::engine {

void reduceInto(const at::Tensor& acc, const at::Tensor& in, ReduceKind kind) {
  // Buffers may alias gradients that require grad (create_graph=True); folding them is
  // not part of any graph.
  const at::NoGradGuard noGrad;
  at::Tensor out = acc;  // the *_out ops take a mutable reference
  switch (kind) {
    case ReduceKind::Sum:
      at::add_out(out, acc, in);
      break;
    case ReduceKind::Product:
      at::mul_out(out, acc, in);
      break;
    case ReduceKind::Min:
      at::minimum_out(out, acc, in);
      break;
    case ReduceKind::Max:
      at::maximum_out(out, acc, in);
      break;
    case ReduceKind::BitAnd:
      at::bitwise_and_out(out, acc, in);
      break;
    case ReduceKind::BitOr:
      at::bitwise_or_out(out, acc, in);
      break;
    case ReduceKind::BitXor:
      at::bitwise_xor_out(out, acc, in);
      break;
  }
}

const char* reduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::Sum: return "SUM";
    case ReduceKind::Product: return "PRODUCT";
    case ReduceKind::Min: return "MIN";
    case ReduceKind::Max: return "MAX";
    case ReduceKind::BitAnd: return "BAND";
    case ReduceKind::BitOr: return "BOR";
    case ReduceKind::BitXor: return "BXOR";
  }
  return "?";
}

}  // namespace commux::engine
