#pragma once
// Argument checks shared by every operation. Each failure raises a Python exception (via
// c10's ValueError / NotImplementedError) that names the operation and what is wrong,
// before anything is posted, so the group is untouched.
#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <optional>
#include <vector>

#include "engine/reduce_kernels.hpp"

namespace commux {

/// Tensors must be defined, dense, on one supported device, and (if `sameShape`) alike.
void checkTensors(const char* op, const std::vector<at::Tensor>& tensors, bool sameShape);
void checkTag(const char* op, int tag);
void checkPeer(const char* op, const char* role, int peer, int size);

/// Maps a c10d ReduceOp to the kernel that implements it for `dtype`; AVG maps to Sum
/// (the caller divides). Raises for combinations that make no sense (BAND on floats...).
engine::ReduceKind reduceKindFor(const char* op, const c10d::ReduceOp& reduceOp,
                                 at::ScalarType dtype);

}  // namespace commux
