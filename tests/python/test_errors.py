"""Invalid uses raise clear Python exceptions and leave the group usable.

Every check: the bad call must raise the exception docs/semantics.md
promises (a negative tag is a ValueError, an unsupported op/dtype combination a
NotImplementedError, a receive of the wrong size a "message size mismatch" naming both
sizes; elsewhere RuntimeError or ValueError) whose message says what is wrong (a keyword
is asserted), and the NEXT operation on the same group (a send/recv pair plus an
all_reduce) must succeed.

Some checks call the c10d backend object directly
(``get_backend_obj().send([...], dst, tag)``) to bypass torch.distributed's
Python-level argument checks and the dispatcher's meta/sparse kernels, so
that they test the backend's own validation.
"""

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, get_backend_obj, is_ucx, run_ranks

ERR = (RuntimeError, ValueError)


def group_works(rank, world_size, tag):
    """Next operation after an error: send/recv 0->1 and an all_reduce."""
    if rank == 0:
        dist.send(torch.arange(6.0) + tag, 1, tag=tag)
    elif rank == 1:
        b = torch.zeros(6)
        dist.recv(b, 0, tag=tag)
        assert torch.equal(b, torch.arange(6.0) + tag), f"recv after error got {b}"
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    exp = float(sum(range(1, world_size + 1)))
    assert torch.equal(t, torch.full((4,), exp)), f"all_reduce after error got {t}"


def _allreduce_opts(op):
    opts = dist.AllreduceOptions()
    opts.reduceOp = op
    return opts


# --------------------------------------------------------------------------


def _size_mismatch(rank, world_size, receive):
    """Rank 0 sends 100 floats (400 bytes); rank 1 receives them into `receive` floats."""
    if rank == 0:
        w = dist.isend(torch.ones(100), 1, tag=3)
        try:
            # The sender may or may not see an error for a message the receiver rejected;
            # it must not hang.
            w.wait()
        except RuntimeError:
            pass
    else:
        message = expect_error(
            lambda: dist.recv(torch.zeros(receive), 0, tag=3), "message size mismatch",
            f"recv of a 400-byte message into a {4 * receive}-byte buffer")
        # docs/semantics.md: the error names both sizes.
        for size in ("400 bytes", f"{4 * receive} bytes"):
            assert size in message, f"the size mismatch error does not name {size}: {message}"
    group_works(rank, world_size, tag=50)
    return True


@pytest.mark.skipif(not is_ucx(), reason="gloo aborts the receiving process on a size "
                    "mismatch (gloo::EnforceNotMet in its I/O thread -> std::terminate)")
@pytest.mark.parametrize("receive", [
    pytest.param(200, id="larger-buffer"),
    pytest.param(50, id="truncated"),
])
def test_recv_size_mismatch_is_an_error(receive):
    """A receive buffer larger than the message, or smaller (truncation), raises a "message
    size mismatch" error naming both sizes, as docs/semantics.md promises; the group survives."""
    run_ranks(_size_mismatch, 2, receive=receive)


# --------------------------------------------------------------------------


def _invalid_args(rank, world_size):
    pg = get_backend_obj()

    # Negative tag, through the public API and directly on the backend.
    if rank == 0:
        # docs/semantics.md: "a negative tag is a ValueError" (commux's promise, not other backends').
        bad_tag = (ValueError,) if is_ucx() else ERR
        expect_error(lambda: dist.send(torch.ones(3), 1, tag=-1), "tag", "send with tag=-1",
                     exc_types=bad_tag)
        expect_error(lambda: pg.send([torch.ones(3)], 1, -5).wait(), "tag",
                     "backend send with tag=-5", exc_types=bad_tag)
        expect_error(lambda: pg.recv([torch.ones(3)], 1, -5).wait(), "tag",
                     "backend recv with tag=-5", exc_types=bad_tag)
    group_works(rank, world_size, tag=51)

    # Unsupported op/dtype combinations, public API and backend directly. docs/semantics.md: they
    # raise NotImplementedError before anything is sent (commux's promise, not other
    # backends').
    unsupported = (NotImplementedError,) if is_ucx() else ERR
    expect_error(lambda: dist.all_reduce(torch.ones(4), op=dist.ReduceOp.BAND),
                 ("band", "dtype", "float", "type"), "all_reduce BAND on float32",
                 exc_types=unsupported)
    expect_error(lambda: pg.allreduce([torch.ones(4)], _allreduce_opts(dist.ReduceOp.BAND)).wait(),
                 ("band", "dtype", "float", "type"), "backend allreduce BAND on float32",
                 exc_types=unsupported)
    # torch.distributed itself refuses MIN/MAX on complex tensors, with a ValueError, before
    # any backend sees the call; commux's own check is reached through the backend.
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.complex64),
                                         op=dist.ReduceOp.MIN),
                 ("min", "complex", "dtype"), "all_reduce MIN on complex64",
                 exc_types=(ValueError,))
    expect_error(lambda: pg.allreduce([torch.ones(4, dtype=torch.complex64)],
                                      _allreduce_opts(dist.ReduceOp.MIN)).wait(),
                 ("min", "complex", "dtype"), "backend allreduce MIN on complex64",
                 exc_types=unsupported)
    group_works(rank, world_size, tag=52)

    # Mixed devices in one backend call.
    expect_error(lambda: pg.allreduce([torch.ones(3), torch.empty(3, device="meta")]).wait(),
                 ("device", "meta"), "backend allreduce with a CPU and a meta tensor")
    group_works(rank, world_size, tag=53)
    return True


def test_invalid_tag_op_dtype_and_mixed_devices():
    """Negative tag (public API and backend), BAND on float32 and MIN on
    complex (public API and backend), and a CPU + meta tensor in one backend
    allreduce all raise a clear error; the group keeps working after each."""
    run_ranks(_invalid_args, 2)


# --------------------------------------------------------------------------


def _invalid_peer(rank, world_size):
    pg = get_backend_obj()
    if rank == 0:
        expect_error(lambda: pg.send([torch.ones(3)], 7, 0).wait(), "rank",
                     "backend send to rank 7 in a world of 2")
        expect_error(lambda: pg.recv([torch.ones(3)], 7, 0).wait(), "rank",
                     "backend recv from rank 7 in a world of 2")
        expect_error(lambda: pg.send([torch.ones(3)], -1, 0).wait(), "rank",
                     "backend send to rank -1")
        expect_error(lambda: dist.send(torch.ones(3), 7), ("rank", "dst", "group"),
                     "dist.send to rank 7 in a world of 2")
    group_works(rank, world_size, tag=54)
    return True


@pytest.mark.skipif(not is_ucx(), reason="gloo segfaults on a send to an out-of-range rank")
def test_invalid_peer_rank():
    """send/recv to a rank outside the group (backend called directly, so
    torch's own checks are bypassed) raise an error mentioning the rank."""
    run_ranks(_invalid_peer, 2)


# --------------------------------------------------------------------------


def _invalid_tensors(rank, world_size):
    pg = get_backend_obj()
    sparse_kw = ("sparse", "layout", "strided", "dense")
    meta_kw = ("meta", "device", "cpu")

    # Sparse tensors.
    if rank == 0:
        expect_error(lambda: dist.send(torch.zeros(3).to_sparse(), 1),
                     sparse_kw, "dist.send of a sparse tensor")
        expect_error(lambda: pg.send([torch.zeros(3).to_sparse()], 1, 0).wait(),
                     sparse_kw, "backend send of a sparse tensor")
    # all_reduce takes sparse tensors (test_every_op.py); the others do not.
    expect_error(lambda: dist.broadcast(torch.zeros(3).to_sparse(), 0),
                 sparse_kw, "dist.broadcast of a sparse tensor")
    expect_error(lambda: pg.allreduce([torch.zeros(3).to_sparse(), torch.zeros(3).to_sparse()]).wait(),
                 ("one tensor",), "backend allreduce of two sparse tensors")
    group_works(rank, world_size, tag=55)

    # Meta tensors (through the backend object: the dispatcher's meta
    # kernels of the public API never reach the backend).
    if rank == 0:
        expect_error(lambda: pg.send([torch.empty(3, device="meta")], 1, 0).wait(),
                     meta_kw, "backend send of a meta tensor")
        expect_error(lambda: pg.recv([torch.empty(3, device="meta")], 1, 0).wait(),
                     meta_kw, "backend recv into a meta tensor")
    expect_error(lambda: pg.allreduce([torch.empty(3, device="meta")]).wait(),
                 meta_kw, "backend allreduce of a meta tensor")
    group_works(rank, world_size, tag=56)
    return True


@pytest.mark.skipif(not is_ucx(), reason="gloo supports sparse all_reduce and hangs on a "
                    "meta tensor passed to its send")
def test_sparse_and_meta_tensors_rejected():
    """Sparse tensors (send, broadcast, a list in all_reduce) and meta tensors (send, recv,
    allreduce on the backend) raise a clear error; the group survives."""
    run_ranks(_invalid_tensors, 2)


# --------------------------------------------------------------------------


def _multi_tensor_p2p(rank, world_size):
    pg = get_backend_obj()
    sizes = [3, 1000, 17]
    if rank == 0:
        tensors = [torch.arange(n, dtype=torch.float32) + 1000 * i for i, n in enumerate(sizes)]
        pg.send(tensors, 1, 5).wait()
    else:
        bufs = [torch.zeros(n) for n in sizes]
        pg.recv(bufs, 0, 5).wait()
        for i, (n, b) in enumerate(zip(sizes, bufs)):
            assert torch.equal(b, torch.arange(n, dtype=torch.float32) + 1000 * i), (
                f"multi-tensor recv: tensor {i} (n={n}) got {b[:3].tolist()}"
            )
    group_works(rank, world_size, tag=57)
    return True


@pytest.mark.skipif(not is_ucx(), reason="gloo's send/recv take a single tensor")
def test_multi_tensor_send_recv():
    """Backend-level send([a, b, c]) / recv([x, y, z]) with different sizes
    are matched element by element."""
    run_ranks(_multi_tensor_p2p, 2)
