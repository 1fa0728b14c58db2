#pragma once
// A send or receive its caller waits for at once (MPI_Send / MPI_Recv style), moved on the
// caller's thread when the worker is free (engine/blocking_transfer.hpp): no Request, Op or
// submission, which is most of a small message's cost on the ordinary path. Contiguous host
// memory and one peer only; the front ends (the c10d adapter's sendBlocking, the C API's
// commuxSend/commuxRecv) check their arguments first and fall back to the ordinary path
// (group/point_to_point.hpp, then wait) when this one declines.
#include <chrono>
#include <cstddef>

namespace commux::group {

class Group;

/// Sends `bytes` at `data` to rank `to` with `tag` and waits until it is sent, at most
/// `timeout` (then cancelled: a Backend error "Timed out"). Returns false, having done
/// nothing, when another thread holds the worker or a batch is open. Raises, before anything
/// moves, when `to` is dead; raises when it dies, the group is aborted or shut down first.
bool sendBlocking(Group& group, const void* data, std::size_t bytes, int to, int tag,
                  std::chrono::milliseconds timeout);
/// Receives the next message with `tag` from rank `from` into `data`, which it must fill
/// exactly (InvalidArgument otherwise, naming both sizes); as sendBlocking otherwise.
bool recvBlocking(Group& group, void* data, std::size_t bytes, int from, int tag,
                  std::chrono::milliseconds timeout);

}  // namespace commux::group
