#include "group/blocking_p2p.hpp"

#include <string>

#include "core/error.hpp"
#include "core/group_health.hpp"
#include "engine/blocking_transfer.hpp"
#include "engine/description.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "engine/p2p_op.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "group/request.hpp"
#include "wire/tag.hpp"

namespace commux::group {
namespace {

// A blocked caller's wait looks at the group this often: an abort or a peer's death ends it
// within this (a Request is failed by the group itself, which knows no blocking call).
constexpr std::chrono::milliseconds kLookEvery{100};

// The transfer's wait and outcome, as an ordinary Request's wait would end.
void finish(Group& group, engine::BlockingTransfer& transfer, bool isSend, int peer, int tag,
            std::size_t bytes, std::chrono::milliseconds limit) {
  // Formatted only for an error.
  const auto describe = [&] {
    return engine::Description::p2p(isSend ? "send" : "recv", isSend ? "to" : "from", peer, tag,
                                    bytes, 1)
        .str();
  };
  if (!transfer.ended()) {
    std::string stopped;  // why the wait ended before the transfer did
    const auto interrupted = [&] {
      if (group.state() != Group::State::Running) {
        stopped = group.stateText();
      } else if (std::string why = group.deadWhy(peer); !why.empty()) {
        stopped = core::lostMember(peer, why);
      }
      return !stopped.empty();
    };
    const auto end = transfer.waitUnless(std::chrono::steady_clock::now() + limit, interrupted,
                                         kLookEvery);
    if (end != engine::Engine::WaitEnd::Done) {
      if (stopped.empty()) {
        // In gloo's words, as Request::wait says it.
        stopped = "Timed out waiting for it to complete (timed out after " +
                  std::to_string(limit.count()) +
                  " ms); the operation was cancelled and the group stays usable";
      }
      // What arrived before the cancel still completes it, as a Request's failAfterDraining.
      // A receive UCX already matched writes the buffer until its transfer ends, so the
      // cancel waits for that; a send UCX cannot recall at all.
      if (!transfer.cancel(kCancelWait)) {
        COMMUX_FAIL(Backend, "commux: ", describe(), ": ", stopped, "; UCX still held its buffer ",
                    kCancelWait.count(), " s after the cancel (",
                    isSend ? "a send it cannot recall: the receiver may still read it"
                           : "a transfer into it may yet change it",
                    ")");
      }
      if (transfer.status() != UCS_OK) COMMUX_FAIL(Backend, "commux: ", describe(), ": ", stopped);
    }
  }
  const ucs_status_t status = transfer.status();
  const engine::RecvInfo& info = transfer.info();
  if (status == UCS_OK) {
    if (isSend || (info.length == bytes && !wire::isPacked(info.senderTag))) return;
    std::string mismatch = engine::packingMismatch(describe(), false, info);
    if (mismatch.empty()) mismatch = engine::sizeMismatch(describe(), false, bytes, info);
    COMMUX_FAIL(InvalidArgument, mismatch);
  }
  if (status == UCS_ERR_CANCELED) {
    // Only the engine's teardown cancels without this wait's knowing (at process exit).
    COMMUX_FAIL(Backend, "commux: ", describe(),
                ": the process group was shut down with this operation in flight");
  }
  if (status == UCS_ERR_MESSAGE_TRUNCATED) {
    COMMUX_FAIL(Backend, engine::truncatedMessage(describe(), false, bytes, info));
  }
  // A broken connection is a death more often than not, which the watch confirms moments
  // later: the error names the rank (survivors need it to go on without it).
  if (std::string why = engine::brokenConnection(status) ? group.awaitDeathOf(peer)
                                                         : group.deadWhy(peer);
      !why.empty()) {
    COMMUX_FAIL(Backend, "commux: ", describe(), ": ", core::lostMember(peer, why));
  }
  COMMUX_FAIL(Backend, "commux: ", describe(), " failed: ", ucs_status_string(status));
}

}  // namespace

bool sendBlocking(Group& group, const void* data, std::size_t bytes, int to, int tag,
                  std::chrono::milliseconds timeout) {
  if (group.batching()) return false;
  group.checkUsable();
  const auto route = group.peers().get(to, "a send to it");
  {
    // As the ordinary path: a dead peer receives nothing, so a send to it fails now.
    const std::string why = group.deadWhy(to);
    COMMUX_CHECK(why.empty(), Backend, "commux: ",
                 engine::Description::p2p("send", "to", to, tag, bytes, 1).str(), ": ",
                 core::lostMember(to, why), "; operations with it fail from now on");
  }
  engine::BlockingTransfer transfer(group.engine());
  if (!transfer.sendIfFree(*route, bytes == 0 ? nullptr : data, bytes,
                           wire::p2pTag(route->context, static_cast<std::uint32_t>(group.rank()),
                                        static_cast<std::uint32_t>(tag)))) {
    return false;
  }
  finish(group, transfer, true, to, tag, bytes, timeout);
  return true;
}

bool recvBlocking(Group& group, void* data, std::size_t bytes, int from, int tag,
                  std::chrono::milliseconds timeout) {
  if (group.batching()) return false;
  group.checkUsable();
  group.peers().get(from, "a receive from it");  // watched from now on
  engine::BlockingTransfer transfer(group.engine());
  if (!transfer.recvIfFree(bytes == 0 ? nullptr : data, bytes,
                           wire::p2pTag(group.context(), static_cast<std::uint32_t>(from),
                                        static_cast<std::uint32_t>(tag)),
                           wire::kExactMask)) {
    return false;
  }
  finish(group, transfer, false, from, tag, bytes, timeout);
  return true;
}

}  // namespace commux::group
