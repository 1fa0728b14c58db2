// Neighbourhood exchanges (halo/neighbour_exchange.hpp) behind the C API's handles: a graph
// of pieces as given, or a Cartesian grid's faces planned by the core (halo/cart_plan.hpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "capi/comm.hpp"
#include "core/error.hpp"
#include "halo/agree_on_cart.hpp"
#include "halo/cart_plan.hpp"
#include "halo/cart_topology.hpp"
#include "halo/neighbour_exchange.hpp"

struct commuxExchange {
  std::unique_ptr<commux::halo::NeighbourExchange> exchange;
};

namespace commux::capi {
namespace {

commuxExchange_t made(commuxComm& comm, std::vector<halo::NeighbourMessages> plan, int tag) {
  auto out = std::make_unique<commuxExchange>();
  out->exchange = std::make_unique<halo::NeighbourExchange>(*comm.group, std::move(plan), tag,
                                                            timeoutOf(&comm));
  return out.release();
}

// neighbours[index].send or .recv, checked before anything is sized by it: the caller's
// numbers are unchecked, and a sum of piece sizes that wrapped (2^63 and 2^63 + 8 "are" 8
// bytes) sized a staging buffer that commuxExchangeStart then overran (issue 59).
std::vector<halo::Piece> piecesOf(const commuxPiece* pieces, std::size_t count, std::size_t index,
                                  int rank, const char* side) {
  COMMUX_CHECK(pieces != nullptr || count == 0, InvalidArgument,
               "commux: commuxExchangeCreate: neighbours[", index, "].", side, " (rank ", rank,
               ") is NULL with ", count, " pieces");
  COMMUX_CHECK(count <= static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(commuxPiece),
               InvalidArgument, "commux: commuxExchangeCreate: neighbours[", index, "].", side,
               "Count (rank ", rank, ") is ", count, ": more pieces than memory holds");
  std::size_t total = 0;
  for (std::size_t i = 0; i < count; ++i) {
    COMMUX_CHECK(
        !__builtin_add_overflow(total, pieces[i].bytes, &total) && total <= halo::kMaxMessageBytes,
        InvalidArgument, "commux: commuxExchangeCreate: the pieces of neighbours[", index, "].",
        side, " (rank ", rank, ") add up to more than ", halo::kMaxMessageBytes, " bytes (", side,
        "[", i, "].bytes is ", pieces[i].bytes, ")");
  }
  std::vector<halo::Piece> out;
  out.reserve(count);
  for (std::size_t i = 0; i < count; ++i) out.push_back({pieces[i].data, pieces[i].bytes});
  return out;
}

halo::NeighbourExchange& checked(commuxExchange_t exchange, const char* what) {
  COMMUX_CHECK(exchange != nullptr && exchange->exchange != nullptr, InvalidArgument,
               "commux: ", what, ": the exchange is NULL");
  return *exchange->exchange;
}

}  // namespace
}  // namespace commux::capi

using namespace commux;
using capi::guarded;

extern "C" {

commuxResult_t commuxDimsCreate(int nranks, int ndims, int* dims) {
  return guarded([&] {
    COMMUX_CHECK(ndims > 0 && dims != nullptr, InvalidArgument,
                 "commux: commuxDimsCreate: needs ndims > 0 and dims");
    const auto out = halo::dimsCreate(nranks, std::vector<int>(dims, dims + ndims));
    for (int d = 0; d < ndims; ++d) dims[d] = out[static_cast<std::size_t>(d)];
  });
}

commuxResult_t commuxExchangeCreate(commuxComm_t comm, const commuxNeighbour* neighbours,
                                    size_t count, int tag, commuxExchange_t* exchange) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    COMMUX_CHECK(exchange != nullptr, InvalidArgument,
                 "commux: commuxExchangeCreate: exchange is NULL");
    *exchange = nullptr;
    COMMUX_CHECK(neighbours != nullptr || count == 0, InvalidArgument,
                 "commux: commuxExchangeCreate: neighbours is NULL with count ", count);
    COMMUX_CHECK(count <= static_cast<std::size_t>(PTRDIFF_MAX) / sizeof(commuxNeighbour),
                 InvalidArgument, "commux: commuxExchangeCreate: count is ", count,
                 ": more neighbours than memory holds");
    std::vector<halo::NeighbourMessages> plan;
    // Sized by what a valid plan can hold (each rank named once), never by the caller's
    // count alone: a rank named twice is refused by the exchange, naming it.
    plan.reserve(std::min(count, static_cast<std::size_t>(c.group->size())));
    for (std::size_t i = 0; i < count; ++i) {
      const commuxNeighbour& n = neighbours[i];
      halo::NeighbourMessages m;
      m.rank = n.rank;
      m.sends = n.send != nullptr;
      m.receives = n.recv != nullptr;
      if (m.sends) m.send = capi::piecesOf(n.send, n.sendCount, i, n.rank, "send");
      if (m.receives) m.recv = capi::piecesOf(n.recv, n.recvCount, i, n.rank, "recv");
      plan.push_back(std::move(m));
    }
    *exchange = capi::made(c, std::move(plan), tag);
  });
}

commuxResult_t commuxHaloCreate(commuxComm_t comm, int ndims, const int* dims, const int* periodic,
                                int diagonals, int nfields, void* const* fields,
                                const commuxDataType_t* types, int fieldNdims, const int64_t* shape,
                                const int64_t* widths, int tag, commuxExchange_t* exchange) {
  return guarded([&] {
    auto& c = capi::checkComm(comm);
    // Collective: a rank whose own arguments are refused still takes part in the ranks'
    // agreement, so the others raise too instead of waiting at their first step.
    std::exception_ptr refused;
    std::vector<halo::NeighbourMessages> plan;
    halo::CartDescription mine;
    try {
      COMMUX_CHECK(exchange != nullptr, InvalidArgument,
                   "commux: commuxHaloCreate: exchange is NULL");
      *exchange = nullptr;
      COMMUX_CHECK(ndims > 0 && dims != nullptr && periodic != nullptr && widths != nullptr,
                   InvalidArgument,
                   "commux: commuxHaloCreate: needs ndims > 0, dims, periodic and widths");
      COMMUX_CHECK(nfields > 0 && fields != nullptr && types != nullptr, InvalidArgument,
                   "commux: commuxHaloCreate: needs nfields > 0, fields and types");
      COMMUX_CHECK(fieldNdims >= ndims && shape != nullptr, InvalidArgument,
                   "commux: commuxHaloCreate: the fields have ", fieldNdims,
                   " dimensions (shape), fewer than the grid's ", ndims);
      mine.dims.assign(dims, dims + ndims);
      mine.periodic.assign(periodic, periodic + ndims);
      mine.diagonals = diagonals != 0;
      mine.tag = tag;
      mine.widths.assign(widths, widths + ndims);
      mine.shape.assign(shape, shape + fieldNdims);
      const halo::CartTopology grid(mine.dims, mine.periodic, mine.diagonals);
      COMMUX_CHECK(grid.size() == c.group->size(), InvalidArgument,
                   "commux: commuxHaloCreate: a grid of ", grid.size(),
                   " ranks for a communicator of ", c.group->size());
      std::vector<halo::Field> list;
      for (int i = 0; i < nfields; ++i) {
        const core::Dtype dtype = capi::dtypeOf(types[i], "commuxHaloCreate");
        mine.fieldTypes.push_back(static_cast<std::int64_t>(dtype));
        list.push_back({fields[i], core::sizeOf(dtype)});
      }
      plan = halo::cartMessages(grid, c.group->rank(), mine.shape, mine.widths, list);
    } catch (...) {
      refused = std::current_exception();
    }
    const auto typeName = [](std::int64_t code) {
      const bool known = code >= 0 && code <= static_cast<int>(core::Dtype::Opaque);
      return known ? std::string(core::nameOf(static_cast<core::Dtype>(code)))
                   : "type code " + std::to_string(code);
    };
    halo::agreeOnCart(*c.group, mine, refused, capi::timeoutOf(&c), "commuxHaloCreate", typeName);
    *exchange = capi::made(c, std::move(plan), tag);
  });
}

commuxResult_t commuxExchangeStart(commuxExchange_t exchange) {
  return guarded([&] { capi::checked(exchange, "commuxExchangeStart").start(); });
}

commuxResult_t commuxExchangeStartReceives(commuxExchange_t exchange) {
  return guarded([&] { capi::checked(exchange, "commuxExchangeStartReceives").startReceives(); });
}

commuxResult_t commuxExchangeReady(commuxExchange_t exchange, int rank) {
  return guarded([&] { capi::checked(exchange, "commuxExchangeReady").ready(rank); });
}

commuxResult_t commuxExchangeWait(commuxExchange_t exchange) {
  return guarded([&] { capi::checked(exchange, "commuxExchangeWait").wait(); });
}

commuxResult_t commuxExchangeTest(commuxExchange_t exchange, int* done) {
  return guarded([&] {
    COMMUX_CHECK(done != nullptr, InvalidArgument, "commuxExchangeTest: done is NULL");
    *done = 0;
    *done = capi::checked(exchange, "commuxExchangeTest").test() ? 1 : 0;
  });
}

commuxResult_t commuxExchangeFree(commuxExchange_t exchange) {
  return guarded([&] { delete exchange; });
}

}  // extern "C"
