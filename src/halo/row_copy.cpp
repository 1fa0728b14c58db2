#include "halo/row_copy.hpp"

#include <cstdint>
#include <cstring>

namespace commux::halo {
namespace {

// `count` rows of `bytes`, `srcStride` apart, to rows `dstStride` apart. A face's rows are
// often one element (a column of a row-major grid): a fixed-size copy the compiler turns
// into one load and one store, where memcpy's call would cost more than the bytes.
template <std::size_t N>
void copyFixedRows(char* dst, std::ptrdiff_t dstStride, const char* src, std::ptrdiff_t srcStride,
                   std::size_t count) {
  for (std::size_t i = 0; i < count; ++i, dst += dstStride, src += srcStride) {
    std::memcpy(dst, src, N);
  }
}

}  // namespace

void copyRows(char* dst, std::ptrdiff_t dstStride, const char* src, std::ptrdiff_t srcStride,
              std::size_t bytes, std::size_t count) {
  switch (bytes) {
    case 1:
      return copyFixedRows<1>(dst, dstStride, src, srcStride, count);
    case 2:
      return copyFixedRows<2>(dst, dstStride, src, srcStride, count);
    case 4:
      return copyFixedRows<4>(dst, dstStride, src, srcStride, count);
    case 8:
      return copyFixedRows<8>(dst, dstStride, src, srcStride, count);
    case 16:
      return copyFixedRows<16>(dst, dstStride, src, srcStride, count);
    default:
      for (std::size_t i = 0; i < count; ++i, dst += dstStride, src += srcStride) {
        std::memcpy(dst, src, bytes);
      }
  }
}

void gather(const std::vector<Rows>& rows, char* out) {
  for (const auto& r : rows) {
    copyRows(out, static_cast<std::ptrdiff_t>(r.bytes), r.data, r.stride, r.bytes, r.count);
    out += r.bytes * r.count;
  }
}

void scatter(const char* in, const std::vector<Rows>& rows) {
  for (const auto& r : rows) {
    copyRows(r.data, r.stride, in, static_cast<std::ptrdiff_t>(r.bytes), r.bytes, r.count);
    in += r.bytes * r.count;
  }
}

std::vector<Rows> rowsOf(const std::vector<Piece>& pieces) {
  std::vector<Rows> rows;
  for (const auto& p : pieces) {
    if (p.bytes == 0) continue;
    char* at = static_cast<char*>(p.data);
    if (!rows.empty()) {
      Rows& r = rows.back();
      if (r.bytes == p.bytes) {
        // In integers: pieces are the caller's addresses, which a far stride times the
        // count must not wrap (nor is pointer arithmetic past the caller's memory defined).
        const auto from = reinterpret_cast<std::intptr_t>(r.data);
        const auto here = reinterpret_cast<std::intptr_t>(at);
        std::ptrdiff_t stride = 0;
        std::ptrdiff_t span = 0;
        std::intptr_t next = 0;
        if (r.count == 1) {
          if (!__builtin_sub_overflow(here, from, &stride)) {
            r.stride = stride;
            r.count = 2;
            continue;
          }
        } else if (!__builtin_mul_overflow(r.stride, static_cast<std::ptrdiff_t>(r.count), &span) &&
                   !__builtin_add_overflow(from, span, &next) && next == here) {
          ++r.count;
          continue;
        }
      }
    }
    rows.push_back(Rows{at, p.bytes, static_cast<std::ptrdiff_t>(p.bytes), 1});
  }
  return rows;
}

}  // namespace commux::halo
