#include "commux/tensor_exchange.hpp"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/ivalue.h>
#include <torch/csrc/distributed/c10d/Work.hpp>

#include <exception>
#include <mutex>
#include <string>

#include "core/error.hpp"
#include "engine/engine.hpp"
#include "group/group.hpp"
#include "halo/agree_on_cart.hpp"
#include "halo/cart_plan.hpp"
#include "halo/cart_topology.hpp"
#include "halo/face_runs.hpp"
#include "halo/neighbour_exchange.hpp"

namespace commux {
namespace {

// A view's elements as contiguous pieces of its memory, in row-major order of the view.
void appendPieces(const at::Tensor& t, bool receive, int rank, std::vector<halo::Piece>& out) {
  COMMUX_CHECK(t.device().is_cpu(), InvalidArgument,
               "commux: neighbourhood exchange: its tensors must be CPU tensors; one for rank ",
               rank, " is on ", t.device().str());
  COMMUX_CHECK(!t.is_sparse() && t.layout() == c10::kStrided, InvalidArgument,
               "commux: neighbourhood exchange: it takes dense tensors");
  // Their memory holds other values than they read as: resolve_conj()/resolve_neg() first.
  COMMUX_CHECK(!t.is_conj() && !t.is_neg(), InvalidArgument,
               "commux: neighbourhood exchange: a tensor for rank ", rank,
               " is a lazily conjugated or negated view; pass t.resolve_conj() or "
               "t.resolve_neg()");
  COMMUX_CHECK(!receive || at::has_internal_overlap(t) != at::MemOverlap::Yes, InvalidArgument,
               "commux: neighbourhood exchange: a tensor received from rank ", rank,
               " has elements that share memory (a zero stride): it cannot be written");
  if (t.numel() == 0) return;
  const halo::Field field{t.data_ptr(), static_cast<std::size_t>(t.element_size())};
  if (t.dim() == 0) {
    out.push_back({field.data, field.elementSize});
    return;
  }
  halo::appendPieces(
      field,
      halo::Box{std::vector<std::int64_t>(static_cast<std::size_t>(t.dim()), 0), t.sizes().vec()},
      t.strides().vec(), out);
}

}  // namespace

struct TensorExchange::State {
  c10::intrusive_ptr<ProcessGroupUCX> pg;
  std::vector<at::Tensor> keep;                       // the memory the exchange reads and writes
  std::vector<at::Tensor> outputs;                    // what it writes: a step's future's value
  std::unique_ptr<halo::NeighbourExchange> exchange;  // after what it uses
};

// One step of a TensorExchange as a c10d Work (stepWork): its future is completed where the
// step ends (NeighbourExchange::finishWhenDone), and wait() waits for that step alone.
class TensorExchange::StepWork final : public c10d::Work {
 public:
  explicit StepWork(std::shared_ptr<State> state)
      : c10d::Work(state->pg->getRank(), c10d::OpType::UNKNOWN),
        state_(std::move(state)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {}

  // Arms the exchange's current step for this Work.
  void arm() {
    step_ = state_->exchange->finishWhenDone(
        [future = future_, outputs = state_->outputs](std::exception_ptr error) {
          if (error) {
            future->setError(error);
          } else {
            future->markCompleted(c10::IValue(outputs));
          }
        });
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return state_->outputs; }
  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override {
    // Whoever holds the future may wait on it (or chain on it) instead of calling wait(),
    // so nobody would drive the worker until the deferred hand-off: hand off now. Only
    // here: the progress thread woken for a step that wait() then ends fights it for the
    // worker, and the waiter pays a thread wake-up (3.7 -> 31 us a small 2-D step).
    if (!future_->completed()) state_->pg->coreGroup().sharedEngine()->handOff();
    return future_;
  }

  // The step's wait (it sends what is left while the step is current, times it out) and,
  // once it ended, the future's completion, so that isCompleted() and value() agree.
  bool wait(std::chrono::milliseconds /*timeout: the group's, per step*/) override {
    try {
      state_->exchange->waitStep(step_);
    } catch (...) {
      if (halo::NeighbourExchange::stepEnded(step_)) future_->wait();
      throw;
    }
    future_->wait();
    return true;
  }

 private:
  std::shared_ptr<State> state_;
  halo::NeighbourExchange::Step step_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

TensorExchange::TensorExchange(std::shared_ptr<State> state) : state_(std::move(state)) {}

TensorExchange::TensorExchange(c10::intrusive_ptr<ProcessGroupUCX> pg,
                               const std::vector<Neighbour>& neighbours, int tag,
                               std::optional<std::size_t> packBelow)
    : state_(std::make_shared<State>()) {
  COMMUX_CHECK(pg, InvalidArgument, "commux: neighbourhood exchange: no process group");
  state_->pg = std::move(pg);
  std::vector<halo::NeighbourMessages> plan;
  for (const auto& nb : neighbours) {
    halo::NeighbourMessages n;
    n.rank = nb.rank;
    n.sends = nb.send.has_value();
    n.receives = nb.recv.has_value();
    n.packBelow = nb.packBelow.value_or(0);
    for (const auto* list : {&nb.send, &nb.recv}) {
      if (!list->has_value()) continue;
      const bool receive = list == &nb.recv;
      for (const auto& t : **list) {
        appendPieces(t, receive, nb.rank, receive ? n.recv : n.send);
        state_->keep.push_back(t);
        if (receive) state_->outputs.push_back(t);
      }
    }
    plan.push_back(std::move(n));
  }
  state_->exchange = std::make_unique<halo::NeighbourExchange>(
      state_->pg->coreGroup(), std::move(plan), tag, state_->pg->timeout(),
      packBelow.value_or(halo::kDefaultPackBelow));
}

TensorExchange TensorExchange::halo(c10::intrusive_ptr<ProcessGroupUCX> pg, std::vector<int> dims,
                                    std::vector<bool> periodic, bool diagonals,
                                    std::vector<at::Tensor> fields,
                                    std::vector<std::int64_t> widths, int tag) {
  COMMUX_CHECK(pg, InvalidArgument, "commux: halo exchange: no process group");
  // Collective: a rank whose own arguments are refused still takes part in the ranks'
  // agreement, so the others raise too instead of waiting at their first step.
  std::exception_ptr refused;
  std::vector<halo::NeighbourMessages> plan;
  halo::CartDescription mine{dims, periodic, diagonals, tag, widths, {}, {}};
  try {
    const halo::CartTopology grid(std::move(dims), std::move(periodic), diagonals);
    COMMUX_CHECK(grid.size() == pg->getSize(), InvalidArgument, "commux: halo exchange: a grid of ",
                 grid.size(), " ranks for a group of ", pg->getSize());
    COMMUX_CHECK(!fields.empty(), InvalidArgument, "commux: halo exchange: no fields");
    std::vector<halo::Field> list;
    for (std::size_t i = 0; i < fields.size(); ++i) {
      const at::Tensor& f = fields[i];
      COMMUX_CHECK(f.device().is_cpu() && f.layout() == c10::kStrided && f.is_contiguous() &&
                       !f.is_conj() && !f.is_neg(),
                   InvalidArgument, "commux: halo exchange: field ", i,
                   " must be a contiguous CPU tensor (not a lazily conjugated or negated view)");
      COMMUX_CHECK(f.sizes() == fields[0].sizes(), InvalidArgument, "commux: halo exchange: field ",
                   i, " has shape ", f.sizes(), ", field 0 ", fields[0].sizes());
      list.push_back({f.data_ptr(), static_cast<std::size_t>(f.element_size())});
      mine.fieldTypes.push_back(static_cast<std::int64_t>(f.scalar_type()));
    }
    mine.shape = fields[0].sizes().vec();
    plan = halo::cartMessages(grid, pg->getRank(), mine.shape, widths, list);
  } catch (...) {
    refused = std::current_exception();
  }
  const auto typeName = [](std::int64_t code) {
    const bool known = code >= 0 && code < static_cast<std::int64_t>(c10::ScalarType::NumOptions);
    return known ? std::string(c10::toString(static_cast<c10::ScalarType>(code)))
                 : "type code " + std::to_string(code);
  };
  halo::agreeOnCart(pg->coreGroup(), mine, refused, pg->timeout(), "halo exchange", typeName);
  auto state = std::make_shared<State>();
  state->pg = std::move(pg);
  state->keep = fields;
  state->outputs = fields;
  state->exchange = std::make_unique<halo::NeighbourExchange>(
      state->pg->coreGroup(), std::move(plan), tag, state->pg->timeout());
  return TensorExchange(std::move(state));
}

TensorExchange::~TensorExchange() = default;
TensorExchange::TensorExchange(TensorExchange&&) noexcept = default;
TensorExchange& TensorExchange::operator=(TensorExchange&&) noexcept = default;

halo::NeighbourExchange& TensorExchange::live() const {
  COMMUX_CHECK(state_ != nullptr, Runtime,
               "commux: neighbourhood exchange: this TensorExchange was moved from");
  return *state_->exchange;
}

c10::intrusive_ptr<c10d::Work> TensorExchange::stepWork() {
  auto& exchange = live();
  COMMUX_CHECK(exchange.inFlight(), Runtime,
               "commux: neighbourhood exchange: no step in flight (start first)");
  auto work = c10::make_intrusive<StepWork>(state_);
  work->arm();
  return work;
}

c10::intrusive_ptr<c10d::Work> TensorExchange::startWork(bool partitioned) {
  if (partitioned) {
    startReceives();
  } else {
    start();
  }
  return stepWork();
}

void TensorExchange::start() { live().start(); }
void TensorExchange::wait() { live().wait(); }
void TensorExchange::startReceives() { live().startReceives(); }
void TensorExchange::ready(int rank) { live().ready(rank); }
bool TensorExchange::inFlight() const { return state_ != nullptr && state_->exchange->inFlight(); }

std::vector<std::pair<bool, bool>> TensorExchange::packing() const {
  std::vector<std::pair<bool, bool>> out;
  for (std::size_t i = 0; i < live().neighbours(); ++i) {
    out.emplace_back(state_->exchange->sendPacked(i), state_->exchange->recvPacked(i));
  }
  return out;
}

std::vector<std::pair<bool, bool>> TensorExchange::sharing() const {
  std::vector<std::pair<bool, bool>> out;
  for (std::size_t i = 0; i < live().neighbours(); ++i) {
    out.emplace_back(state_->exchange->sendsShared(i), state_->exchange->receivesShared(i));
  }
  return out;
}

}  // namespace commux
