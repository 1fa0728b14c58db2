"""Collective sequence numbers wrap in the tag; results must stay right across the wrap, and
stale messages of a failed collective must never be matched after it.

COMMUX_SEQUENCE_WRAP makes the wrap point small (default 2^20, the tag's field), so the
tests cross it many times in a few hundred collectives.
"""

from __future__ import annotations

import datetime
import time

import pytest

from harness import is_ucx, run_ranks, side_barrier, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("tag wrap"))

WRAP = 16


def _across_the_wrap(rank, world_size):
    import torch
    import torch.distributed as dist

    for i in range(6 * WRAP + 3):
        t = torch.full((257,), float(rank * 1000 + i), dtype=torch.float64)
        dist.all_reduce(t)
        assert t[0].item() == sum(r * 1000 + i for r in range(world_size)), i
        b = torch.full((33,), float(i if rank == i % world_size else -1))
        dist.broadcast(b, src=i % world_size)
        assert b[0].item() == i, i
        out = [torch.empty(2) for _ in range(world_size)]
        dist.all_gather(out, torch.full((2,), float(rank + i)))
        assert [o[0].item() for o in out] == [float(r + i) for r in range(world_size)], i
    return True


@pytest.mark.parametrize("shm", ["0", "1"])
def test_results_stay_right_across_the_sequence_wrap(shm):
    env = {"COMMUX_SEQUENCE_WRAP": WRAP, "COMMUX_SHM": shm}
    run_ranks(_across_the_wrap, 3, timeout=120, env=env)


def _stale_after_timeout(rank, world_size):
    """The defect from the fault issue: rank 0's first allreduce times out (rank 1 is late);
    rank 1's message then sits in rank 0's queue. Rank 0 must never take it as the data of
    a later collective: it refuses further collectives instead."""
    import torch
    import torch.distributed as dist

    import commux

    results = []
    if rank == 1:
        time.sleep(1.5)
    t = torch.full((4,), 10 * (rank + 1), dtype=torch.int64)
    try:
        dist.all_reduce(t, async_op=True).wait(timeout=datetime.timedelta(seconds=0.5))
        results.append(t[0].item())
    except dist.DistBackendError as e:
        assert rank == 0 and "Timed out" in str(e), e
        results.append("timeout")
    if rank == 0:
        h = commux.health()
        assert not h["healthy"] and "collective failed" in h["reason"], h
    for i in range(2 * WRAP + 4):
        t = torch.full((4,), i + 1, dtype=torch.int64)
        try:
            dist.all_reduce(t, async_op=True).wait(timeout=datetime.timedelta(seconds=5))
        except dist.DistBackendError as e:
            msg = str(e)
            # Rank 0 refuses; rank 1 then waits for rank 0 until its timeout.
            assert ("refused" in msg) if rank == 0 else ("Timed out" in msg), msg
            results.append("error")
            break
        # Only a right answer is acceptable; a stale payload would give 10 + (i + 1).
        assert t[0].item() == 2 * (i + 1), f"collective {i}: got {t[0].item()}"
        results.append(t[0].item())
    # The store lives in rank 0's process: keep it until rank 1 is done.
    side_barrier("done")
    return results


def test_failed_collective_never_matches_stale_traffic():
    env = {"COMMUX_SEQUENCE_WRAP": WRAP, "COMMUX_SHM": "0"}
    res = run_ranks(_stale_after_timeout, 2, timeout=120, env=env)
    assert res[0] == ["timeout", "error"], res[0]
    assert res[1][-1] == "error", res[1]


def _round_wrap(rank, world_size):
    import torch
    import torch.distributed as dist

    # 64-byte pieces: a 300 KB broadcast or reduce is ~4,700 rounds of one collective, past
    # the tag's 12-bit round field (4,096).
    n = 75_000
    for root in range(world_size):
        b = torch.arange(n, dtype=torch.float32) if rank == root else torch.zeros(n)
        dist.broadcast(b, src=root)
        assert torch.equal(b, torch.arange(n, dtype=torch.float32)), root
        r = torch.full((n,), float(rank + 1))
        dist.reduce(r, dst=root)
        if rank == root:
            assert torch.equal(r, torch.full((n,), float(sum(range(1, world_size + 1))))), root
    a = torch.arange(n, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(a)
    assert torch.equal(a, torch.arange(n, dtype=torch.float64) * 6)
    return True


def test_results_stay_right_across_the_round_wrap():
    env = {"COMMUX_PIPELINE_CHUNK_BYTES": 64, "COMMUX_CHAIN_MIN_BYTES": 0,
           "COMMUX_ALLREDUCE_RING_MIN_BYTES": 0, "COMMUX_SHM": "0"}
    run_ranks(_round_wrap, 3, timeout=150, env=env)
