#include "group/death_relay.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

#include "engine/description.hpp"
#include "engine/engine.hpp"
#include "engine/errors.hpp"
#include "engine/p2p_op.hpp"
#include "wire/tag.hpp"

namespace commux {

namespace {

using Notice = std::array<std::uint8_t, DeathRelay::kNoticeBytes>;
// Where a notice's fields lie.
constexpr std::size_t kRankAt = 0;
constexpr std::size_t kLeftAt = 4;     // 1 when the rank left (its process lives on)
constexpr std::size_t kThroughAt = 5;  // the first collective it did not do, when it left
constexpr std::size_t kFromAt = 9;     // the sender's rank
constexpr std::size_t kIncarnationAt = 13;  // the receiver's group, as its record said
constexpr std::size_t kTextAt = 15;

// Each operation keeps the notice it sends or receives into alive: a cancelled receive may
// still be UCX's after the relay closed, and one notice feeds several sends.
engine::P2POp::Buffers bufferOf(const std::shared_ptr<Notice>& notice) {
  engine::P2POp::Buffers buffers;
  buffers.push_back(core::bufferOf(notice->data(), notice->size(), core::Dtype::UInt8, notice));
  return buffers;
}

}  // namespace

struct DeathRelay::State {
  std::mutex mutex;  // held while onNotice runs, so close() waits for it
  bool closed = false;
  std::shared_ptr<engine::Engine> engine;
  std::uint32_t context = 0;
  std::uint16_t incarnation = 0;
  OnNotice onNotice;
  std::shared_ptr<Notice> buffer = std::make_shared<Notice>();
  std::shared_ptr<engine::Op> receive;  // the standing receive
};

DeathRelay::DeathRelay(std::shared_ptr<engine::Engine> engine, std::uint32_t context,
                       std::uint16_t incarnation, int rank, OnNotice onNotice)
    : rank_(rank), state_(std::make_shared<State>()) {
  state_->engine = std::move(engine);
  state_->context = context;
  state_->incarnation = incarnation;
  state_->onNotice = std::move(onNotice);
  std::lock_guard<std::mutex> lock(state_->mutex);
  post(state_);
}

DeathRelay::~DeathRelay() { close(); }

void DeathRelay::post(const std::shared_ptr<State>& state) {
  std::weak_ptr<State> weak = state;
  state->buffer->fill(0);  // a shorter notice leaves nothing of the previous one
  auto op = std::make_shared<engine::P2POp>(
      engine::P2POp::Kind::Recv, bufferOf(state->buffer), nullptr,
      // Every notice to this group carries the same tag (the sender is in the notice): an
      // exact receive, which UCX keeps out of the wildcard queue that every incoming
      // message of the process would otherwise be compared with.
      wire::controlTag(state->context, 0), wire::kCollectiveMask, false,
      engine::Description::p2p("death notice", "from", -1, 0, kNoticeBytes, 1),
      [weak](std::exception_ptr error, int) {
        auto state = weak.lock();
        if (!state) return;
        std::lock_guard<std::mutex> lock(state->mutex);
        if (state->closed) return;  // cancelled by close()
        // Any other failure (a notice cut short by its dying sender, a malformed one) costs
        // that notice only: the receive is posted again below, so this rank never goes deaf.
        // When the engine stops, posting fails quietly and that is the end.
        // A notice of any other form (a sender of another build), or one for an earlier
        // group that had this context here (it came after that group's end), is dropped.
        std::uint16_t incarnation = 0;
        std::memcpy(&incarnation, state->buffer->data() + kIncarnationAt, sizeof(incarnation));
        if (!error && state->buffer->at(kLeftAt) <= 1 && incarnation == state->incarnation) {
          const auto* bytes = state->buffer->data();
          std::int32_t dead = -1;
          std::memcpy(&dead, bytes + kRankAt, sizeof(dead));
          std::optional<std::uint32_t> through;
          if (bytes[kLeftAt] == 1) {
            std::uint32_t value = 0;
            std::memcpy(&value, bytes + kThroughAt, sizeof(value));
            through = value;
          }
          std::int32_t source = -1;
          std::memcpy(&source, bytes + kFromAt, sizeof(source));
          const char* text = reinterpret_cast<const char*>(bytes + kTextAt);
          std::string why(text, strnlen(text, kNoticeBytes - kTextAt));
          // The chain of ranks it came through, as each receiver appends its sender.
          why += (why.empty() ? "" : "; ") + std::string("told by rank ") + std::to_string(source);
          try {
            state->onNotice(dead, why, source, through);
          } catch (const std::exception&) {
            // The engine is stopping (failing what waits needs its queue): nothing to save.
          }
        }
        post(state);
      });
  state->receive = op;
  try {
    state->engine->submit(engine::Submission::start(std::move(op)).drive(engine::Drive::Never));
  } catch (const std::exception&) {
    // The engine is shutting down: no more deaths to hear of.
  }
}

std::shared_ptr<DeathRelay::Sent> DeathRelay::tell(
    int dead, const std::string& why,
    const std::vector<std::shared_ptr<const engine::Route>>& targets,
    std::optional<std::uint32_t> through) {
  if (targets.empty()) return nullptr;
  auto notice = std::make_shared<Notice>();  // zeroed; the text ends in a zero byte
  auto* bytes = notice->data();
  const std::int32_t rank = dead;
  std::memcpy(bytes + kRankAt, &rank, sizeof(rank));
  if (through) {
    bytes[kLeftAt] = 1;
    std::memcpy(bytes + kThroughAt, &*through, sizeof(*through));
  }
  const std::int32_t from = rank_;
  std::memcpy(bytes + kFromAt, &from, sizeof(from));
  std::memcpy(bytes + kTextAt, why.data(),
              std::min<std::size_t>(why.size(), kNoticeBytes - kTextAt - 1));
  auto sent = std::make_shared<Sent>();
  sent->left.store(targets.size() + 1);  // + 1: held until every notice is submitted
  engine::Engine* const engine = state_->engine.get();
  const auto oneDone = [sent, engine] {
    if (sent->left.fetch_sub(1) == 1) engine->setDone(sent->flag);
  };
  for (const auto& route : targets) {
    if (!route) {
      oneDone();
      continue;
    }
    // Each receiver's copy names its group's incarnation.
    auto mine = std::make_shared<Notice>(*notice);
    std::memcpy(mine->data() + kIncarnationAt, &route->incarnation, sizeof(route->incarnation));
    auto op = std::make_shared<engine::P2POp>(
        engine::P2POp::Kind::Send, bufferOf(mine), route,
        wire::controlTag(route->context, 0), wire::kExactMask,
        false, engine::Description::p2p("death notice", "to", -1, 0, kNoticeBytes, 1),
        [oneDone](std::exception_ptr, int) { oneDone(); });
    try {
      state_->engine->submit(engine::Submission::start(std::move(op)).drive(engine::Drive::Never));
    } catch (const std::exception&) {
      return nullptr;  // the engine is shutting down
    }
  }
  oneDone();
  return sent;
}

void DeathRelay::close() {
  std::shared_ptr<engine::Op> receive;
  {
    std::lock_guard<std::mutex> lock(state_->mutex);
    if (state_->closed) return;
    state_->closed = true;
    receive = std::move(state_->receive);
  }
  if (!receive) return;
  try {
    state_->engine->submit(
        engine::Submission::cancel(
            std::move(receive), engine::commError("commux: the group's death notices were closed"))
            .drive(engine::Drive::Never));
  } catch (const std::exception&) {
    // The engine is shutting down and fails the receive itself.
  }
}

}  // namespace commux
