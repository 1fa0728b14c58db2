#pragma once
// The ranks of a halo exchange on a Cartesian grid check that they were given the same
// exchange (halo/cart_agreement.hpp) before any builds it: two allgathers over the group.
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>

#include "halo/cart_agreement.hpp"

namespace commux::group {
class Group;
}

namespace commux::halo {

/// Collective over `group`: every rank calls it, also one whose own arguments were refused
/// (`refused`, the error it raises: it takes part so the others learn of it rather than
/// wait, then raises that error, whatever the agreement found; `mine` is not read then).
/// Raises InvalidArgument with the same message on every other rank when the ranks
/// disagree (halo/cart_agreement.hpp), or a Backend error when the group fails or `timeout`
/// passes; `what` names the call in messages. Runtime (commuxInvalidUsage in C), before
/// anything moves, inside a batch (Group::batching: its allgathers would wait for the
/// batch's end, which comes after this returns).
void agreeOnCart(group::Group& group, const CartDescription& mine, std::exception_ptr refused,
                 std::chrono::milliseconds timeout, const std::string& what,
                 const std::function<std::string(std::int64_t)>& typeName);

}  // namespace commux::halo
