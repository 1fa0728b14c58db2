"""Watching members at scale: in a group that spans hosts a rank reads the records of (and
watches) only its own host's ranks, the other hosts' leaders when it leads its host, and the
peers its collectives talk to. A death anywhere still fails every survivor's collective
within seconds: host leaders relay it (src/group/death_relay.hpp).

COMMUX_HOST splits this machine into "hosts", as in test_hierarchical.py. Every rank here
shares one PID namespace, so a rank that watched every member would see each death by
itself: the victim is one the survivor does not watch, so only the relay can tell it.
"""

from __future__ import annotations

import time

import pytest

from harness import run_ranks
from test_faults import DETECT_LIMIT_S, _die_after, _expect_death, _health_says_dead
from test_hierarchical import _expected_hosts, _init

pytestmark = pytest.mark.ucx_only


def _reads_only_what_it_uses(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    from harness import get_backend_obj

    _init(rank, world_size, scratch, labels)
    pg = get_backend_obj()
    hosts = _expected_hosts(labels)
    mine = next(h for h in hosts if rank in h)
    leaders = [h[0] for h in hosts]
    t = torch.full((1000,), float(rank))
    dist.all_reduce(t)  # in parts: shared memory in hosts, leaders across
    assert t[0].item() == sum(range(world_size))
    dist.barrier()
    expected = set(mine) | (set(leaders) if rank == mine[0] else set())
    assert set(pg.known_ranks()) == expected, (rank, pg.known_ranks(), expected)
    # A small broadcast runs flat: each rank adds the peers of its tree, no more.
    b = torch.full((8,), float(rank))
    dist.broadcast(b, src=world_size - 1)
    assert b.tolist() == [float(world_size - 1)] * 8
    known = pg.known_ranks()
    assert set(known) >= expected and len(known) < world_size, (rank, known)
    dist.destroy_process_group()
    return sorted(known)


def test_a_rank_reads_only_its_host_its_leaders_and_its_peers():
    labels = ["a", "a", "b", "b", "c", "c"]
    known = run_ranks(_reads_only_what_it_uses, len(labels), timeout=180, init="none",
                      labels=labels)
    # Not everyone reads everything (the non-leaders' counts are checked in the ranks).
    assert max(len(k) for k in known) < len(labels), known


def _fails_naming(work, victim, what, store, rank, world_size):
    """`work` must fail naming `victim` within DETECT_LIMIT_S and health must say so; then
    the group is destroyed once every survivor has checked. Returns commux.health()."""
    import torch.distributed as dist

    elapsed = _expect_death(work, victim, what)
    assert elapsed < DETECT_LIMIT_S, f"rank {rank}: {what} took {elapsed:.2f} s to see the death"
    h = _health_says_dead(victim)
    # Nobody leaves before all have checked (a group torn down closes its connections).
    store.set(f"checked/{rank}", "1")
    store.wait([f"checked/{r}" for r in range(world_size) if r != victim])
    dist.destroy_process_group()
    return h


def _relayed(rank, world_size, scratch, labels, victim, scenario):
    import torch
    import torch.distributed as dist

    store = _init(rank, world_size, scratch, labels)
    dist.all_reduce(torch.ones(1000))  # the layout, the relay, every route in use
    if rank == victim:
        _die_after(0.3)
    if scenario == "allreduce":
        work = dist.all_reduce(torch.ones(1000), async_op=True)
    elif scenario == "broadcast":  # small: flat, over UCX on every rank
        work = dist.broadcast(torch.ones(8), src=victim, async_op=True)
    else:
        raise ValueError(scenario)
    return _fails_naming(work, victim, scenario, store, rank, world_size)["reason"]


@pytest.mark.parametrize(
    "victim,scenario",
    [
        (3, "allreduce"),  # not a leader: rank 1 hears of it from leader 0, told by leader 2
        (2, "broadcast"),  # a leader: leader 0 watches it, and tells rank 1
    ],
)
def test_a_death_reaches_every_host_through_the_leaders(victim, scenario):
    labels = ["a", "a", "b", "b"]
    reasons = run_ranks(_relayed, len(labels), timeout=120, init="none", labels=labels,
                        killed=(victim,), victim=victim, scenario=scenario)
    # Rank 1 watches neither victim: what it knows came through leader 0.
    assert "told by rank 0" in reasons[1], reasons


def _leader_ring(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    from harness import get_backend_obj

    store = _init(rank, world_size, scratch, labels)
    hosts = _expected_hosts(labels)
    leaders = [h[0] for h in hosts]
    victim = leaders[-1]  # watched by the two leaders before it, not by leader 0
    dist.all_reduce(torch.ones(8))  # the layout, the relay, the leaders' watches
    known = get_backend_obj().known_ranks()
    if rank == leaders[0]:
        # Its host, the next two leaders, and the leaders its schedule talks to: the test
        # means something only if the victim is none of them.
        assert set(known) >= {0, 1, leaders[1], leaders[2]} and victim not in known, known
    store.set(f"known/{rank}", "1")
    store.wait([f"known/{r}" for r in range(world_size)])
    if rank == victim:
        _die_after(0.3)
    work = dist.all_reduce(torch.ones(8), async_op=True)
    h = _fails_naming(work, victim, "allreduce", store, rank, world_size)
    return {"known": known, "reason": h["reason"]}


def test_a_leader_is_watched_by_the_two_before_it_who_tell_the_rest():
    """4 hosts: leaders 0, 2, 3, 4. A leader watches the next two leaders only (not all
    H - 1 of them), so leader 4 is watched by leaders 2 and 3, which must tell leader 0,
    which tells rank 1."""
    labels = ["a", "a", "b", "c", "d"]
    out = run_ranks(_leader_ring, len(labels), timeout=120, init="none", labels=labels,
                    killed=(4,))
    assert set(out[2]["known"]) >= {2, 3, 4} and set(out[3]["known"]) >= {3, 4, 0}, out
    assert ("told by rank 2" in out[0]["reason"] or "told by rank 3" in out[0]["reason"]), out
    assert "told by rank 0" in out[1]["reason"], out


def _deaf_after_shutdown(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    import commux

    store = _init(rank, world_size, scratch, labels)
    dist.all_reduce(torch.ones(1000))  # the layout, the relay, every watch in place
    victim = 2  # leads host b: leader 0 watches it and would relay its death to rank 1
    if rank in (0, 1):
        # What Python's exit does first (atexit): the groups stay alive, the engine stops.
        commux.load_extension()._shutdown()
        store.set(f"stopped/{rank}", "1")
    if rank == victim:
        store.wait(["stopped/0", "stopped/1"])
        _die_after(0.1)
    if rank == 3:
        _expect_death(dist.all_reduce(torch.ones(1000), async_op=True), victim, "allreduce")
        store.set("seen", "1")
        return commux.health()
    # Before the fix, leader 0's watch delivered the death here and relayed it with a
    # tensor: in a real exit that ran during torch's own teardown and aborted the process.
    # Rank 3 saw it through the same kind of pidfd event, so by now leader 0's watch had it.
    store.wait(["seen"])
    time.sleep(0.5)
    return commux.health()


def test_a_stopped_engine_reports_no_deaths():
    """At process exit the groups outlive the engine: a peer that exits first must reach no
    group (CI, stop 21: a leader relayed a leader's normal exit after torch's teardown had
    begun, and aborted in at::zeros)."""
    labels = ["a", "a", "b", "b"]
    health = run_ranks(_deaf_after_shutdown, len(labels), timeout=120, init="none",
                       labels=labels, killed=(2,))
    assert health[0]["healthy"] and health[1]["healthy"], health
    assert 2 in health[3]["dead_ranks"], health  # the rank still running saw it
