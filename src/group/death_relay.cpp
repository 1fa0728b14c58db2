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
  OnNotice onNotice;
  std::shared_ptr<Notice> buffer = std::make_shared<Notice>();
  std::shared_ptr<engine::Op> receive;  // the standing receive
};

DeathRelay::DeathRelay(std::shared_ptr<engine::Engine> engine, std::uint32_t context, int rank,
                       OnNotice onNotice)
    : rank_(rank), state_(std::make_shared<State>()) {
  state_->engine = std::move(engine);
  state_->context = context;
  state_->onNotice = std::move(onNotice);
  std::lock_guard<std::mutex> lock(state_->mutex);
  post(state_);
}

DeathRelay::~DeathRelay() { close(); }

void DeathRelay::post(const std::shared_ptr<State>& state) {
  std::weak_ptr<State> weak = state;
  auto op = std::make_shared<engine::P2POp>(
      engine::P2POp::Kind::Recv, bufferOf(state->buffer), nullptr,
      wire::controlTag(state->context, 0), wire::kControlMask, false,
      engine::Description::p2p("death notice", "from", -1, 0, kNoticeBytes, 1),
      [weak](std::exception_ptr error, int source) {
        auto state = weak.lock();
        if (!state) return;
        std::lock_guard<std::mutex> lock(state->mutex);
        if (state->closed) return;  // cancelled by close()
        // Any other failure (a notice cut short by its dying sender, a malformed one) costs
        // that notice only: the receive is posted again below, so this rank never goes deaf.
        // When the engine stops, posting fails quietly and that is the end.
        if (!error) {
          const auto* bytes = state->buffer->data();
          std::int32_t dead = -1;
          std::memcpy(&dead, bytes, sizeof(dead));
          const char* text = reinterpret_cast<const char*>(bytes + sizeof(dead));
          std::string why(text, strnlen(text, kNoticeBytes - sizeof(dead)));
          // The chain of ranks it came through, as each receiver appends its sender.
          why += (why.empty() ? "" : "; ") + std::string("told by rank ") + std::to_string(source);
          try {
            state->onNotice(dead, why, source);
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

void DeathRelay::tell(int dead, const std::string& why,
                      const std::vector<std::shared_ptr<const engine::Route>>& targets) {
  if (targets.empty()) return;
  auto notice = std::make_shared<Notice>();  // zeroed; the text ends in a zero byte
  auto* bytes = notice->data();
  const std::int32_t rank = dead;
  std::memcpy(bytes, &rank, sizeof(rank));
  std::memcpy(bytes + sizeof(rank), why.data(),
              std::min<std::size_t>(why.size(), kNoticeBytes - sizeof(rank) - 1));
  for (const auto& route : targets) {
    if (!route) continue;
    auto op = std::make_shared<engine::P2POp>(
        engine::P2POp::Kind::Send, bufferOf(notice), route,
        wire::controlTag(route->context, static_cast<std::uint32_t>(rank_)), wire::kExactMask,
        false, engine::Description::p2p("death notice", "to", -1, 0, kNoticeBytes, 1),
        [](std::exception_ptr, int) {});
    try {
      state_->engine->submit(engine::Submission::start(std::move(op)).drive(engine::Drive::Never));
    } catch (const std::exception&) {
      return;  // the engine is shutting down
    }
  }
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
