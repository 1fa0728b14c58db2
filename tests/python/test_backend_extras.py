"""torch 2.15's smaller Backend calls on commux: abort hooks, ephemeral timeouts, a profiler
span per operation, and connect() (eager connection within a timeout)."""

from __future__ import annotations

import datetime
import time

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("commux's backend"))


def _backend():
    return dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))


def _abort_hooks(rank, world_size):
    backend = _backend()
    assert backend.supports_abort_hooks
    ran = []
    backend.register_abort_hook(1, lambda: ran.append(1))
    backend.register_abort_hook(2, lambda: ran.append(2))
    backend.unregister_abort_hook(1)
    x = torch.ones(4)
    dist.all_reduce(x)
    assert ran == [], ran  # nothing aborted yet
    pending = dist.irecv(torch.empty(2), src=1 - rank, tag=9)
    backend.abort()
    assert ran == [2], ran  # before the abort took effect
    expect_error(pending.wait, ("aborted",), "a receive the abort cancelled")
    return True


@pytest.mark.skipif(not hasattr(torch._C._distributed_c10d.Backend, "register_abort_hook"),
                    reason="this torch has no abort hooks")
def test_abort_hooks_run_before_an_abort():
    assert run_ranks(_abort_hooks, 2, timeout=60) == [True, True]


def _ephemeral(rank, world_size):
    backend = _backend()
    # The group's timeout is 1 s (pg_timeout); 2 s more for what comes next.
    backend._add_ephemeral_timeout(datetime.timedelta(seconds=2))
    start = time.monotonic()
    expect_error(lambda: dist.recv(torch.empty(2), src=1 - rank, tag=70), ("timed out after 3000",),
                 "a receive under the extension")
    first = time.monotonic() - start
    # The first operation made after the extension completed (it failed): it has ended.
    start = time.monotonic()
    expect_error(lambda: dist.recv(torch.empty(2), src=1 - rank, tag=71), ("timed out after 1000",),
                 "a receive after the extension ended")
    second = time.monotonic() - start
    assert first >= 2.9 and second < 2.5, (first, second)
    dist.barrier()
    return True


@pytest.mark.skipif(not hasattr(torch._C._distributed_c10d.Backend, "_add_ephemeral_timeout"),
                    reason="this torch has no ephemeral timeouts")
def test_an_ephemeral_timeout_lasts_until_the_first_later_operation_completes():
    assert run_ranks(_ephemeral, 2, timeout=60, pg_timeout=datetime.timedelta(seconds=1)) == [True] * 2


def _profiled(rank, world_size):
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        x = torch.ones(8)
        dist.all_reduce(x)
        w = dist.isend(torch.ones(4), dst=1 - rank, tag=3)
        dist.recv(torch.empty(4), src=1 - rank, tag=3)
        w.wait()
    names = {e.name for e in prof.events()}
    for want in ("commux:all_reduce", "commux:send", "commux:recv"):
        assert want in names, sorted(n for n in names if "commux" in n or "c10d" in n)
    return True


def test_the_profiler_sees_a_span_per_operation():
    assert run_ranks(_profiled, 2, timeout=60) == [True, True]


def _connect(rank, world_size, port, scratch):
    import commux

    _C = commux.load_extension()
    store = dist.TCPStore("127.0.0.1", port, is_master=rank == 0, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=30))
    # A group of three whose third member never comes: connect fails within its timeout,
    # naming it; the two that came connect once the store says they all did.
    lonely = _C.ProcessGroupUCX(dist.PrefixStore("lonely", store), rank, 3,
                                datetime.timedelta(seconds=30))
    start = time.monotonic()
    msg = expect_error(lambda: lonely.connect(datetime.timedelta(milliseconds=300)),
                       ("connect timeout after 300ms: rank",), "a member that never comes")
    # Rank 2 never comes; under load the other may not have come yet either.
    assert "2 of 3" in msg, msg
    assert time.monotonic() - start < 5
    pair = _C.ProcessGroupUCX(dist.PrefixStore("pair", store), rank, 2,
                              datetime.timedelta(seconds=30))
    pair.connect()
    assert pair.known_ranks() == [0, 1]
    # Rank 0's process serves the store: it stays until the other is done with it.
    store.add("done", 1)
    deadline = time.monotonic() + 30
    while rank == 0 and store.add("done", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    return True


def test_connect_waits_for_every_member_within_its_timeout():
    from harness import free_port

    assert run_ranks(_connect, 2, timeout=60, init="none", port=free_port()) == [True, True]
