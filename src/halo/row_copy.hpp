#pragma once
// A face as rows (equal pieces at equal distances) and the copies between rows and a packed
// buffer: the exchange's packing, unpacking and own-message copies (halo/neighbour_exchange)
// and the same-host reads (halo/shared_sides).
#include <cstddef>
#include <vector>

#include "halo/messages.hpp"

namespace commux::halo {

/// Pieces of equal size at equal distances: `count` rows of `bytes`, `stride` bytes apart
/// (a face of a grid is a few of these, however many pieces it has).
struct Rows {
  char* data = nullptr;
  std::size_t bytes = 0;
  std::ptrdiff_t stride = 0;
  std::size_t count = 0;
};
/// `pieces` (in order; empty ones dropped) as runs of Rows.
std::vector<Rows> rowsOf(const std::vector<Piece>& pieces);

/// `count` rows of `bytes`, `srcStride` apart, to rows `dstStride` apart.
void copyRows(char* dst, std::ptrdiff_t dstStride, const char* src, std::ptrdiff_t srcStride,
              std::size_t bytes, std::size_t count);
/// The rows, in order, packed into `out`.
void gather(const std::vector<Rows>& rows, char* out);
/// `in`, packed, into the rows in order.
void scatter(const char* in, const std::vector<Rows>& rows);

}  // namespace commux::halo
