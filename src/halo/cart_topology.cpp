#include "halo/cart_topology.hpp"

#include <algorithm>
#include <functional>
#include <limits>

#include "core/error.hpp"

namespace commux::halo {

std::vector<int> dimsCreate(int ranks, std::vector<int> dims) {
  COMMUX_CHECK(ranks >= 1, InvalidArgument, "commux: a process grid needs at least 1 rank, not ",
               ranks);
  COMMUX_CHECK(!dims.empty(), InvalidArgument, "commux: a process grid needs at least 1 dimension");
  int kept = 1;
  std::vector<std::size_t> free;
  for (std::size_t i = 0; i < dims.size(); ++i) {
    COMMUX_CHECK(dims[i] >= 0, InvalidArgument, "commux: process grid dimension ", i, " is ",
                 dims[i], "; give a size, or 0 to have one chosen");
    if (dims[i] == 0) {
      free.push_back(i);
    } else {
      const long long product = static_cast<long long>(kept) * dims[i];
      COMMUX_CHECK(ranks % product == 0, InvalidArgument,
                   "commux: the process grid's given sizes do not divide ", ranks, " ranks");
      kept = static_cast<int>(product);
    }
  }
  int rest = ranks / kept;
  if (free.empty()) {
    COMMUX_CHECK(rest == 1, InvalidArgument, "commux: a process grid of ", kept,
                 " cells for ", ranks, " ranks");
    return dims;
  }
  // Prime factors of what is left, largest first, each onto the smallest free size so far.
  std::vector<int> primes;
  for (int p = 2; static_cast<long long>(p) * p <= rest; ++p) {
    while (rest % p == 0) {
      primes.push_back(p);
      rest /= p;
    }
  }
  if (rest > 1) primes.push_back(rest);
  std::sort(primes.begin(), primes.end(), std::greater<int>());
  std::vector<int> sizes(free.size(), 1);
  for (int p : primes) *std::min_element(sizes.begin(), sizes.end()) *= p;
  std::sort(sizes.begin(), sizes.end(), std::greater<int>());
  for (std::size_t i = 0; i < free.size(); ++i) dims[free[i]] = sizes[i];
  return dims;
}

CartTopology::CartTopology(std::vector<int> dims, std::vector<bool> periodic, bool diagonals)
    : dims_(std::move(dims)), periodic_(std::move(periodic)), diagonals_(diagonals) {
  COMMUX_CHECK(!dims_.empty(), InvalidArgument, "commux: a process grid needs at least 1 dimension");
  COMMUX_CHECK(periodic_.size() == dims_.size(), InvalidArgument, "commux: ", periodic_.size(),
               " periodic flags for a grid of ", dims_.size(), " dimensions");
  long long cells = 1;
  for (std::size_t i = 0; i < dims_.size(); ++i) {
    COMMUX_CHECK(dims_[i] >= 1, InvalidArgument, "commux: process grid dimension ", i,
                 " has size ", dims_[i]);
    cells *= dims_[i];
    COMMUX_CHECK(cells <= std::numeric_limits<int>::max(), InvalidArgument,
                 "commux: the process grid has more cells than an int holds");
  }
  size_ = static_cast<int>(cells);
  const int n = dimensions();
  if (!diagonals_) {
    for (int d = 0; d < n; ++d) {
      for (int sign : {-1, 1}) {
        std::vector<int> offset(n, 0);
        offset[d] = sign;
        directions_.push_back(std::move(offset));
      }
    }
    return;
  }
  std::vector<int> offset(n, -1);
  for (;;) {
    if (std::any_of(offset.begin(), offset.end(), [](int o) { return o != 0; })) {
      directions_.push_back(offset);
    }
    int d = n - 1;
    while (d >= 0 && offset[d] == 1) offset[d--] = -1;
    if (d < 0) break;
    ++offset[d];
  }
}

std::vector<int> CartTopology::coords(int rank) const {
  COMMUX_CHECK(rank >= 0 && rank < size_, InvalidArgument, "commux: rank ", rank,
               " is outside the process grid of ", size_);
  std::vector<int> c(dims_.size());
  for (int d = dimensions() - 1; d >= 0; --d) {
    c[d] = rank % dims_[d];
    rank /= dims_[d];
  }
  return c;
}

int CartTopology::rankAt(const std::vector<int>& coords) const {
  COMMUX_CHECK(coords.size() == dims_.size(), InvalidArgument, "commux: ", coords.size(),
               " coordinates for a grid of ", dims_.size(), " dimensions");
  long long rank = 0;
  for (std::size_t d = 0; d < dims_.size(); ++d) {
    int c = coords[d];
    if (c < 0 || c >= dims_[d]) {
      if (!periodic_[d]) return kNoRank;
      c %= dims_[d];
      if (c < 0) c += dims_[d];
    }
    rank = rank * dims_[d] + c;
  }
  return static_cast<int>(rank);
}

std::pair<int, int> CartTopology::shift(int rank, int dimension, int displacement) const {
  COMMUX_CHECK(dimension >= 0 && dimension < dimensions(), InvalidArgument, "commux: dimension ",
               dimension, " of a grid of ", dimensions());
  std::vector<int> c = coords(rank);
  const int at = c[dimension];
  c[dimension] = at - displacement;
  const int source = rankAt(c);
  c[dimension] = at + displacement;
  return {source, rankAt(c)};
}

int CartTopology::directionOf(const std::vector<int>& offset) const {
  const auto it = std::find(directions_.begin(), directions_.end(), offset);
  COMMUX_CHECK(it != directions_.end(), InvalidArgument,
               "commux: that offset is no direction of this grid (",
               diagonals_ ? "offsets are -1, 0 or 1, not all 0" : "one dimension by -1 or 1", ")");
  return static_cast<int>(it - directions_.begin());
}

std::vector<Neighbour> CartTopology::neighbours(int rank) const {
  const std::vector<int> here = coords(rank);
  std::vector<Neighbour> out;
  out.reserve(directions_.size());
  std::vector<int> there(here.size());
  std::vector<int> back(here.size());
  for (std::size_t i = 0; i < directions_.size(); ++i) {
    const auto& offset = directions_[i];
    for (std::size_t d = 0; d < here.size(); ++d) {
      there[d] = here[d] + offset[d];
      back[d] = -offset[d];
    }
    Neighbour n;
    n.offset = offset;
    n.rank = rankAt(there);
    n.direction = static_cast<int>(i);
    n.opposite = directionOf(back);
    out.push_back(std::move(n));
  }
  return out;
}

}  // namespace commux::halo
