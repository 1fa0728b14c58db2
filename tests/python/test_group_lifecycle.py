"""The group beyond single operations: monitored_barrier naming the ranks that did not
come, splitting (init_process_group(device_id=...), new_group, split_group), the
coalescing window, abort and shutdown."""

import datetime

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, get_backend_obj, run_ranks, side_barrier


def _monitored_barrier_names_missing(rank, ws, absent, wait_all):
    timeout = datetime.timedelta(seconds=3)
    if rank in absent:
        side_barrier("monitored-done", timeout_s=60)
        return None
    try:
        dist.monitored_barrier(timeout=timeout, wait_all_ranks=wait_all)
    except RuntimeError as e:
        msg = str(e)
    else:
        msg = None
    side_barrier("monitored-done", timeout_s=60)
    return msg


@pytest.mark.parametrize("absent,wait_all", [([2], False), ([1, 3], True), ([1, 3], False)])
def test_monitored_barrier_names_missing_ranks(absent, wait_all):
    msgs = run_ranks(_monitored_barrier_names_missing, 4, timeout=90, absent=absent, wait_all=wait_all)
    if wait_all:
        want = "Ranks " + ", ".join(map(str, absent)) + " failed to pass monitoredBarrier"
    else:
        want = f"Rank {absent[0]} failed to pass monitoredBarrier"
    assert msgs[0] is not None and want in msgs[0], f"rank 0 said {msgs[0]!r}, expected {want!r}"
    for r in range(1, 4):
        if r not in absent:
            want = f"Rank {r} successfully reached monitoredBarrier"
            assert msgs[r] is not None and want in msgs[r], msgs[r]


def _monitored_barrier_zero_timeout(rank, ws):
    if rank == 0:
        msg = expect_error(
            lambda: dist.monitored_barrier(timeout=datetime.timedelta(seconds=0)),
            "Rank 0 timed out in monitoredBarrier",
            "monitored_barrier with a spent timeout",
        )
        assert "No ranks successfully processed" in msg, msg
    return True


def test_monitored_barrier_zero_timeout_fails_at_once():
    # Only rank 0 calls it; a timeout of 0 must not mean "wait forever".
    assert all(run_ranks(_monitored_barrier_zero_timeout, 2, timeout=60))


def _monitored_barrier_repeats(rank, ws):
    for _ in range(20):
        dist.monitored_barrier(timeout=datetime.timedelta(seconds=30))
    assert_group_works(ws)
    return True


@pytest.mark.parametrize("world_size", [1, 3])
def test_monitored_barrier_repeats(world_size):
    assert all(run_ranks(_monitored_barrier_repeats, world_size, timeout=90))


def _split(rank, ws):
    backend = get_backend_obj()
    if hasattr(backend, "supports_splitting"):
        assert backend.supports_splitting
    # new_group on a group bound to a device goes through Backend.split.
    evens = dist.new_group([r for r in range(ws) if r % 2 == 0])
    odds = dist.new_group([r for r in range(ws) if r % 2 == 1])
    mine = evens if rank % 2 == 0 else odds
    t = torch.full((4,), float(rank))
    dist.all_reduce(t, group=mine)
    assert t.eq(sum(r for r in range(ws) if r % 2 == rank % 2)).all(), "new_group all_reduce"
    if hasattr(dist, "split_group"):
        halves = [list(range(ws // 2)), list(range(ws // 2, ws))]
        sub = dist.split_group(split_ranks=halves)
        half = halves[0] if rank in halves[0] else halves[1]
        t = torch.full((3,), float(rank + 1))
        dist.all_reduce(t, group=sub)
        assert t.eq(sum(r + 1 for r in half)).all(), "split_group all_reduce"
        assert dist.get_rank(sub) == half.index(rank)
        # Tags in subgroups do not cross with the same tags in the parent.
        peer = half[(half.index(rank) + 1) % len(half)]
        src = half[(half.index(rank) - 1) % len(half)]
        a, b = torch.full((2,), float(rank)), torch.empty(2)
        reqs = [dist.isend(a, peer, group=sub, tag=5), dist.irecv(b, src, group=sub, tag=5)]
        for r in reqs:
            r.wait()
        assert b.eq(float(src)).all()
    assert_group_works(ws)
    return True


def test_split_with_device_id():
    assert all(run_ranks(_split, 4, timeout=120, device_id="cpu:0"))


def _coalescing_window(rank, ws):
    pg = dist.group.WORLD
    cpu = torch.device("cpu")
    right, left = (rank + 1) % ws, (rank - 1) % ws
    got = [torch.empty(3) for _ in range(3)]
    pg._start_coalescing(cpu)
    for i in range(3):
        dist.isend(torch.full((3,), float(10 * rank + i)), right, tag=i)
        dist.irecv(got[i], left, tag=i)
    t = torch.ones(2)
    dist.all_reduce(t, async_op=True)
    work = pg._end_coalescing(cpu)
    fut = work.get_future()
    work.wait()
    fut.wait()
    assert all(got[i].eq(10 * left + i).all() for i in range(3))
    assert t.eq(ws).all()
    # An empty window gives a completed Work.
    pg._start_coalescing(cpu)
    assert pg._end_coalescing(cpu).wait()
    # Windows must pair up, and a broken pairing is a clear error, not a hang.
    expect_error(lambda: pg._end_coalescing(cpu), "endCoalescing", "end without start")
    assert_group_works(ws)
    # Sequence numbers count collectives and agree across ranks (torch's desync checks).
    backend = get_backend_obj()
    before = backend._get_sequence_number_for_group()
    dist.barrier()
    after = backend._get_sequence_number_for_group()
    assert after == before + 1, (before, after)
    seqs = [torch.zeros(1, dtype=torch.int64) for _ in range(ws)]
    dist.all_gather(seqs, torch.tensor([after]))
    assert all(int(x) == after for x in seqs), seqs
    return True


def test_coalescing_window():
    assert all(run_ranks(_coalescing_window, 2, timeout=90))


def _abort_cancels(rank, ws):
    # A receive nobody will match is in flight when the group is aborted.
    pending = dist.irecv(torch.empty(4), (rank + 1) % ws, tag=99)
    side_barrier("posted", timeout_s=60)
    dist.group.WORLD.abort()
    expect_error(pending.wait, "aborted", "wait on an aborted receive")
    expect_error(lambda: dist.all_reduce(torch.ones(2)), "aborted", "all_reduce after abort")
    return True


def test_abort_cancels_pending_and_later_ops():
    assert all(run_ranks(_abort_cancels, 2, timeout=90))


def _shutdown(rank, ws):
    t = torch.full((1000,), float(rank))
    work = dist.all_reduce(t, async_op=True)
    work.wait()
    dist.group.WORLD.shutdown()
    expect_error(lambda: dist.all_reduce(torch.ones(2)), "shut down", "all_reduce after shutdown")
    assert t.eq(sum(range(ws))).all()
    return True


def test_shutdown_refuses_later_ops():
    assert all(run_ranks(_shutdown, 2, timeout=90))
