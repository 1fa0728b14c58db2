"""torch 2.15's newer Backend calls on commux: shrink_group to the survivors of a death (over
shared memory and over UCX, twice in a row), and gather_single / gather_into_tensor."""

from __future__ import annotations

import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("commux's shrink"))

needs_shrink = pytest.mark.skipif(not hasattr(dist, "shrink_group"),
                                  reason="this torch has no shrink_group (torch >= 2.10)")
needs_gather_single = pytest.mark.skipif(not hasattr(dist, "gather_single"),
                                         reason="this torch has no gather_single")


def _wait_dead(victim: int, limit: float = 10.0) -> None:
    import commux

    deadline = time.monotonic() + limit
    while victim not in commux.health()["dead_ranks"]:
        assert time.monotonic() < deadline, f"rank {victim}'s death not seen in {limit} s"
        time.sleep(0.01)


def _check_group(members: list[int], tag: int) -> None:
    """The default group, of the global ranks `members` (in order), runs collectives and
    tagged messages."""
    import commux

    me, n = dist.get_rank(), dist.get_world_size()
    assert n == len(members), (n, members)
    x = torch.full((1000,), float(members[me] + 1))
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((1000,), float(sum(m + 1 for m in members)))), x[:4]
    big = torch.full((1 << 18,), float(me))  # the chunked path as well
    dist.all_reduce(big)
    assert big[0].item() == sum(range(n)) and big[-1].item() == sum(range(n))
    b = torch.arange(16, dtype=torch.int64) if me == n - 1 else torch.zeros(16, dtype=torch.int64)
    dist.broadcast(b, src=n - 1)
    assert torch.equal(b, torch.arange(16, dtype=torch.int64))
    # Before the last exchange: once a rank is done it may leave, which its peers see. The
    # allreduce after the check holds every rank until all have checked: without it, rank 0
    # of 3 could finish the ring below (its sends are eager, it waits for rank 2 only) and
    # leave while rank 1, slowed down by the machine's load, had not checked yet.
    h = commux.health()
    assert h["healthy"], h
    dist.all_reduce(torch.ones(1))
    # Messages matched by (sender, tag): sent in one order, received in the other.
    nxt, prev = (me + 1) % n, (me - 1) % n
    sends = [dist.isend(torch.full((8,), float(me * 10 + t)), dst=nxt, tag=tag + t) for t in (0, 1)]
    for t in (1, 0):
        got = torch.empty(8)
        dist.recv(got, src=prev, tag=tag + t)
        assert got[0].item() == prev * 10 + t, (t, got)
    for w in sends:
        w.wait()


def _shrink_after_deaths(rank, world_size, shm):
    # Everyone connected and every record read before the first kill.
    dist.all_reduce(torch.ones(1))
    members = list(range(world_size))
    for victim in (3, 1):  # global ranks, killed one after the other
        if rank == victim:
            time.sleep(0.2)
            os.kill(os.getpid(), signal.SIGKILL)
        group_rank = members.index(victim)
        _wait_dead(group_rank)
        # The old group refuses collectives now; the survivors shrink it.
        expect_error(lambda: dist.all_reduce(torch.ones(4)), (f"rank {group_rank} died",),
                     "a collective with a dead member", exc_types=(dist.DistBackendError,))
        dist.shrink_group([group_rank])
        members.remove(victim)
        _check_group(members, tag=100 + victim)
    return dist.get_world_size()


@needs_shrink
@pytest.mark.parametrize("shm", ["1", "0"])
def test_survivors_shrink_twice_and_go_on(shm):
    results = run_ranks(_shrink_after_deaths, 4, timeout=120, env={"COMMUX_SHM": shm},
                        killed=(1, 3), shm=shm)
    assert results == [2, None, 2, None]


def _shrink_refusals(rank, world_size):
    assert dist.distributed_c10d._get_default_group()._get_backend(
        torch.device("cpu")).supports_shrinking
    for bad, why in [([rank], "exclusion list"), ([world_size], "out of bounds"), ([], "empty")]:
        expect_error(lambda: dist.shrink_group(bad), (why,), f"shrink_group({bad})",
                     exc_types=(ValueError, RuntimeError, TypeError))
    # Nothing changed: the group still works as it was.
    _check_group(list(range(world_size)), tag=7)
    return True


@needs_shrink
def test_bad_shrinks_are_refused_and_change_nothing():
    assert run_ranks(_shrink_refusals, 3, timeout=90) == [True] * 3


def _gather_single(rank, world_size):
    for dtype in (torch.float32, torch.int64, torch.bfloat16):
        for root in range(world_size):
            for shape in ((5,), (2, 3), (0,)):
                inp = (torch.arange(int(torch.tensor(shape).prod())).reshape(shape) + 100 * rank).to(dtype)
                stacked = root % 2 == 1
                out = None
                if rank == root:
                    out = torch.full((world_size, *shape) if stacked else (world_size * inp.numel(),),
                                     -1).to(dtype)
                dist.gather_single(inp, out, dst=root)
                if rank == root:
                    want = torch.stack([(torch.arange(inp.numel()).reshape(shape) + 100 * r).to(dtype)
                                        for r in range(world_size)])
                    assert torch.equal(out.reshape(want.shape), want), (dtype, root, shape, out)
    # The alias, async.
    out = torch.empty(world_size * 3) if rank == 0 else None
    dist.gather_into_tensor(torch.full((3,), float(rank)), out, dst=0, async_op=True).wait()
    if rank == 0:
        assert out.tolist() == [float(r) for r in range(world_size) for _ in range(3)]
    # A root's output of the wrong size, or not contiguous: refused on the root before
    # anything moves (the others make no call), and the group goes on.
    if rank == 0:
        expect_error(lambda: dist.gather_single(torch.ones(3), torch.empty(world_size * 3 + 1), dst=0),
                     ("must hold the world size",), "a wrong-sized gather_single output",
                     exc_types=(ValueError,))
        expect_error(lambda: dist.gather_single(torch.ones(3), torch.empty(3, world_size).t(), dst=0),
                     ("contiguous",), "a strided gather_single output",
                     exc_types=(ValueError, RuntimeError))
    x = torch.ones(4)
    dist.all_reduce(x)
    assert x.tolist() == [float(world_size)] * 4
    return True


@needs_gather_single
def test_gather_single_and_gather_into_tensor():
    assert run_ranks(_gather_single, 3, timeout=90) == [True] * 3
