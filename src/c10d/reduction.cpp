#include "c10d/reduction.hpp"

#include <c10/util/Exception.h>

namespace commux {

Reduction Reduction::of(const char* op, const c10d::ReduceOp& reduceOp, at::ScalarType dtype) {
  using K = core::ReduceOp;
  const bool integral = at::isIntegralType(dtype, /*includeBool=*/true);
  const bool complex = at::isComplexType(dtype);
  Reduction r;
  switch (reduceOp.op_) {
    case c10d::ReduceOp::SUM:
      r.kind_ = K::Sum;
      break;
    case c10d::ReduceOp::PRODUCT:
      r.kind_ = K::Product;
      break;
    case c10d::ReduceOp::AVG:
      TORCH_CHECK_NOT_IMPLEMENTED(!integral, "commux: ", op, ": ReduceOp.AVG needs a floating "
                                  "point or complex dtype, got ", dtype, "; use SUM and divide");
      r.kind_ = K::Sum;
      r.average_ = true;
      r.label_ = "AVG";
      return r;
    case c10d::ReduceOp::PREMUL_SUM: {
      TORCH_CHECK_NOT_IMPLEMENTED(!integral, "commux: ", op, ": PREMUL_SUM needs a floating "
                                  "point or complex dtype, got ", dtype);
      // NCCLPreMulSumSupplement is the name every supported torch has (2.15 aliases it).
      const auto* factor =
          dynamic_cast<const c10d::NCCLPreMulSumSupplement*>(reduceOp.supplement_.get());
      TORCH_CHECK_VALUE(factor != nullptr, "commux: ", op, ": PREMUL_SUM without its factor; "
                        "create it with torch.distributed._make_nccl_premul_sum(factor)");
      r.kind_ = K::Sum;
      if (factor->tensor_factor.defined()) {
        TORCH_CHECK_VALUE(factor->tensor_factor.numel() == 1, "commux: ", op,
                          ": the PREMUL_SUM factor must be a one-element tensor, got ",
                          factor->tensor_factor.numel(), " elements");
        r.tensorScale_ = factor->tensor_factor.detach();
      } else {
        r.scale_ = factor->double_factor;
      }
      r.label_ = "PREMUL_SUM";
      return r;
    }
    case c10d::ReduceOp::MIN:
    case c10d::ReduceOp::MAX:
      TORCH_CHECK_NOT_IMPLEMENTED(!complex, "commux: ", op, ": ReduceOp.",
                                  reduceOp.op_ == c10d::ReduceOp::MIN ? "MIN" : "MAX",
                                  " is undefined for complex dtype ", dtype);
      r.kind_ = reduceOp.op_ == c10d::ReduceOp::MIN ? K::Min : K::Max;
      break;
    case c10d::ReduceOp::BAND:
    case c10d::ReduceOp::BOR:
    case c10d::ReduceOp::BXOR:
      TORCH_CHECK_NOT_IMPLEMENTED(integral, "commux: ", op,
                                  ": bitwise ReduceOps (BAND, BOR, BXOR) need an integer or "
                                  "bool dtype, got ", dtype);
      r.kind_ = reduceOp.op_ == c10d::ReduceOp::BAND  ? K::BitAnd
                : reduceOp.op_ == c10d::ReduceOp::BOR ? K::BitOr
                                                      : K::BitXor;
      break;
    default:
      TORCH_CHECK_NOT_IMPLEMENTED(false, "commux: ", op, ": ReduceOp ",
                                  static_cast<int>(reduceOp.op_), " is not supported");
  }
  r.label_ = core::nameOf(r.kind_);
  return r;
}

void Reduction::prepare(const at::Tensor& contribution) const {
  if (scale_) {
    contribution.mul_(*scale_);
  } else if (tensorScale_.defined()) {
    // The factor may live on another device (FSDP keeps it with the gradients).
    contribution.mul_(tensorScale_.to(contribution.device(), contribution.scalar_type()));
  }
}

void Reduction::finish(const at::Tensor& result, int64_t contributions) const {
  if (average_) result.div_(contributions);
}

}  // namespace commux
