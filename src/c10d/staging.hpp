#pragma once
// Helpers the collective entry points share: staging tensors into flat buffers, copying
// results back, describing an operation for error messages, and the size thresholds.
#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdint>
#include <string>
#include <vector>

#include "collectives/route.hpp"
#include "collectives/selection.hpp"
#include "engine/description.hpp"

namespace commux {

/// Held by every operation while it touches tensor data. Communication writes tensors
/// outside autograd, as Gloo and NCCL do: gradients built with create_graph=True require
/// grad themselves, and ATen refuses out= and in-place ops on them in grad mode.
using NoAutograd = at::NoGradGuard;

class ProcessGroupUCX;

/// The first line of every operation of a group: autograd off, and the group used only by
/// the process that made it, never by a child forked afterwards (it would act on the
/// parent's connections and store client).
class OpEntry {
 public:
  explicit OpEntry(const ProcessGroupUCX& group);

 private:
  NoAutograd noAutograd_;
};

/// The first line of every collective: an OpEntry, then the group's set-up at its first
/// collective (ProcessGroupUCX::joinSetUp), before anything of the call is validated.
class CollectiveEntry {
 public:
  explicit CollectiveEntry(ProcessGroupUCX& group);

 private:
  OpEntry entry_;
};

/// The selection's settings for an operation on `buffer` (host memory when undefined).
/// `forced`: the schedule the call's route forces (collectives/route.hpp), or null.
collectives::Thresholds thresholds(const at::Tensor& buffer = at::Tensor(),
                                   const char* forced = nullptr);

/// The schedule COMMUX_ALGORITHM_<COLLECTIVE> forces on what always runs as a schedule
/// (collectives::scheduleRoute), or null.
const char* forcedSchedule(collectives::Collective collective);
/// The route of a call that always runs as a schedule (collectives::scheduleRoute) under
/// the COMMUX_ALGORITHM_<COLLECTIVE> setting.
collectives::Route scheduleRouteOf(collectives::Collective collective);

inline std::size_t elementCount(const at::Tensor& t) { return static_cast<std::size_t>(t.numel()); }

/// A flat contiguous view of `t` when one exists, else a flat contiguous copy.
at::Tensor flat(const at::Tensor& t);

/// `t` itself when contiguous, else a contiguous copy. The shared-memory path touches only a
/// buffer's bytes, and a flat view costs more than an 8-byte collective (autograd's view
/// bookkeeping runs even without grad).
inline at::Tensor dense(const at::Tensor& t) { return t.is_contiguous() ? t : t.contiguous(); }

using collectives::equalBlocks;

/// Whether scatterBack(work, tensors) would copy anything: not when the only tensor is
/// `work` itself (the common case), so a call can skip its closure and that closure's
/// allocations.
bool scatterBackNeeded(const at::Tensor& work, const std::vector<at::Tensor>& tensors);
/// Copies `work` back into every tensor that does not already alias it.
void scatterBack(const at::Tensor& work, const std::vector<at::Tensor>& tensors);

/// "op (detail, N x dtype, algorithm, collective #seq)", for messages and errors (formatted
/// when one needs it). `op` and `algorithm` must be literals.
engine::Description describe(const char* op, c10::ArrayRef<at::Tensor> tensors, std::string detail,
                             const char* algorithm, std::uint32_t seq);

}  // namespace commux
