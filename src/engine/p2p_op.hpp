#pragma once
// A send or receive of one or more tensors with one (peer, tag). Unpacked, tensors travel
// as one UCX message each, all with the same tag; UCX matches equal tags from one sender in
// send order, so a multi-tensor receive fills its tensors element by element. Packed
// (COMMUX_COALESCE), they travel as ONE message described by a UCX IOV list, with the
// packing bit of the tag set so that a receiver expecting the other format fails clearly.
#include <memory>
#include <vector>

#include "core/buffer.hpp"
#include "core/inline_vector.hpp"
#include "engine/op.hpp"
#include "engine/route.hpp"

namespace commux::engine {

/// What a receive says when the matching message does not fit it, shared by P2POp and the
/// blocking path (ProcessGroupUCX::recvBlocking). `expectPacked`: the receive wants one
/// IOV-packed message; `capacity`: the bytes it holds.
/// Empty when the message's packing matches the receive, else the error.
std::string packingMismatch(const std::string& description, bool expectPacked,
                            const RecvInfo& info);
/// A message that arrived whole but is not `capacity` bytes long.
std::string sizeMismatch(const std::string& description, bool expectPacked, std::size_t capacity,
                         const RecvInfo& info);
/// A message UCX truncated (UCS_ERR_MESSAGE_TRUNCATED): larger than the receive.
std::string truncatedMessage(const std::string& description, bool expectPacked,
                             std::size_t capacity, const RecvInfo& info);

class P2POp : public Op {
 public:
  enum class Kind { Send, Recv };
  /// Inline for the usual single buffer.
  using Buffers = core::InlineVector<core::Buffer, 1>;

  /// Send: `route` is the destination. Recv: `route` is unused (may be null); `mask` selects exact or
  /// any-source matching. The buffers are contiguous and all in one kind of memory (on one
  /// GPU); each stays alive through its owner, or through a subclass that holds it.
  /// `pack`: send or expect one IOV message for all buffers (`tag` must then carry the
  /// packing bit for a send).
  P2POp(Kind kind, Buffers buffers, std::shared_ptr<const Route> route, wire::Tag tag,
        wire::Tag mask, bool pack, Description description, Done done);

  void start(Engine& engine) override;

 protected:
  void onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) override;
  std::string describeFailure(std::uint32_t slot, ucs_status_t status,
                              const RecvInfo& info) const override;
  /// A receive's buffer `index` holds its message (before the operation succeeds, under the
  /// worker lock): a front end that received into a staging copy copies it out here.
  virtual void received(std::size_t index) {}

 private:
  static void* address(const core::Buffer& b);

  Kind kind_;
  Buffers buffers_;
  std::shared_ptr<const Route> route_;
  wire::Tag tag_;
  wire::Tag mask_;
  bool pack_;
  ucs_memory_type_t memory_;
  std::size_t packedBytes_ = 0;
  std::vector<ucp_dt_iov_t> iov_;  // the packed message's pieces; UCX reads it until done
  int sourceRank_ = -1;
};

}  // namespace commux::engine
