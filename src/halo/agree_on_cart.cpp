#include "halo/agree_on_cart.hpp"

#include <memory>
#include <vector>

#include "core/buffer.hpp"
#include "core/error.hpp"
#include "group/collectives.hpp"
#include "group/group.hpp"
#include "group/request.hpp"

namespace commux::halo {
namespace {

// Every rank's `mine` (equal lengths), in rank order. The buffers are owned by the
// operation: a timed-out one may still be cancelling when this returns.
std::vector<std::int64_t> gathered(group::Group& group, const std::vector<std::int64_t>& mine,
                                   std::chrono::milliseconds timeout) {
  auto in = std::make_shared<std::vector<std::int64_t>>(mine);
  auto all = std::make_shared<std::vector<std::int64_t>>(mine.size() *
                                                         static_cast<std::size_t>(group.size()));
  auto request =
      group::allgather(group, core::bufferOf(in->data(), in->size(), core::Dtype::Int64, in),
                       core::bufferOf(all->data(), all->size(), core::Dtype::Int64, all), timeout);
  try {
    request->wait(timeout);
  } catch (...) {
    request->waitUntil(std::chrono::steady_clock::now() + group::kCancelWait);
    throw;
  }
  if (auto error = request->error()) std::rethrow_exception(error);
  return *all;
}

// The agreement itself; `mine` null for a rank that refused its own arguments (it returns
// once the others know).
void agree(group::Group& group, const CartDescription* mine, std::chrono::milliseconds timeout,
           const std::string& what, const std::function<std::string(std::int64_t)>& typeName) {
  // Its allgathers must run now, not at the end of a batch (commuxGroupStart, a coalescing
  // window): every rank is inside one alike, or none is.
  COMMUX_CHECK(!group.batching(), Runtime, "commux: ", what,
               ": it is collective and runs at once; call it outside a batch of operations "
               "(commuxGroupStart/End, a coalescing window)");
  std::vector<std::int64_t> header = cartHeader(mine);
  const std::vector<std::int64_t> headers = gathered(group, header, timeout);
  if (const std::string why = headerDisagreement(headers, what); !why.empty()) {
    if (mine == nullptr) return;
    COMMUX_FAIL(InvalidArgument, why);
  }
  // Every header is this rank's now: each body is as long as this rank's.
  const std::vector<std::int64_t> body = cartBody(*mine);
  COMMUX_ASSERT(body.size() == cartBodyWords(header.data()));
  const std::vector<std::int64_t> bodies = gathered(group, body, timeout);
  std::vector<CartDescription> all;
  for (int r = 0; r < group.size(); ++r) {
    all.push_back(
        cartFromBody(bodies.data() + static_cast<std::size_t>(r) * body.size(), header.data()));
  }
  if (const std::string why = cartDisagreement(all, what, typeName); !why.empty()) {
    COMMUX_FAIL(InvalidArgument, why);
  }
}

}  // namespace

void agreeOnCart(group::Group& group, const CartDescription& mine, std::exception_ptr refused,
                 std::chrono::milliseconds timeout, const std::string& what,
                 const std::function<std::string(std::int64_t)>& typeName) {
  try {
    agree(group, refused ? nullptr : &mine, timeout, what, typeName);
  } catch (...) {
    if (refused) std::rethrow_exception(refused);  // this rank's own error first
    throw;
  }
  if (refused) std::rethrow_exception(refused);
}

}  // namespace commux::halo
