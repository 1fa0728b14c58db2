#pragma once
// How a c10d ReduceOp is carried out: the elementwise kernel the schedule folds with, plus
// what happens before (PREMUL_SUM scales the local contribution) and after (AVG divides
// the sum). Every reducing collective goes through this, so they agree on every op.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <string>

#include "c10d/aten_fold.hpp"

namespace commux {

class Reduction {
 public:
  /// Validates `reduceOp` for `dtype` (raises a ValueError/NotImplementedError naming `op`).
  static Reduction of(const char* op, const c10d::ReduceOp& reduceOp, at::ScalarType dtype);

  core::ReduceOp kind() const noexcept { return kind_; }
  /// "SUM", "AVG", "PREMUL_SUM"...: for descriptions and errors.
  const std::string& label() const noexcept { return label_; }

  /// Whether prepare() writes to the contribution (a pre-multiplied sum).
  bool changesContribution() const noexcept { return scale_.has_value() || tensorScale_.defined(); }
  /// Applied to this rank's contribution before it is sent anywhere.
  void prepare(const at::Tensor& contribution) const;
  /// Whether finish() does anything (an average).
  bool finishes() const noexcept { return average_; }
  /// Applied to a fully reduced result made of `contributions` inputs.
  void finish(const at::Tensor& result, int64_t contributions) const;

 private:
  core::ReduceOp kind_ = core::ReduceOp::Sum;
  bool average_ = false;
  std::optional<double> scale_;
  at::Tensor tensorScale_;
  std::string label_;
};

}  // namespace commux
