#include "halo/cart_agreement.hpp"

#include <sstream>

namespace commux::halo {
namespace {

template <typename T>
std::string listOf(const std::vector<T>& values) {
  std::ostringstream out;
  out << '[';
  for (std::size_t i = 0; i < values.size(); ++i) out << (i ? ", " : "") << +values[i];
  out << ']';
  return out.str();
}

std::string say(const std::string& what, int rank, const std::string& theirs,
                const std::string& mine) {
  std::ostringstream out;
  out << "commux: " << what << ": rank " << rank << " gives " << theirs << ", rank 0 " << mine
      << ": every rank must build the same exchange";
  return out.str();
}

}  // namespace

std::vector<std::int64_t> cartHeader(const CartDescription* mine) {
  if (mine == nullptr) return {0, 0, 0, 0};
  return {1, static_cast<std::int64_t>(mine->dims.size()),
          static_cast<std::int64_t>(mine->fieldTypes.size()),
          static_cast<std::int64_t>(mine->shape.size())};
}

std::string headerDisagreement(const std::vector<std::int64_t>& headers, const std::string& what) {
  const std::size_t ranks = headers.size() / kCartHeaderWords;
  for (std::size_t r = 0; r < ranks; ++r) {
    if (headers[r * kCartHeaderWords] != 1) {
      return "commux: " + what + ": rank " + std::to_string(r) +
             " refused its own arguments (its error says why), so no rank builds the exchange";
    }
  }
  auto describe = [](std::size_t word, std::int64_t v) {
    const std::string n = std::to_string(v);
    if (word == 1) return "a grid of " + n + " dimensions";
    if (word == 2) return n + (v == 1 ? " field" : " fields");
    return "fields of " + n + " dimensions";
  };
  for (std::size_t r = 1; r < ranks; ++r) {
    for (std::size_t w = 1; w < kCartHeaderWords; ++w) {
      const std::int64_t theirs = headers[r * kCartHeaderWords + w];
      if (theirs != headers[w]) {
        return say(what, static_cast<int>(r), describe(w, theirs), describe(w, headers[w]));
      }
    }
  }
  return "";
}

std::vector<std::int64_t> cartBody(const CartDescription& mine) {
  std::vector<std::int64_t> out(mine.dims.begin(), mine.dims.end());
  for (bool p : mine.periodic) out.push_back(p ? 1 : 0);
  out.push_back(mine.diagonals ? 1 : 0);
  out.push_back(mine.tag);
  out.insert(out.end(), mine.widths.begin(), mine.widths.end());
  out.insert(out.end(), mine.fieldTypes.begin(), mine.fieldTypes.end());
  out.insert(out.end(), mine.shape.begin(), mine.shape.end());
  return out;
}

std::size_t cartBodyWords(const std::int64_t* header) {
  return static_cast<std::size_t>(3 * header[1] + 2 + header[2] + header[3]);
}

CartDescription cartFromBody(const std::int64_t* body, const std::int64_t* header) {
  const auto n = static_cast<std::size_t>(header[1]);
  const auto fields = static_cast<std::size_t>(header[2]);
  const auto shapeDims = static_cast<std::size_t>(header[3]);
  CartDescription d;
  const std::int64_t* p = body;
  // A peer's dimension counts are compared, never used to size anything: they travel as
  // 64-bit words and are narrowed here only for the comparison's sake.
  for (std::size_t i = 0; i < n; ++i) d.dims.push_back(static_cast<int>(*p++));
  for (std::size_t i = 0; i < n; ++i) d.periodic.push_back(*p++ != 0);
  d.diagonals = *p++ != 0;
  d.tag = *p++;
  d.widths.assign(p, p + n);
  p += n;
  d.fieldTypes.assign(p, p + fields);
  p += fields;
  d.shape.assign(p, p + shapeDims);
  return d;
}

std::string cartDisagreement(const std::vector<CartDescription>& all, const std::string& what,
                             const std::function<std::string(std::int64_t)>& typeName) {
  if (all.empty()) return "";
  const CartDescription& first = all[0];
  for (std::size_t r = 1; r < all.size(); ++r) {
    const CartDescription& d = all[r];
    const int rank = static_cast<int>(r);
    if (d.dims != first.dims) {
      return say(what, rank, "the grid " + listOf(d.dims), listOf(first.dims));
    }
    if (d.periodic != first.periodic) {
      return say(what, rank, "periodic " + listOf(d.periodic), listOf(first.periodic));
    }
    if (d.diagonals != first.diagonals) {
      return say(what, rank, d.diagonals ? "diagonals" : "no diagonals",
                 first.diagonals ? "diagonals" : "none");
    }
    if (d.tag != first.tag) {
      return say(what, rank, "tag " + std::to_string(d.tag), std::to_string(first.tag));
    }
    if (d.widths != first.widths) {
      return say(what, rank, "widths " + listOf(d.widths), listOf(first.widths));
    }
    for (std::size_t i = 0; i < d.fieldTypes.size(); ++i) {
      if (d.fieldTypes[i] != first.fieldTypes[i]) {
        return say(what, rank, "field " + std::to_string(i) + " of " + typeName(d.fieldTypes[i]),
                   typeName(first.fieldTypes[i]));
      }
    }
  }
  // Every rank's grid is rank 0's now, and each rank built it itself (its header says so).
  const CartTopology grid(first.dims, first.periodic, first.diagonals);
  const std::size_t n = first.dims.size();
  for (std::size_t a = 0; a < all.size(); ++a) {
    for (const Neighbour& nb : grid.neighbours(static_cast<int>(a))) {
      if (nb.rank == kNoRank || static_cast<std::size_t>(nb.rank) == a) continue;
      bool carries = true;
      for (std::size_t d = 0; d < n && carries; ++d) {
        carries = nb.offset[d] == 0 || first.widths[d] != 0;
      }
      if (!carries) continue;
      const auto& mine = all[a].shape;
      const auto& theirs = all[static_cast<std::size_t>(nb.rank)].shape;
      for (std::size_t d = 0; d < mine.size(); ++d) {
        if ((d >= n || nb.offset[d] == 0) && mine[d] != theirs[d]) {
          std::ostringstream out;
          out << "commux: " << what << ": the fields of rank " << a << " hold " << mine[d]
              << " cells in dimension " << d << ", those of its neighbour at offset "
              << listOf(nb.offset) << " (rank " << nb.rank << ") " << theirs[d]
              << ": the faces they share differ";
          return out.str();
        }
      }
    }
  }
  return "";
}

}  // namespace commux::halo
