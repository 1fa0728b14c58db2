#include "commux/tensor_exchange.hpp"

#include <ATen/MemoryOverlap.h>

#include <string>

#include "core/error.hpp"
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
  halo::appendPieces(field,
                     halo::Box{std::vector<std::int64_t>(static_cast<std::size_t>(t.dim()), 0),
                               t.sizes().vec()},
                     t.strides().vec(), out);
}

}  // namespace

TensorExchange::TensorExchange(c10::intrusive_ptr<ProcessGroupUCX> pg, std::vector<at::Tensor> keep)
    : pg_(std::move(pg)), keep_(std::move(keep)) {}

TensorExchange::TensorExchange(c10::intrusive_ptr<ProcessGroupUCX> pg,
                               const std::vector<Neighbour>& neighbours, int tag,
                               std::optional<std::size_t> packBelow)
    : pg_(std::move(pg)) {
  COMMUX_CHECK(pg_, InvalidArgument, "commux: neighbourhood exchange: no process group");
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
        keep_.push_back(t);
      }
    }
    plan.push_back(std::move(n));
  }
  exchange_ = std::make_unique<halo::NeighbourExchange>(
      pg_->coreGroup(), std::move(plan), tag, pg_->timeout(),
      packBelow.value_or(halo::kDefaultPackBelow));
}

TensorExchange TensorExchange::halo(c10::intrusive_ptr<ProcessGroupUCX> pg,
                                    std::vector<int> dims, std::vector<bool> periodic,
                                    bool diagonals, std::vector<at::Tensor> fields,
                                    std::vector<std::int64_t> widths, int tag) {
  COMMUX_CHECK(pg, InvalidArgument, "commux: halo exchange: no process group");
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
  }
  TensorExchange out(std::move(pg), fields);
  out.exchange_ = std::make_unique<halo::NeighbourExchange>(
      out.pg_->coreGroup(),
      halo::cartMessages(grid, out.pg_->getRank(), fields[0].sizes().vec(), widths, list), tag,
      out.pg_->timeout());
  return out;
}

TensorExchange::~TensorExchange() = default;
TensorExchange::TensorExchange(TensorExchange&&) noexcept = default;
TensorExchange& TensorExchange::operator=(TensorExchange&& other) noexcept {
  if (this != &other) {
    // The old exchange first: a step of it in flight still uses the old tensors.
    exchange_.reset();
    pg_ = std::move(other.pg_);
    keep_ = std::move(other.keep_);
    exchange_ = std::move(other.exchange_);
  }
  return *this;
}

halo::NeighbourExchange& TensorExchange::live() const {
  COMMUX_CHECK(exchange_ != nullptr, Runtime,
               "commux: neighbourhood exchange: this TensorExchange was moved from");
  return *exchange_;
}

void TensorExchange::start() { live().start(); }
void TensorExchange::wait() { live().wait(); }
void TensorExchange::startReceives() { live().startReceives(); }
void TensorExchange::ready(int rank) { live().ready(rank); }
bool TensorExchange::inFlight() const { return exchange_ != nullptr && exchange_->inFlight(); }

std::vector<std::pair<bool, bool>> TensorExchange::packing() const {
  std::vector<std::pair<bool, bool>> out;
  for (std::size_t i = 0; i < live().neighbours(); ++i) {
    out.emplace_back(exchange_->sendPacked(i), exchange_->recvPacked(i));
  }
  return out;
}

}  // namespace commux
