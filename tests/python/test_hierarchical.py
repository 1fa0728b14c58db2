"""Host-aware collectives: a group that spans hosts runs allreduce, reduce, broadcast,
allgather, reduce_scatter and barrier in parts, shared memory inside each host and UCX between hosts
(src/group/hierarchical.cpp plans them, src/group/hierarchical_op.cpp runs them).

COMMUX_HOST splits this machine into "hosts" (ranks share memory only when it is equal), so
every layout can be tried here: 2 x 2, interleaved ranks, a host with one rank, 3 x 2. The
real thing, across network namespaces, is scripts/multihost_check.sh (test_multihost.py).
"""

from __future__ import annotations

import datetime
import os
import time

import pytest

from harness import expect_error, run_ranks, shm_threads

pytestmark = pytest.mark.ucx_only


def _expected_hosts(labels):
    hosts, seen = [], {}
    for rank, label in enumerate(labels):
        if label not in seen:
            seen[label] = len(hosts)
            hosts.append([])
        hosts[seen[label]].append(rank)
    return hosts


def _init(rank, world_size, scratch, labels):
    os.environ["COMMUX_HOST"] = labels[rank]
    import torch.distributed as dist

    store = dist.FileStore(os.path.join(scratch, "store"), world_size)
    dist.init_process_group("ucx", store=store, rank=rank, world_size=world_size,
                            timeout=datetime.timedelta(seconds=60))
    return store


def _store_barrier(store, name, world_size, timeout_s=60):
    store.add(name, 1)
    deadline = time.monotonic() + timeout_s
    while int(store.add(name, 0)) < world_size:
        assert time.monotonic() < deadline, f"store barrier {name} timed out"
        time.sleep(0.02)


def _values(rank, n, salt):
    import torch

    return (torch.arange(n, dtype=torch.float64) % 7 + rank * 3 + salt).float()


def _every_collective(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    from harness import get_backend_obj

    _init(rank, world_size, scratch, labels)
    ws = world_size
    dist.barrier()
    expected = _expected_hosts(labels)
    pg = get_backend_obj()
    assert pg.hosts() == expected, (pg.hosts(), expected)
    mine = next(h for h in expected if rank in h)
    assert shm_threads() == (1 if len(mine) > 1 else 0), shm_threads()

    # Empty, one element, a few, one slot's worth, large and odd (padding when parallel).
    for salt, n in enumerate([0, 1, 7, 1000, 65_537, 200_003]):
        t = _values(rank, n, salt)
        dist.all_reduce(t)
        want = sum(_values(r, n, salt) for r in range(ws)) if n else torch.empty(0)
        assert torch.equal(t, want), (n, t[:4], want[:4])
        t = _values(rank, n, salt)
        dist.all_reduce(t, op=dist.ReduceOp.MAX)
        assert torch.equal(t, _values(ws - 1, n, salt)), n
        t = _values(rank, n, salt)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert torch.allclose(t, want / ws) if n else t.numel() == 0, n
    # Integers, and several tensors in one call.
    t = torch.full((33,), rank + 1, dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.PRODUCT)
    assert t.tolist() == [torch.tensor(range(1, ws + 1)).prod().item()] * 33

    for root in range(ws):
        for n in (5, 300_007):  # 1.2 MB: in parts under auto too (COMMUX_HIERARCHY_MIN_BYTES)
            x = _values(rank, n, root)
            before = x.clone()
            dist.reduce(x, dst=root)
            if rank == root:
                assert torch.equal(x, sum(_values(r, n, root) for r in range(ws))), (root, n)
            else:
                assert torch.equal(x, before), "a non-root's input changed"
            y = _values(rank, n, 100 + root)
            dist.broadcast(y, src=root)
            assert torch.equal(y, _values(root, n, 100 + root)), (root, n)
        # Non-contiguous.
        z = torch.arange(24.0).reshape(4, 6).t() * (rank == root)
        dist.broadcast(z, src=root)
        assert torch.equal(z, torch.arange(24.0).reshape(4, 6).t())

    # Allgather and reduce-scatter: blocks land in rank order whatever the hosts' order.
    for salt, n in enumerate([0, 1, 3, 5_000, 40_001]):
        out = torch.empty(ws * n)
        dist.all_gather_into_tensor(out, _values(rank, n, salt))
        assert torch.equal(out, torch.cat([_values(r, n, salt) for r in range(ws)])), n
        outs = [torch.empty(n) for _ in range(ws)]
        dist.all_gather(outs, _values(rank, n, salt + 1))
        assert all(torch.equal(o, _values(r, n, salt + 1)) for r, o in enumerate(outs)), n
        # Non-contiguous output: every rank's block is a column.
        cols = torch.empty(n, ws).t()
        dist.all_gather_into_tensor(cols, _values(rank, n, salt + 2))
        assert torch.equal(cols, torch.stack([_values(r, n, salt + 2) for r in range(ws)])), n
        inp = torch.cat([_values(rank, n, salt + 10 * d) for d in range(ws)])
        before = inp.clone()
        got = torch.empty(n)
        dist.reduce_scatter_tensor(got, inp)
        assert torch.equal(inp, before), "reduce_scatter changed its input"
        assert torch.equal(got, sum(_values(r, n, salt + 10 * rank) for r in range(ws))), n
        dist.reduce_scatter_tensor(got, inp, op=dist.ReduceOp.MAX)
        assert torch.equal(got, _values(ws - 1, n, salt + 10 * rank)), n
        dist.reduce_scatter_tensor(got, inp, op=dist.ReduceOp.AVG)
        want = sum(_values(r, n, salt + 10 * rank) for r in range(ws)) / ws
        assert torch.allclose(got, want), n
    rs = torch.empty(2, dtype=torch.int64)
    dist.reduce_scatter(rs, [torch.full((2,), rank + i, dtype=torch.int64) for i in range(ws)])
    assert rs.tolist() == [sum(r + rank for r in range(ws))] * 2

    # The collectives that stay flat across hosts, and point-to-point.
    a2a = torch.empty(ws)
    dist.all_to_all_single(a2a, torch.arange(ws, dtype=torch.float32) + 10 * rank)
    assert a2a.tolist() == [float(rank + 10 * r) for r in range(ws)]
    peer = (rank + 1) % ws
    got = torch.empty(4)
    reqs = [dist.isend(torch.full((4,), float(rank)), peer, tag=9),
            dist.irecv(got, (rank - 1) % ws, tag=9)]
    for r in reqs:
        r.wait()
    assert got[0].item() == (rank - 1) % ws

    # A subgroup per host (one host: shared memory only) and one across the hosts' leaders.
    for h in expected:
        sub = dist.new_group(h)
        if rank in h:
            t = torch.ones(10)
            dist.all_reduce(t, group=sub)
            assert t[0].item() == len(h)
    leaders = [h[0] for h in expected]
    sub = dist.new_group(leaders)
    if rank in leaders:
        t = torch.ones(10)
        dist.all_reduce(t, group=sub)
        assert t[0].item() == len(leaders)

    t0 = time.monotonic()
    for _ in range(20):
        dist.barrier()
    dist.destroy_process_group()
    return time.monotonic() - t0


LAYOUTS = {
    "2x2": ["a", "a", "b", "b"],
    "interleaved": ["a", "b", "a", "b"],
    "with-a-lone-rank": ["a", "a", "b"],
}


# Every layout under auto; the forced shapes (leader, parallel) on 2 x 2 only.
ACROSS_HOSTS = [(layout, "auto") for layout in sorted(LAYOUTS)] + [
    ("2x2", "leader"), ("2x2", "parallel")]


@pytest.mark.parametrize("layout, hierarchy", ACROSS_HOSTS,
                         ids=[f"{layout}-{hierarchy}" for layout, hierarchy in ACROSS_HOSTS])
def test_every_collective_is_right_across_hosts(layout, hierarchy):
    labels = LAYOUTS[layout]
    run_ranks(_every_collective, len(labels), timeout=240, init="none", labels=labels,
              env={"COMMUX_HIERARCHY": hierarchy, "COMMUX_SHM_SLOT_BYTES": "8192"})


def test_three_hosts_of_two():
    labels = ["a", "a", "b", "b", "c", "c"]
    run_ranks(_every_collective, len(labels), timeout=300, init="none", labels=labels, env={})


def _which_path(rank, world_size, scratch, labels):
    """Which path each collective takes shows in its description: rank 0 starts it alone on
    a fresh group (set up by a barrier first), and it times out naming the path."""
    import torch
    import torch.distributed as dist

    _init(rank, world_size, scratch, labels)
    small, large = 8, 262_144  # floats per rank: 32 B and 1 MiB
    ws = world_size
    last = ws - 1
    cases = [
        ("allreduce small", True, lambda g: dist.all_reduce(torch.ones(small), group=g, async_op=True)),
        ("barrier", True, lambda g: dist.barrier(group=g, async_op=True)),
        ("allgather small", True, lambda g: dist.all_gather_into_tensor(
            torch.empty(ws * small), torch.ones(small), group=g, async_op=True)),
        ("reduce_scatter small", True, lambda g: dist.reduce_scatter_tensor(
            torch.empty(small), torch.ones(ws * small), group=g, async_op=True)),
        # Rank 0 receives in the flat cases below, so its operation cannot finish alone.
        ("broadcast small", False,
         lambda g: dist.broadcast(torch.ones(small), src=last, group=g, async_op=True)),
        ("broadcast large", True,
         lambda g: dist.broadcast(torch.ones(large), src=last, group=g, async_op=True)),
        ("reduce small", False, lambda g: dist.reduce(torch.ones(small), dst=0, group=g, async_op=True)),
        ("reduce large", True, lambda g: dist.reduce(torch.ones(large), dst=0, group=g, async_op=True)),
    ]
    for name, in_parts, start in cases:
        group = dist.new_group(list(range(ws)))
        dist.barrier(group=group)
        if rank == 0:
            work = start(group)
            msg = expect_error(lambda: work.wait(timeout=datetime.timedelta(milliseconds=300)),
                               ["timed out"], f"{name} on rank 0 alone")
            assert ("hierarchical" in msg) == in_parts, (name, msg)
        _store_barrier(dist.distributed_c10d._get_default_store(), name, ws)
    dist.destroy_process_group()
    return True


def test_which_collectives_run_in_parts():
    """Under auto, allreduce, allgather, reduce_scatter and barrier run in parts at every
    size; broadcast and reduce from COMMUX_HIERARCHY_MIN_BYTES (1 MiB) only."""
    assert all(run_ranks(_which_path, 4, timeout=180, init="none", labels=["a", "a", "b", "b"],
                         env={}))


def _mixed_settings(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    from harness import get_backend_obj

    # Rank 0 says leader; the others would run flat, or in parts only from 1 GiB.
    os.environ["COMMUX_HIERARCHY"] = "leader" if rank == 0 else ("off" if rank % 2 else "auto")
    os.environ["COMMUX_HIERARCHY_MIN_BYTES"] = str(1 << 30)
    _init(rank, world_size, scratch, labels)
    for n in (3, 50_000):
        t = torch.full((n,), float(rank))
        dist.broadcast(t, src=world_size - 1)
        assert t[0].item() == world_size - 1
        out = torch.empty(world_size * n)
        dist.all_gather_into_tensor(out, torch.full((n,), float(rank)))
        assert out[::n].tolist() == list(map(float, range(world_size)))
    hosts = get_backend_obj().hosts()
    dist.destroy_process_group()
    return hosts


def test_the_group_takes_rank_0s_hierarchy_settings():
    """Every rank must take the same paths: rank 0's COMMUX_HIERARCHY settings count (a rank
    with others would run flat while its peers wait in shared memory)."""
    labels = ["a", "a", "b", "b"]
    for hosts in run_ranks(_mixed_settings, 4, timeout=120, init="none", labels=labels, env={}):
        assert hosts == _expected_hosts(labels)


def _flat(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    from harness import get_backend_obj

    _init(rank, world_size, scratch, labels)
    t = torch.ones(1000)
    dist.all_reduce(t)
    assert t[0].item() == world_size
    hosts = get_backend_obj().hosts()
    threads = shm_threads()
    # The path shows in the description of a collective that times out: rank 0 starts an
    # allreduce alone on a fresh group (as in _which_path). Under auto it runs in parts
    # ("hierarchical") at every size where the group spans hosts.
    description = None
    group = dist.new_group(list(range(world_size)))
    dist.barrier(group=group)
    if rank == 0:
        work = dist.all_reduce(torch.ones(8), group=group, async_op=True)
        description = expect_error(lambda: work.wait(timeout=datetime.timedelta(milliseconds=300)),
                                   ["timed out"], "allreduce on rank 0 alone")
    _store_barrier(dist.distributed_c10d._get_default_store(), "flat", world_size)
    dist.destroy_process_group()
    return hosts, threads, description


def test_hierarchy_off_keeps_the_group_flat():
    labels = ["a", "a", "b", "b"]
    results = run_ranks(_flat, 4, timeout=120, init="none", labels=labels,
                        env={"COMMUX_HIERARCHY": "off"})
    for hosts, threads, _ in results:
        # The layout is known and each host's channel exists...
        assert hosts == _expected_hosts(labels)
        assert threads == 1
    # ...but the allreduce runs flat: not in parts (shared memory inside hosts, UCX between).
    description = results[0][2]
    assert "hierarchical" not in description, description
    assert "allreduce" in description, description


def test_every_rank_on_its_own_host_is_flat():
    results = run_ranks(_flat, 3, timeout=120, init="none", labels=["a", "b", "c"], env={})
    for hosts, threads, _ in results:
        assert hosts == [] and threads == 0
    assert "hierarchical" not in results[0][2], results[0][2]


def _late_rank(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    store = _init(rank, world_size, scratch, labels)
    dist.barrier()
    t = torch.ones(100)
    started = time.monotonic()
    if rank != world_size - 1:
        # The last rank (on the second host, not its leader) never comes: its host's leader
        # waits for it in shared memory, the first host waits between hosts.
        work = dist.all_reduce(t, async_op=True)
        # Gloo's words, which scripts match on, on the last rank's host too, whose leader gives
        # up in the collective's first part (the reduce to it). On the first host the two
        # 3 s timeouts race: rank 1 may hear first that its leader gave up between hosts, and
        # the leader may hear first that rank 1 gave up waiting for the broadcast.
        words = {2: ["timed out after"], 1: ["timed out after", "rank 0 left"],
                 0: ["timed out after", "rank 1 left"]}[rank]
        expect_error(lambda: work.wait(timeout=datetime.timedelta(seconds=3)), words,
                     "allreduce without the last rank")
    elapsed = time.monotonic() - started
    if rank != world_size - 1:
        expect_error(lambda: dist.all_reduce(torch.ones(3)), ["refused"], "allreduce after")
    # Point-to-point still works after a failed collective.
    peer = rank ^ 1
    got = torch.zeros(2)
    reqs = [dist.isend(torch.full((2,), float(rank)), peer), dist.irecv(got, peer)]
    for r in reqs:
        r.wait()
    assert got[0].item() == peer
    _store_barrier(store, "done", world_size)
    dist.destroy_process_group()
    return elapsed


def test_a_missing_rank_times_out_on_every_host_and_nothing_hangs():
    labels = ["a", "a", "b", "b"]
    elapsed = run_ranks(_late_rank, 4, timeout=120, init="none", labels=labels, env={})
    assert all(e < 30 for e in elapsed[:3]), elapsed


def _reduce_then_allreduce(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    store = _init(rank, world_size, scratch, labels)
    dist.barrier()
    n = 1 << 20  # 4 MiB: a reduce in parts (COMMUX_HIERARCHY_MIN_BYTES is 1 MiB)
    t = torch.full((n,), float(rank + 1))
    if labels[rank] != labels[0]:
        # The other host comes late: the root's part between hosts is still going when its
        # host's next collective is issued.
        time.sleep(0.5)
    first = dist.reduce(t, dst=0, async_op=True)
    second = dist.all_reduce(t, async_op=True)
    second.wait()
    first.wait()
    total = sum(range(1, world_size + 1))
    # The root's reduce (the sum) must be complete before its all_reduce reads the tensor;
    # the others keep their input through the reduce.
    expected = total + sum(r + 1 for r in range(1, world_size))
    assert torch.all(t == expected), (rank, t[:4].tolist(), expected)
    _store_barrier(store, "done", world_size)
    dist.destroy_process_group()


def test_a_collective_that_ends_between_hosts_is_over_before_the_next_one_starts():
    """The root's reduce ends with the part between hosts; the channel runs the next
    collective only once that part is over (a Hold part keeps the channel's order), as on a
    single host."""
    run_ranks(_reduce_then_allreduce, 4, timeout=120, init="none", labels=["a", "a", "b", "b"],
              env={})


def _leader_gives_up_between_hosts(rank, world_size, scratch, labels):
    import torch
    import torch.distributed as dist

    store = _init(rank, world_size, scratch, labels)
    dist.barrier()
    t = torch.ones(1 << 20)  # a reduce in parts; the root (rank 0) crosses last
    elapsed = 0.0
    if rank == 0:
        work = dist.reduce(t, dst=0, async_op=True)
        expect_error(lambda: work.wait(timeout=datetime.timedelta(seconds=3)),
                     ["timed out after"], "a reduce whose other host never comes")
    elif rank == 1:
        dist.reduce(t, dst=0)  # its part is only the one on its host, done at once
        started = time.monotonic()
        # Its next collective waits in shared memory for rank 0, which gave up: it must
        # hear of it at once, not at its own timeout.
        msg = expect_error(lambda: dist.barrier(), ["rank 0"], "a barrier after the root left")
        elapsed = time.monotonic() - started
        assert "left" in msg or "refused" in msg, msg
    _store_barrier(store, "done", world_size, timeout_s=90)
    dist.destroy_process_group()
    return elapsed


def test_a_root_that_gives_up_between_hosts_frees_its_host_at_once():
    """A hierarchical reduce whose last part (between hosts) times out on the root: the root's
    host peer, already waiting in its next collective, fails at once naming the root."""
    elapsed = run_ranks(_leader_gives_up_between_hosts, 4, timeout=150, init="none",
                        labels=["a", "a", "b", "b"], env={})
    assert elapsed[1] < 20, elapsed
