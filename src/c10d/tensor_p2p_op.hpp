#pragma once
// A send or receive of tensors: the engine's P2POp over their bytes, holding the tensors for
// as long as it lives. Made on the caller's thread, where a non-contiguous tensor is staged:
// a send copies it (so it captures the value at call time), a receive lands in a contiguous
// copy and writes it back into the tensor before the operation succeeds.
#include <ATen/ATen.h>
#include <c10/util/SmallVector.h>

#include <memory>
#include <vector>

#include "engine/p2p_op.hpp"

namespace commux {

namespace detail {
// Constructed before the P2POp base, which takes views of its tensors.
struct P2PTensors {
  P2PTensors(engine::P2POp::Kind kind, const std::vector<at::Tensor>& tensors);
  engine::P2POp::Buffers views() const;

  // What UCX reads or writes: the user's tensor itself when contiguous, else a contiguous
  // copy. Either keeps the user's tensor alive (an isend whose caller dropped it).
  c10::SmallVector<at::Tensor, 1> staged;
  // The user's tensors, only when one of them was staged (a receive copies back into it).
  c10::SmallVector<at::Tensor, 1> targets;
  bool anyStaged = false;
};
}  // namespace detail

class TensorP2POp final : private detail::P2PTensors, public engine::P2POp {
 public:
  TensorP2POp(Kind kind, const std::vector<at::Tensor>& tensors,
              std::shared_ptr<const engine::Route> route, wire::Tag tag, wire::Tag mask,
              bool pack, engine::Description description, Done done);

 protected:
  void received(std::size_t index) override;
};

}  // namespace commux
