#include "group/point_to_point.hpp"

#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "engine/p2p_op.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "wire/tag.hpp"

namespace commux::group {
namespace {

void checkMessage(const char* what, const Group& group, const core::Buffer& buffer, int peer,
                  const char* role, bool anyAllowed, int tag) {
  COMMUX_CHECK(buffer.present(), InvalidArgument, "commux: ", what,
               ": the buffer is missing (its element size is 0)");
  COMMUX_CHECK(buffer.data != nullptr || buffer.count == 0, InvalidArgument, "commux: ", what,
               ": the buffer holds ", buffer.count, " elements at a null address");
  COMMUX_CHECK(tag >= 0, InvalidArgument, "commux: ", what, ": tag must be in [0, ",
               wire::kMaxUserTag, "], got ", tag);
  COMMUX_CHECK((peer >= 0 && peer < group.size()) || (anyAllowed && peer == kAnySource),
               InvalidArgument, "commux: ", what, ": invalid ", role, " rank ", peer,
               " for a group of size ", group.size());
}

engine::P2POp::Buffers buffersOf(const core::Buffer& buffer) {
  engine::P2POp::Buffers buffers;
  buffers.push_back(buffer);
  return buffers;
}

}  // namespace

std::shared_ptr<Request> send(Group& group, const core::Buffer& buffer, int to, int tag,
                              std::chrono::milliseconds timeout,
                              const std::optional<core::Stream>& after) {
  group.checkUsable();
  checkMessage("send", group, buffer, to, "destination", false, tag);
  auto route = group.peers().get(to, "a send to it");
  auto request = std::make_shared<Request>(
      Request::Kind::Send, engine::Description::p2p("send", "to", to, tag, buffer.bytes(), 1),
      timeout, group.sharedEngine());
  request->setPeer(to);
  const wire::Tag wireTag = wire::p2pTag(route->context, static_cast<std::uint32_t>(group.rank()),
                                         static_cast<std::uint32_t>(tag));
  group.launch(
      request,
      std::make_shared<engine::P2POp>(engine::P2POp::Kind::Send, buffersOf(buffer),
                                      std::move(route), wireTag, wire::kExactMask,
                                      /*pack=*/false, request->parts(), request->completer()),
      after);
  return request;
}

std::shared_ptr<Request> recv(Group& group, const core::Buffer& buffer, int from, int tag,
                              std::chrono::milliseconds timeout,
                              const std::optional<core::Stream>& after) {
  group.checkUsable();
  checkMessage("recv", group, buffer, from, "source", true, tag);
  const bool any = from == kAnySource;
  if (any) {
    group.peers().resolveAll();  // any member's death fails it
  } else {
    group.peers().get(from, "a receive from it");  // watched from now on
  }
  auto request = std::make_shared<Request>(
      any ? Request::Kind::RecvAnySource : Request::Kind::Recv,
      engine::Description::p2p("recv", "from", from, tag, buffer.bytes(), 1), timeout,
      group.sharedEngine());
  if (!any) request->setPeer(from);
  const wire::Tag wireTag = wire::p2pTag(
      group.context(), any ? 0 : static_cast<std::uint32_t>(from), static_cast<std::uint32_t>(tag));
  group.launch(
      request,
      std::make_shared<engine::P2POp>(engine::P2POp::Kind::Recv, buffersOf(buffer), nullptr,
                                      wireTag, any ? wire::kAnySourceMask : wire::kExactMask,
                                      /*pack=*/false, request->parts(), request->completer()),
      after);
  return request;
}

}  // namespace commux::group
