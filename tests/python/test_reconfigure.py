"""torch 2.15's reconfigure API on commux: a group made with enable_reconfigure=True waits
for its members; after a death the survivors reconfigure to themselves and go on; a
replacement process joins and the group grows back; bad handles, a reused uuid and a
member that never comes are refused (the last within the timeout) and the group goes on."""

from __future__ import annotations

import datetime
import os
import signal
import time

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, free_port, is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = [
    pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("commux's reconfigure")),
    pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                       reason="this torch has no reconfigure API (torch >= 2.15)"),
]

SURVIVORS = (0, 1)
VICTIM = 2
REPLACEMENT = 3  # a process of its own, started once the victim is gone


def _handles(store, round_: str, members: list[int], me: int) -> list[str]:
    """Every member's current handle, in `members` order (exchanged out of band)."""
    store.set(f"handle/{round_}/{me}", dist._get_reconfigure_handle())
    return [store.get(f"handle/{round_}/{m}").decode() for m in members]


def _check(members: list[int], me_global: int, step: int) -> None:
    """The default group, of the processes `members` (in rank order), runs collectives and
    tagged messages; its rank and size are the new ones."""
    import commux

    me, n = dist.get_rank(), dist.get_world_size()
    assert n == len(members) and members[me] == me_global, (me, n, members, me_global)
    x = torch.full((1000,), float(me_global + 1))
    dist.all_reduce(x)
    assert x[0].item() == sum(m + 1 for m in members) and x[-1].item() == x[0].item(), x[:3]
    big = torch.full((1 << 18,), float(me))
    dist.all_reduce(big)
    assert big[0].item() == sum(range(n)) and big[-1].item() == sum(range(n))
    h = commux.health()
    assert h["healthy"], h
    # Every rank checks before any can finish the ring below and leave (test_shrink says why).
    dist.all_reduce(torch.ones(1))
    nxt, prev = (me + 1) % n, (me - 1) % n
    sends = [dist.isend(torch.full((4,), float(step * 100 + me * 10 + t)), dst=nxt, tag=50 + t)
             for t in (0, 1)]
    for t in (1, 0):
        got = torch.empty(4)
        dist.recv(got, src=prev, tag=50 + t)
        assert got[0].item() == step * 100 + prev * 10 + t, (t, got)
    for w in sends:
        w.wait()


def _reconfigure_job(rank, world_size, scratch, port, shm):
    os.environ["COMMUX_SHM"] = shm
    import commux

    commux.register()
    timeout = datetime.timedelta(seconds=60)
    if rank == REPLACEMENT:
        # Started with the others; joins once the survivors ask for a replacement.
        store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
        store.wait(["replace"], timeout)
        dist.init_process_group("ucx", store=store, rank=VICTIM, world_size=3,
                                timeout=timeout, enable_reconfigure=True)
        members = [0, 1, REPLACEMENT]
        handles = _handles(store, "grow", members, REPLACEMENT)
        dist._reconfigure(uuid=3, handles=handles).wait()
        _check(members, REPLACEMENT, 3)
        return _after_growing(store, members, REPLACEMENT)
    store = dist.TCPStore("127.0.0.1", port, is_master=rank == 0, timeout=timeout,
                          wait_for_workers=False)
    dist.init_process_group("ucx", store=store, rank=rank, world_size=3, timeout=timeout,
                            enable_reconfigure=True)
    assert dist._supports_reconfigure()
    # No members yet: every operation is refused, saying why.
    expect_error(lambda: dist.all_reduce(torch.ones(2)), ("not initialized",),
                 "a collective before the first reconfigure")
    expect_error(lambda: dist.send(torch.ones(2), dst=(rank + 1) % 3), ("not initialized",),
                 "a send before the first reconfigure")
    members = [0, 1, VICTIM]
    dist._reconfigure(uuid=1, handles=_handles(store, "start", members, rank)).wait()
    _check(members, rank, 1)
    if rank == VICTIM:
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while VICTIM not in commux.health()["dead_ranks"]:
        assert time.monotonic() < deadline, "the victim's death was not seen in 10 s"
        time.sleep(0.01)
    # Shrink to the survivors: a set of handles, so the backend orders them.
    survivors = list(SURVIVORS)
    handles = _handles(store, "shrink", survivors, rank)
    dist._reconfigure(uuid=2, handles=set(handles)).wait()
    order = sorted(handles)
    _check([survivors[handles.index(h)] for h in order], rank, 2)
    # Grow back: a replacement process joins as the third member.
    if rank == 0:
        store.set("replace", "1")
    members = [0, 1, REPLACEMENT]
    dist._reconfigure(uuid=3, handles=_handles(store, "grow", members, rank)).wait()
    _check(members, rank, 3)
    return _after_growing(store, members, rank)


def _after_growing(store, members, me_global):
    """Refusals that change nothing, then a member that never comes: the reconfigure fails
    within its timeout, the group is not initialized, and a later one recovers it."""
    handles = _handles(store, "again", members, me_global)
    mine = dist._get_reconfigure_handle()
    for bad, words in [
        ([], ("no handles",)),
        (handles + [handles[0]], ("given twice",)),
        ([h for h in handles if h != mine], ("not among",)),
        (handles[:-1] + ["gloo:1:2:3"], ("not a commux reconfigure handle",)),
        (handles[:-1] + ["ucx:1:2:zz"], ("not a commux reconfigure handle",)),
        (handles[:-1] + ["ucx:" + "9" * 200], ("too long",)),
    ]:
        expect_error(lambda: dist._reconfigure(uuid=9, handles=bad), words,
                     f"reconfigure({bad!r})", exc_types=(ValueError,))
    # A uuid used before: refused on every member alike.
    expect_error(lambda: dist._reconfigure(uuid=3, handles=handles), ("was used before",),
                 "a reused uuid", exc_types=(ValueError,))
    _check(members, me_global, 4)
    # A fourth member that never comes: every member fails within the timeout.
    ghost = "ucx:7:-1:0123456789abcdef"
    handles = _handles(store, "ghost", members, me_global)
    start = time.monotonic()
    expect_error(lambda: dist._reconfigure(uuid=5, handles=handles + [ghost],
                                           timeout=datetime.timedelta(seconds=2)),
                 ("connect timeout after 2000ms", "rank 3"), "a member that never comes")
    assert time.monotonic() - start < 15
    expect_error(lambda: dist.all_reduce(torch.ones(2)), ("not initialized",),
                 "a collective after a failed reconfigure")
    dist._reconfigure(uuid=6, handles=_handles(store, "recover", members, me_global)).wait()
    _check(members, me_global, 6)
    return members


@pytest.mark.parametrize("shm", ["1", "0"])
def test_survivors_reconfigure_and_a_replacement_joins(shm):
    results = run_ranks(_reconfigure_job, 4, timeout=150, init="none", killed=(VICTIM,),
                        port=free_port(), shm=shm)
    assert results == [[0, 1, 3], [0, 1, 3], None, [0, 1, 3]], results
