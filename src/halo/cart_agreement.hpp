#pragma once
// Whether the ranks of a halo exchange on a Cartesian grid were given the same exchange:
// one grid (dimensions, periodicity, diagonals), one tag, one set of widths and field types, the
// same trailing dimensions, and fields that agree on every face two neighbours share. Without it a
// mismatch shows only at the first step, as a message of the wrong size, or as a step that waits
// for a message that never comes. The ranks swap what each was given (halo/agree_on_cart.hpp: two
// allgathers) and every rank reaches the same verdict from the same records, so all raise the same
// error, or none. Pure logic: no UCX.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "halo/cart_topology.hpp"

namespace commux::halo {

/// What one rank builds its exchange from. `fieldTypes` are the front end's codes for the
/// fields' element types (compared, and named by the caller's function in messages).
struct CartDescription {
  std::vector<int> dims;
  std::vector<bool> periodic;
  bool diagonals = false;
  std::int64_t tag = 0;  // the exchange's messages'
  std::vector<std::int64_t> widths;
  std::vector<std::int64_t> fieldTypes;
  std::vector<std::int64_t> shape;  // the fields', the grid's dimensions first
};

/// The fixed-size first record: whether the rank could build its part, and the lengths of
/// what follows (its dimensions, fields, and the fields' dimensions).
inline constexpr std::size_t kCartHeaderWords = 4;
/// `mine` null: this rank's own arguments were refused (it raises its own error).
std::vector<std::int64_t> cartHeader(const CartDescription* mine);
/// The first disagreement among every rank's header (kCartHeaderWords each, in rank order),
/// or empty: a rank that could not build its part, or lengths other than rank 0's.
std::string headerDisagreement(const std::vector<std::int64_t>& headers, const std::string& what);

/// The second record, of the lengths the header gave.
std::vector<std::int64_t> cartBody(const CartDescription& mine);
/// The description in `body` (cartBody's), of the lengths in `header` (checked equal to
/// this rank's by headerDisagreement before a peer's body is read).
CartDescription cartFromBody(const std::int64_t* body, const std::int64_t* header);
/// The number of words cartBody writes for `header`.
std::size_t cartBodyWords(const std::int64_t* header);

/// The first disagreement among every rank's description (in rank order; equal lengths),
/// or empty. Names the ranks and what differs; `typeName` names a field type code.
std::string cartDisagreement(const std::vector<CartDescription>& all, const std::string& what,
                             const std::function<std::string(std::int64_t)>& typeName);

}  // namespace commux::halo
