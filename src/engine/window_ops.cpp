#include "engine/window_ops.hpp"

#include <cstring>

#include "cuda/cuda_support.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "wire/tag.hpp"

namespace commux::engine {

namespace window {

wire::Tag controlTag(std::uint32_t context, std::uint32_t source) {
  return wire::p2pTag(context, source, 0);
}

wire::Tag dataTag(std::uint32_t context, std::uint32_t source) {
  return wire::p2pTag(context, source, 1);
}

wire::Tag replyTag(std::uint32_t context, std::uint32_t source) {
  return wire::p2pTag(context, source, 2);
}

}  // namespace window

namespace {
constexpr std::uint32_t kControlSlot = 0;
}  // namespace

WindowInbox::WindowInbox(std::uint32_t context, int rank, int groupSize, char* base,
                         std::size_t bytes, std::optional<int> device,
                         Description description, Done done)
    : Op(std::move(description), std::move(done)),
      context_(context),
      rank_(static_cast<std::uint32_t>(rank)),
      base_(base),
      bytes_(bytes),
      memory_(device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST),
      control_(sizeof(window::Header) + window::kEagerBytes),
      sources_(static_cast<std::size_t>(groupSize)) {
  cudaDevice_ = device;  // its receives into device memory may start on the progress thread
}

void WindowInbox::start(Engine& engine) {
  startedOn_ = &engine;
  postControl(engine);
}

void WindowInbox::postControl(Engine& engine) {
  postRecv(engine, control_.data(), control_.size(), window::controlTag(context_, 0),
           wire::kAnySourceMask, kControlSlot, UCS_MEMORY_TYPE_HOST);
}

void WindowInbox::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  if (slot == kControlSlot) {
    onControl(engine, static_cast<int>(wire::sourceOf(info.senderTag)), info.length);
    if (!finished()) postControl(engine);
  } else if (slots_.at(slot - 1).reply) {
    freeSlots_.push_back(slot);  // an answer went out
  } else {
    onData(engine, slot);
  }
  maybeClosed(engine);
}

std::uint32_t WindowInbox::takeSlot(const DataSlot& data) {
  std::uint32_t slot;
  if (freeSlots_.empty()) {
    slots_.emplace_back();
    slot = static_cast<std::uint32_t>(slots_.size());
  } else {
    slot = freeSlots_.back();
    freeSlots_.pop_back();
  }
  slots_[slot - 1] = data;
  return slot;
}

void WindowInbox::setRoutes(Engine& engine, std::vector<std::shared_ptr<const Route>> routes) {
  routes_ = std::move(routes);
  auto waiting = std::move(unanswered_);
  unanswered_.clear();
  for (const auto& get : waiting) answer(engine, get);
}

void WindowInbox::answer(Engine& engine, const Get& get) {
  if (routes_.empty()) {
    unanswered_.push_back(get);
    return;
  }
  const auto& route = routes_.at(static_cast<std::size_t>(get.source));
  const std::uint32_t slot = takeSlot(DataSlot{true, get.source, 0});
  const cuda::DeviceScope onDevice(cudaDevice_);
  postSend(engine, engine.endpoint(*route), get.bytes == 0 ? nullptr : base_ + get.offset,
           get.bytes, window::replyTag(route->context, rank_), slot, memory_);
}

void WindowInbox::onControl(Engine& engine, int source, std::size_t length) {
  COMMUX_CHECK(source >= 0 && static_cast<std::size_t>(source) < sources_.size() &&
                   length >= sizeof(window::Header),
               Runtime, "commux: ", description(), ": malformed control message from rank ",
               source);
  window::Header header;
  std::memcpy(&header, control_.data(), sizeof(header));
  Source& from = sources_[static_cast<std::size_t>(source)];
  // The sender checked the bounds against this window's size; a message that breaks them
  // is not one of ours and must not write outside the window.
  const bool inside = header.offset <= bytes_ && header.bytes <= bytes_ - header.offset;
  switch (header.type) {
    case window::Type::Put:
    case window::Type::PutSignal:
      COMMUX_CHECK(inside && length == sizeof(header) + header.bytes, Runtime,
                   "commux: ", description(), ": a put from rank ", source,
                   " does not fit the window");
      COMMUX_CHECK(header.bytes == 0 || memory_ == UCS_MEMORY_TYPE_HOST, Runtime,
                   "commux: ", description(), ": rank ", source,
                   " sent data inline to device memory");
      if (header.bytes != 0) {
        std::memcpy(base_ + header.offset, control_.data() + sizeof(header), header.bytes);
      }
      if (header.type == window::Type::PutSignal) {
        from.pending.push_back(Source::Pending{window::Type::Signal, from.posted});
        release(engine, source);
      }
      break;
    case window::Type::PutLarge: {
      COMMUX_CHECK(inside, Runtime, "commux: ", description(), ": a put from rank ", source,
                   " does not fit the window");
      const std::uint32_t slot = takeSlot(DataSlot{false, source, from.posted++});
      from.landed.push_back(false);
      // Whichever thread drives the worker posts it: UCX needs the window's GPU current.
      const cuda::DeviceScope onDevice(cudaDevice_);
      postRecv(engine, base_ + header.offset, header.bytes,
               window::dataTag(context_, static_cast<std::uint32_t>(source)), wire::kExactMask,
               slot, memory_);
      break;
    }
    case window::Type::Signal:
    case window::Type::Close:
      from.pending.push_back(Source::Pending{header.type, from.posted});
      release(engine, source);
      break;
    case window::Type::Get:
      COMMUX_CHECK(inside, Runtime, "commux: ", description(), ": a get from rank ", source,
                   " does not fit the window");
      from.pending.push_back(
          Source::Pending{header.type, from.posted, header.offset, header.bytes});
      release(engine, source);
      break;
    default:
      COMMUX_FAIL(Runtime, "commux: ", description(), ": unknown control message from rank ",
                  source);
  }
}

void WindowInbox::onData(Engine& engine, std::uint32_t slot) {
  const DataSlot data = slots_.at(slot - 1);
  freeSlots_.push_back(slot);
  Source& from = sources_[static_cast<std::size_t>(data.source)];
  from.landed[data.index - from.doneBelow] = true;
  while (!from.landed.empty() && from.landed.front()) {
    from.landed.pop_front();
    ++from.doneBelow;
  }
  release(engine, data.source);
}

void WindowInbox::release(Engine& engine, int source) {
  Source& from = sources_[static_cast<std::size_t>(source)];
  while (!from.pending.empty() && from.pending.front().after <= from.doneBelow) {
    const Source::Pending next = from.pending.front();
    const auto type = next.type;
    from.pending.pop_front();
    if (type == window::Type::Get) {
      answer(engine, Get{source, next.offset, next.bytes});
    } else if (type == window::Type::Close) {
      if (!from.closed) ++closedPeers_;
      from.closed = true;
    } else if (!from.waiters.empty()) {
      auto waiter = std::move(from.waiters.front());
      from.waiters.pop_front();
      waiter->deliver();
    } else {
      ++from.ready;
    }
  }
}

void WindowInbox::addWaiter(const std::shared_ptr<WaitSignalOp>& waiter, int peer) {
  COMMUX_CHECK(!finished(), Runtime, "commux: ", description(), " is closed");
  Source& from = sources_.at(static_cast<std::size_t>(peer));
  if (from.ready > 0 && from.waiters.empty()) {
    --from.ready;
    waiter->deliver();
    return;
  }
  from.waiters.push_back(waiter);
}

void WindowInbox::removeWaiter(const WaitSignalOp* waiter, int peer) {
  auto& waiters = sources_.at(static_cast<std::size_t>(peer)).waiters;
  for (auto it = waiters.begin(); it != waiters.end(); ++it) {
    if (it->get() == waiter) {
      waiters.erase(it);
      return;
    }
  }
}

void WindowInbox::addCloser(Engine& engine, const std::shared_ptr<CloseWindowOp>& closer) {
  COMMUX_CHECK(!finished(), Runtime, "commux: ", description(), " is closed");
  closer_ = closer;
  maybeClosed(engine);
}

void WindowInbox::maybeClosed(Engine& engine) {
  // Every peer but this rank sends a close.
  if (!closer_ || closedPeers_ + 1 < sources_.size()) return;
  auto closer = std::move(closer_);
  closer->peersClosed();
  retire(engine);
}

void WindowInbox::onFailed() {
  if (startedOn_ == nullptr) return;
  // The engine stops, or a control message could not be taken: nothing would release
  // these waits any more.
  const auto error = commError("commux: " + description() + " stopped receiving");
  for (auto& source : sources_) {
    auto waiters = std::move(source.waiters);
    for (auto& waiter : waiters) waiter->fail(*startedOn_, error);
  }
  if (auto closer = std::move(closer_)) closer->fail(*startedOn_, error);
}

WindowPutOp::WindowPutOp(std::shared_ptr<const Route> route, std::uint32_t source, const void* data,
                         std::size_t bytes, std::optional<int> device,
                         std::size_t offsetBytes, std::shared_ptr<void> keepAlive, bool signal,
                         Description description, Done done)
    : Op(std::move(description), std::move(done)),
      route_(std::move(route)),
      source_(source),
      data_(data),
      bytes_(bytes),
      memory_(device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST),
      large_(bytes != 0 && (device || bytes > window::kEagerBytes)) {
  cudaDevice_ = device;
  callerSynchronised_ = true;
  window::Header header;
  header.offset = offsetBytes;
  header.bytes = bytes;
  if (!large_) {
    header.type = signal ? window::Type::PutSignal : window::Type::Put;
    control_.resize(sizeof(header) + bytes);
    if (bytes != 0) std::memcpy(control_.data() + sizeof(header), data, bytes);
  } else {
    header.type = window::Type::PutLarge;
    control_.resize(sizeof(header));
    keepAlive_ = std::move(keepAlive);
    signalAfter_ = signal;
    signal_.type = window::Type::Signal;
  }
  std::memcpy(control_.data(), &header, sizeof(header));
}

void WindowPutOp::start(Engine& engine) {
  ucp_ep_h ep = engine.endpoint(*route_);
  postSend(engine, ep, control_.data(), control_.size(),
           window::controlTag(route_->context, source_), 0, UCS_MEMORY_TYPE_HOST);
  if (large_) {
    postSend(engine, ep, data_, bytes_, window::dataTag(route_->context, source_), 1, memory_);
    if (signalAfter_) {
      postSend(engine, ep, &signal_, sizeof(signal_), window::controlTag(route_->context, source_),
               2, UCS_MEMORY_TYPE_HOST);
    }
  }
}

void WindowPutOp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  if (outstanding() == 0) succeed();
}

WindowSignalOp::WindowSignalOp(std::shared_ptr<const Route> route, std::uint32_t source,
                               Description description, Done done)
    : Op(std::move(description), std::move(done)), route_(std::move(route)), source_(source) {
  header_.type = window::Type::Signal;
}

void WindowSignalOp::start(Engine& engine) {
  postSend(engine, engine.endpoint(*route_), &header_, sizeof(header_),
           window::controlTag(route_->context, source_), 0, UCS_MEMORY_TYPE_HOST);
}

void WindowSignalOp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  succeed();
}

WindowGetOp::WindowGetOp(std::shared_ptr<const Route> route, std::uint32_t source,
                         std::uint32_t target, std::uint32_t context, void* data, std::size_t bytes,
                         std::optional<int> device, std::size_t offsetBytes,
                         std::shared_ptr<void> keepAlive, Description description, Done done)
    : Op(std::move(description), std::move(done)),
      route_(std::move(route)),
      source_(source),
      target_(target),
      context_(context),
      data_(data),
      bytes_(bytes),
      memory_(device ? UCS_MEMORY_TYPE_CUDA : UCS_MEMORY_TYPE_HOST),
      keepAlive_(std::move(keepAlive)) {
  cudaDevice_ = device;
  callerSynchronised_ = true;
  header_.type = window::Type::Get;
  header_.offset = offsetBytes;
  header_.bytes = bytes;
}

void WindowGetOp::start(Engine& engine) {
  // The answer's receive first: it is posted before the request can be answered.
  postRecv(engine, data_, bytes_, window::replyTag(context_, target_), wire::kExactMask, 0,
           memory_);
  postSend(engine, engine.endpoint(*route_), &header_, sizeof(header_),
           window::controlTag(route_->context, source_), 1, UCS_MEMORY_TYPE_HOST);
}

void WindowGetOp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  COMMUX_CHECK(slot != 0 || info.length == bytes_, Runtime, "commux: ", description(),
               ": the answer has ", info.length, " bytes, not ", bytes_);
  if (outstanding() == 0) succeed();
}

WindowRoutesOp::WindowRoutesOp(std::shared_ptr<WindowInbox> inbox,
                               std::vector<std::shared_ptr<const Route>> routes)
    : Op(Description("a window's routes"), nullptr),
      inbox_(std::move(inbox)),
      routes_(std::move(routes)) {}

void WindowRoutesOp::start(Engine& engine) {
  if (!inbox_->finished()) inbox_->setRoutes(engine, std::move(routes_));
  succeed();
}

WaitSignalOp::WaitSignalOp(std::shared_ptr<WindowInbox> inbox, int peer, Description description,
                           Done done)
    : Op(std::move(description), std::move(done)), inbox_(std::move(inbox)), peer_(peer) {}

void WaitSignalOp::start(Engine& engine) {
  inbox_->addWaiter(std::static_pointer_cast<WaitSignalOp>(shared_from_this()), peer_);
}

void WaitSignalOp::onFailed() { inbox_->removeWaiter(this, peer_); }

CloseWindowOp::CloseWindowOp(std::shared_ptr<WindowInbox> inbox,
                             std::vector<std::shared_ptr<const Route>> peers, std::uint32_t source,
                             Description description, Done done)
    : Op(std::move(description), std::move(done)),
      inbox_(std::move(inbox)),
      peers_(std::move(peers)),
      source_(source) {
  header_.type = window::Type::Close;
}

void CloseWindowOp::start(Engine& engine) {
  std::uint32_t slot = 0;
  for (const auto& peer : peers_) {
    postSend(engine, engine.endpoint(*peer), &header_, sizeof(header_),
             window::controlTag(peer->context, source_), slot++, UCS_MEMORY_TYPE_HOST);
  }
  if (peers_.empty()) sent_ = true;
  inbox_->addCloser(engine, std::static_pointer_cast<CloseWindowOp>(shared_from_this()));
  maybeDone();
}

void CloseWindowOp::onComplete(Engine& engine, std::uint32_t slot, const RecvInfo& info) {
  if (outstanding() == 0) sent_ = true;
  maybeDone();
}

void CloseWindowOp::peersClosed() {
  peersClosed_ = true;
  maybeDone();
}

bool CloseWindowOp::awaits(int rank) const { return !sent_ || !inbox_->closedBy(rank); }

void CloseWindowOp::maybeDone() {
  if (sent_ && peersClosed_) succeed();
}

}  // namespace commux::engine
