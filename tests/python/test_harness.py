"""Self-tests of the multi-process harness: a test suite whose harness
swallowed rank failures or hung forever would be worse than none.
These run with whatever backend is under test (the harness always
initializes a real process group)."""

import os
import time

import pytest
import torch
import torch.distributed as dist

from harness import run_ranks


def _return_values(rank, world_size, offset):
    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    return {"rank": rank, "sum": t.item() + offset, "tensor": torch.arange(3) * rank,
            "env": os.environ.get("COMMUX_HARNESS_PROBE")}


def test_return_values_kwargs_and_env():
    """fn's return values come back per rank (index = rank), kwargs are
    forwarded and env vars are set in every rank."""
    res = run_ranks(_return_values, 3, env={"COMMUX_HARNESS_PROBE": "yes"}, offset=10)
    assert [r["rank"] for r in res] == [0, 1, 2]
    assert all(r["sum"] == 13.0 for r in res)
    assert all(r["env"] == "yes" for r in res)
    assert torch.equal(res[2]["tensor"], torch.tensor([0, 2, 4]))


def _rank1_raises(rank, world_size):
    if rank == 1:
        raise ValueError("deliberate failure in rank 1")
    # rank 0 blocks on a message that never comes; the harness must kill it
    # after the grace period instead of waiting for the hard timeout.
    dist.recv(torch.zeros(1), 1)


def test_rank_failure_is_reported_with_traceback():
    """An exception in one rank fails the test with that rank's traceback and
    names the rank left blocked (which is killed well before the hard
    timeout)."""
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as ei:
        run_ranks(_rank1_raises, 2, timeout=100)
    msg = str(ei.value)
    assert "deliberate failure in rank 1" in msg and "ValueError" in msg, msg
    assert "_rank1_raises" in msg, "traceback missing"
    assert "rank 1" in msg
    assert time.monotonic() - t0 < 60, "blocked rank was not killed promptly after the failure"


def _hang(rank, world_size):
    if rank == 1:
        time.sleep(3600)
    return rank


def test_hard_timeout_kills_and_names_ranks():
    """A rank that never finishes is SIGKILLed at the hard timeout and the
    failure names it and shows its Python stack."""
    t0 = time.monotonic()
    with pytest.raises(pytest.fail.Exception) as ei:
        run_ranks(_hang, 2, timeout=12)
    elapsed = time.monotonic() - t0
    msg = str(ei.value)
    assert "HARD TIMEOUT" in msg and "ranks still running: [1]" in msg, msg
    assert "_hang" in msg, "stack dump of the hung rank missing"
    assert elapsed < 60, f"hard timeout took {elapsed:.1f}s"
