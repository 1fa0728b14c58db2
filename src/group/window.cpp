#include "group/window.hpp"

#include <cstring>
#include <sstream>
#include <string>

#include "core/error.hpp"
#include "core/kv_store.hpp"
#include "core/setup_store.hpp"
#include "engine/context_ids.hpp"
#include "engine/description.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "engine/route.hpp"
#include "engine/window_ops.hpp"
#include "group/group.hpp"
#include "group/peer_table.hpp"
#include "wire/tag.hpp"

namespace commux::group {
namespace {

std::string keyOf(std::uint64_t index, int rank) {
  return "core-window/" + std::to_string(index) + "/" + std::to_string(rank);
}

// What a rank publishes: its window's context (the tag field its inbox receives on) and
// size. Read back with every field checked: the store is not trusted.
struct Record {
  std::uint32_t context = 0;
  std::uint64_t bytes = 0;

  std::string encode() const { return std::to_string(context) + " " + std::to_string(bytes); }
  static Record decode(int rank, const std::string& raw) {
    std::istringstream in(raw);
    unsigned long long context = 0, bytes = 0;
    std::string rest;
    const bool ok = static_cast<bool>(in >> context >> bytes) && !(in >> rest) &&
                    context < wire::kMaxContexts && raw.find('-') == std::string::npos;
    COMMUX_CHECK(ok, Backend, "commux: window: rank ", rank, "'s record in the store ('", raw,
                 "') is not one; another program or job may be writing this store's keys");
    return Record{static_cast<std::uint32_t>(context), static_cast<std::uint64_t>(bytes)};
  }
};

std::shared_ptr<Request> makeRequest(Group& group, Request::Kind kind, engine::Description what,
                                     int peer, std::chrono::milliseconds timeout) {
  auto request = std::make_shared<Request>(kind, std::move(what), timeout, group.sharedEngine());
  request->setPeer(peer);
  return request;
}

// A Request for `peer` and the Op `makeOp` builds for it, launched on the group.
template <typename MakeOp>
std::shared_ptr<Request> launched(Group& group, Request::Kind kind, engine::Description what,
                                  int peer, std::chrono::milliseconds timeout, MakeOp&& makeOp) {
  auto request = makeRequest(group, kind, std::move(what), peer, timeout);
  group.launch(request, makeOp(*request), std::nullopt);
  return request;
}

}  // namespace

Window::Window(Group& group, void* base, std::size_t bytes, std::uint64_t index)
    : group_(group), base_(static_cast<char*>(base)), index_(index) {
  group.checkUsable();
  COMMUX_CHECK(base != nullptr || bytes == 0, InvalidArgument,
               "commux: window: the memory is NULL but its size is ", bytes);
  const int rank = group.rank();
  const int size = group.size();
  auto& engine = group.engine();
  Record mine;
  mine.context = engine.contexts().acquire();
  mine.bytes = bytes;
  inboxEnded_ = std::make_shared<engine::DoneFlag>();
  auto inbox = std::make_shared<engine::WindowInbox>(
      mine.context, rank, size, base_, bytes, std::nullopt,
      engine::Description("window #" + std::to_string(index) + " on rank " + std::to_string(rank)),
      // Run by the engine, under its worker lock: the engine is alive.
      [engine = &engine, ended = inboxEnded_](std::exception_ptr, int) {
        engine->setDone(*ended);
      });
  try {
    engine.submit(engine::Submission::start(inbox));
    // A rank that dies before it publishes is found within the failure detection's bound,
    // and one that gives up says so in its key, instead of the store's timeout.
    const core::SetupDeaths deaths = group.setupDeaths("a window");
    core::SetupStore store(*group.store(), deaths);
    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (int r = 0; r < size; ++r) {
      keys.push_back(keyOf(index, r));
      ranks.push_back(r);
    }
    std::vector<std::string> raw;
    try {
      store.put(keyOf(index, rank), mine.encode());
      raw = store.takeAll(keys, ranks);
    } catch (const core::SetupAbandoned& e) {
      try {
        store.abandon(e.what(), {keyOf(index, rank)});
      } catch (const std::exception&) {
        // The store itself is gone: the others' waits end with its errors.
      }
      COMMUX_FAIL(Backend, "commux: window #", index, " was given up: ", e.what());
    }
    const auto routes = group.peers().get(ranks, "a window");
    std::vector<std::shared_ptr<const engine::Route>> replies;
    peers_.resize(static_cast<std::size_t>(size));
    for (int r = 0; r < size; ++r) {
      const Record theirs = Record::decode(r, raw[static_cast<std::size_t>(r)]);
      auto route = std::make_shared<engine::Route>();
      route->address = routes[static_cast<std::size_t>(r)]->address;
      route->context = theirs.context;
      peers_[static_cast<std::size_t>(r)] = Peer{route, theirs.bytes};
      replies.push_back(std::move(route));
    }
    engine.submit(engine::Submission::start(
        std::make_shared<engine::WindowRoutesOp>(inbox, std::move(replies))));
  } catch (...) {
    engine.submit(
        engine::Submission::cancel(inbox, engine::commError("commux: window registration failed")));
    engine.contexts().release(mine.context);
    throw;
  }
  context_ = mine.context;
  inbox_ = std::move(inbox);
}

Window::~Window() {
  // Not waited for: the engine may be stopping with the process.
  if (inbox_) release(false);
}

bool Window::release(bool drain) {
  auto& engine = group_.engine();
  if (!inbox_->finished()) {
    engine.submit(
        engine::Submission::cancel(inbox_, engine::commError("commux: the window was released")));
  }
  // A large put's data receive UCX already matched writes the window until its transfer
  // ends (the inbox ends only then): the caller may free the memory once close returns.
  const bool drained =
      !drain || engine.wait(*inboxEnded_, std::chrono::steady_clock::now() + kCancelWait);
  engine.submit(engine::Submission::purge(context_));
  engine.contexts().release(context_);
  inbox_.reset();
  peers_.clear();
  return drained;
}

const Window::Peer& Window::peer(const char* what, int rank) const {
  COMMUX_CHECK(inbox_ != nullptr, Runtime, "commux: ", what, ": the window is closed");
  COMMUX_CHECK(rank >= 0 && rank < group_.size(), InvalidArgument, "commux: ", what, ": rank ",
               rank, " is not a rank of this ", group_.size(), "-rank group");
  return peers_[static_cast<std::size_t>(rank)];
}

std::shared_ptr<Request> Window::put(const void* data, std::size_t bytes, int target,
                                     std::size_t offset, bool signal,
                                     std::chrono::milliseconds timeout) {
  const char* what = signal ? "window put_signal" : "window put";
  const Peer& to = peer(what, target);
  group_.checkUsable();
  COMMUX_CHECK(data != nullptr || bytes == 0, InvalidArgument, "commux: ", what,
               ": the data is NULL but its size is ", bytes);
  COMMUX_CHECK(offset <= to.bytes && bytes <= to.bytes - offset, InvalidArgument, "commux: ", what,
               ": ", bytes, " bytes at offset ", offset, " do not fit rank ", target,
               "'s window of ", to.bytes, " bytes");
  const auto source = static_cast<std::uint32_t>(group_.rank());
  auto description = engine::Description::p2p(what, "to", target, 0, bytes, 1);
  if (target == group_.rank()) {
    // This rank's own window: a copy now; a signal (if any) still goes through the inbox.
    if (bytes != 0) std::memmove(base_ + offset, data, bytes);
    if (!signal) {
      auto request =
          makeRequest(group_, Request::Kind::Send, std::move(description), target, timeout);
      request->completer()(nullptr, -1);  // done here: nothing travels
      return request;
    }
    return launched(group_, Request::Kind::Send, std::move(description), target, timeout,
                    [&](Request& r) {
                      return std::make_shared<engine::WindowSignalOp>(to.route, source, r.parts(),
                                                                      r.completer());
                    });
  }
  return launched(group_, Request::Kind::Send, std::move(description), target, timeout,
                  [&](Request& r) {
                    return std::make_shared<engine::WindowPutOp>(to.route, source, data, bytes,
                                                                 std::nullopt, offset, nullptr,
                                                                 signal, r.parts(), r.completer());
                  });
}

std::shared_ptr<Request> Window::signal(int target, std::chrono::milliseconds timeout) {
  const Peer& to = peer("window signal", target);
  group_.checkUsable();
  const auto source = static_cast<std::uint32_t>(group_.rank());
  return launched(
      group_, Request::Kind::Send, engine::Description::p2p("window signal", "to", target, 0, 0, 0),
      target, timeout, [&](Request& r) {
        return std::make_shared<engine::WindowSignalOp>(to.route, source, r.parts(), r.completer());
      });
}

std::shared_ptr<Request> Window::waitSignal(int source, std::chrono::milliseconds timeout) {
  peer("window wait_signal", source);
  group_.checkUsable();
  return launched(group_, Request::Kind::Recv,
                  engine::Description::p2p("window wait_signal", "from", source, 0, 0, 0), source,
                  timeout, [&](Request& r) {
                    return std::make_shared<engine::WaitSignalOp>(inbox_, source, r.parts(),
                                                                  r.completer());
                  });
}

std::shared_ptr<Request> Window::flush(int target, std::chrono::milliseconds timeout) {
  const Peer& to = peer("window flush", target);
  group_.checkUsable();
  const auto source = static_cast<std::uint32_t>(group_.rank());
  // A get of 0 bytes: answered once the puts this rank sent before it landed.
  return launched(group_, Request::Kind::Send,
                  engine::Description::p2p("window flush", "to", target, 0, 0, 0), target, timeout,
                  [&](Request& r) {
                    return std::make_shared<engine::WindowGetOp>(
                        to.route, source, static_cast<std::uint32_t>(target), context_, nullptr, 0,
                        std::nullopt, 0, nullptr, r.parts(), r.completer());
                  });
}

void Window::close(std::chrono::milliseconds timeout) {
  COMMUX_CHECK(inbox_ != nullptr, Runtime, "commux: window close: the window is closed already");
  std::vector<std::shared_ptr<const engine::Route>> others;
  for (int r = 0; r < group_.size(); ++r) {
    if (r != group_.rank()) others.push_back(peers_[static_cast<std::size_t>(r)].route);
  }
  auto request = std::make_shared<Request>(
      Request::Kind::Other,
      engine::Description("window close (window #" + std::to_string(index_) + ")"), timeout,
      group_.sharedEngine());
  try {
    group_.launch(request,
                  std::make_shared<engine::CloseWindowOp>(inbox_, std::move(others),
                                                          static_cast<std::uint32_t>(group_.rank()),
                                                          request->parts(), request->completer()),
                  std::nullopt);
    request->wait(timeout);
    if (auto error = request->error()) std::rethrow_exception(error);
  } catch (...) {
    release(true);
    throw;
  }
  COMMUX_CHECK(release(true), Backend, "commux: window close (window #", index_, "): ",
               stillUnderWay("the window"));
}

}  // namespace commux::group
