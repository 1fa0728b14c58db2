#pragma once
// Argument checks shared by every operation. Each failure raises a Python exception (via
// c10's ValueError / NotImplementedError) that names the operation and what is wrong,
// before anything is posted, so the group is untouched.
#include <ATen/ATen.h>

#include <optional>
#include <vector>

namespace commux {

/// Tensors must be defined, dense, on one supported device, and (if `sameShape`) alike.
void checkTensors(const char* op, const std::vector<at::Tensor>& tensors, bool sameShape);
/// Input and output on one device (CPU and CUDA tensors never mix in one operation).
void checkSameDevice(const char* op, const at::Tensor& input, const at::Tensor& output);
/// Input and output of one operation must share a device and a dtype.
void checkSameKind(const char* op, const at::Tensor& input, const at::Tensor& output);
/// Tensors the operation writes: no two of a tensor's elements may share memory (an
/// expanded or stride-0 view), since the result could not be written into it.
void checkWritable(const char* op, const std::vector<at::Tensor>& tensors);
void checkTag(const char* op, int tag);
void checkPeer(const char* op, const char* role, int peer, int size);

}  // namespace commux
