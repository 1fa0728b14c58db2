#pragma once
// A UCX collective over device memory for the core's own callers (the C API): the engine's
// ScheduleOp with its scratch in device memory, folding each step's receives with commux's
// own kernels on a stream of its own (cuda/device_ops.hpp). Only libcommux_core built with
// a CUDA toolkit runs it; torch's adapter has its own (c10d/tensor_schedule_op.hpp).
#include <memory>
#include <optional>
#include <vector>

#include "core/buffer.hpp"
#include "core/stream.hpp"
#include "cuda/device_ops.hpp"
#include "engine/schedule_op.hpp"

namespace commux::group {

namespace detail {
// Constructed before the ScheduleOp base, which checks that the scratch is there.
struct DeviceScratch {
  DeviceScratch(const core::Buffer& work, std::size_t scratchElements);
  engine::ScheduleOp::Setup with(engine::ScheduleOp::Setup setup) const;

  core::Buffer work;
  core::Buffer scratch;                       // absent when the schedule folds nothing
  std::optional<cuda::OwnStream> foldStream;  // made at the first fold
};
}  // namespace detail

class DeviceScheduleOp final : private detail::DeviceScratch, public engine::ScheduleOp {
 public:
  /// `caller`: the stream the caller's later work goes on; the finalizer's copies go there.
  DeviceScheduleOp(Setup setup, const core::Stream& caller, engine::Description description,
                   Done done);

 protected:
  bool foldOnDevice(engine::Engine& engine, const collectives::Step& step,
                    const std::vector<std::size_t>& scratchOffsets) override;
};

}  // namespace commux::group
