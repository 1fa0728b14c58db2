"""The shared-memory allreduce path (ranks on one host): selection, results over sizes,
dtypes and ops, bad input, timeouts (after which every rank refuses collectives), group
teardown."""

import datetime
import os
import time

import pytest
import torch
import torch.distributed as dist

import commux

from harness import (assert_group_works, expect_error, get_backend_obj, run_ranks, shm_threads,
                     side_barrier)

pytestmark = pytest.mark.ucx_only


_shm_threads = shm_threads


def _reference(ws, n, dtype, op, salt):
    xs = [_input(r, n, dtype, salt) for r in range(ws)]
    out = xs[0].clone()
    for x in xs[1:]:
        if op == dist.ReduceOp.SUM:
            out += x
        elif op == dist.ReduceOp.MAX:
            out = torch.maximum(out, x)
        elif op == dist.ReduceOp.PRODUCT:
            out *= x
    return out


def _input(rank, n, dtype, salt):
    g = torch.Generator().manual_seed(7919 * salt + 31 * rank + n)
    if dtype.is_floating_point:
        return torch.randint(-8, 8, (n,), generator=g).to(dtype) / 4  # exact sums
    return torch.randint(-100, 100, (n,), generator=g).to(dtype)


def _results(rank, ws):
    import commux

    cfg = commux.load_extension().config()
    assert cfg["COMMUX_SHM_SLOT_BYTES"] == 8192 and cfg["COMMUX_SHM_SMALL_BYTES"] == 1024, cfg
    # Empty, one element, one step, exactly one slot, many uneven chunks.
    sizes = [0, 1, 3, 255, 256, 257, 2048, 2049, 100_003]
    ops = [(dist.ReduceOp.SUM, torch.float32), (dist.ReduceOp.SUM, torch.int64),
           (dist.ReduceOp.MAX, torch.float64), (dist.ReduceOp.PRODUCT, torch.int32),
           (dist.ReduceOp.SUM, torch.bfloat16)]
    salt = 0
    for n in sizes:
        for op, dtype in ops:
            salt += 1
            if op == dist.ReduceOp.PRODUCT:
                x = (torch.arange(n) % 3 + 1).to(dtype) * (1 if rank % 2 else -1)
                want = (torch.arange(n) % 3 + 1).to(dtype) ** ws * (-1) ** ((ws + 1) // 2)
            else:
                x = _input(rank, n, dtype, salt)
                want = _reference(ws, n, dtype, op, salt)
            dist.all_reduce(x, op=op)
            assert torch.equal(x, want), (n, op, dtype)
    assert _shm_threads() == 1, "the shared-memory path was not used"
    # AVG, a strided tensor and a list of several tensors (reduced together).
    y = torch.full((6, 4), float(rank + 1)).t()
    dist.all_reduce(y, op=dist.ReduceOp.AVG)
    assert torch.allclose(y, torch.full((4, 6), (ws + 1) / 2))
    backend = get_backend_obj()
    ts = [torch.full((700,), float(rank)), torch.full((700,), 1.0)]
    backend.allreduce(ts).wait()
    for t in ts:
        assert torch.equal(t, torch.full((700,), float(sum(range(ws)) + ws))), t[:3]
    # Many allreduces in flight at once (the lane runs them in issue order), mixed with
    # collectives over UCX and point-to-point.
    xs = [torch.full((50 * i + 1,), float(rank * i)) for i in range(40)]
    works = [dist.all_reduce(x, async_op=True) for x in xs[:20]]
    b = torch.full((10,), float(rank))
    works.append(dist.broadcast(b, src=ws - 1, async_op=True))
    works += [dist.all_reduce(x, async_op=True) for x in xs[20:]]
    for w in works:
        w.wait()
    for i, x in enumerate(xs):
        assert torch.equal(x, torch.full_like(x, float(i * sum(range(ws))))), i
    assert torch.equal(b, torch.full((10,), float(ws - 1)))
    # A future chained on the result (as DDP's comm hooks do).
    f = dist.all_reduce(torch.ones(5), async_op=True).get_future()
    assert torch.equal(f.then(lambda fut: fut.value()[0] * 2).wait(), torch.full((5,), 2.0 * ws))
    return True


# Depth: auto is 2, or 8 when the ranks outnumber the cores (3 and 4 ranks on a 2-core
# machine); 4 and 16 are set, so that a rank runs further ahead than auto ever lets it.
@pytest.mark.parametrize("world_size,depth", [(2, None), (3, None), (4, None), (2, 4), (3, 16)])
def test_shm_allreduce_results(world_size, depth):
    env = {"COMMUX_SHM_SLOT_BYTES": "8192", "COMMUX_SHM_SMALL_BYTES": "1024"}
    if depth is not None:
        env["COMMUX_SHM_DEPTH"] = str(depth)
    assert all(run_ranks(_results, world_size, timeout=150, env=env))


def _same_bits_everywhere(rank, ws, seed):
    # Floats whose sums round: one rank folds each block, so every rank must still hold the
    # same bits, whatever order that rank folded in. Chunks of 2048 float32 and blocks per
    # rank, over sizes that leave ragged chunks and blocks; a reduce's root as well, and the
    # other ranks' buffers untouched.
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    for n in (5003, 2048 * ws + 1, 12000):
        for dtype in (torch.float32, torch.float64, torch.bfloat16):
            x = (torch.randn(n, generator=g) * 1e3).to(dtype)
            mine = x.clone()
            dist.all_reduce(x)
            xs = [torch.empty_like(x) for _ in range(ws)]
            dist.all_gather(xs, x)
            for r in range(ws):
                same = torch.equal(xs[r].view(torch.uint8), x.view(torch.uint8))
                assert same, (seed, n, dtype, r)
            ins = [torch.empty_like(mine) for _ in range(ws)]
            dist.all_gather(ins, mine)
            parts = torch.stack([t.double() for t in ins])
            # Each of the ws - 1 roundings errs by at most eps times what it sums.
            bound = ws * torch.finfo(dtype).eps * parts.abs().sum(0)
            assert ((x.double() - parts.sum(0)).abs() <= bound).all(), (seed, n, dtype)
            root = n % ws
            y = mine.clone()
            dist.reduce(y, dst=root)
            if rank == root:
                same = torch.equal(y.view(torch.uint8), x.view(torch.uint8))
                assert same, (seed, n, dtype, "reduce")
            else:
                assert torch.equal(y, mine), (seed, n, dtype, "reduce keeps non-root input")
    assert _shm_threads() == 1, "the shared-memory path was not used"
    return True


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_shm_chunked_allreduce_gives_every_rank_the_same_bits(world_size):
    seed = int.from_bytes(os.urandom(2), "little")
    print(f"seed {seed}")
    env = {"COMMUX_SHM_SLOT_BYTES": "8192", "COMMUX_SHM_SMALL_BYTES": "1024"}
    results = run_ranks(_same_bits_everywhere, world_size, timeout=150, env=env, seed=seed)
    assert all(results), f"seed {seed}"


# (broadcast from, below; gather/scatter from; allgather from; all_to_all from), bytes,
# with a core per rank and crowded.
_AUTO_CMA = (32 << 10, 1 << 20, 0, 32 << 10, 32 << 10, 1)
_CROWDED_CMA = (0, 0, 0, 0, 64 << 10, 1)


def _auto_cma(crowded):
    """The single-copy sizes COMMUX_SHM_CMA_BYTES=auto gives a channel here. auto reads only
    where the ranks can already read each other: under Yama's ptrace_scope >= 1 sibling
    ranks cannot (auto does not call PR_SET_PTRACER), and every size is 0."""
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            if f.read().strip() != "0":
                return (0, 0, 0, 0, 0, 0)
    except OSError:
        pass  # no Yama
    return _CROWDED_CMA if crowded else _AUTO_CMA


def _cma_sizes(shape):
    return tuple(shape[k] for k in ("cma_broadcast_from", "cma_broadcast_below",
                                    "cma_gather_scatter_from", "cma_allgather_from",
                                    "cma_alltoall_from", "cma_neighbours_from"))


def _shape_when_pinned(rank, ws, pins):
    # Each rank's mask decides what the host's leader counts: the union over its ranks.
    cpus = sorted(os.sched_getaffinity(0))
    if pins is not None:
        os.sched_setaffinity(0, {cpus[i] for i in pins[rank]})
    # A group made after pinning: a group's set-up starts when it is created.
    group = dist.new_group(list(range(ws)))
    backend = group._get_backend(torch.device("cpu"))
    x = torch.ones(4)
    dist.all_reduce(x, group=group)
    assert torch.equal(x, torch.full((4,), float(ws)))
    shape = backend.shared_memory_shape()
    os.sched_setaffinity(0, set(cpus))
    return shape


# mpirun binds each of 2 ranks to a core of its own: not crowded, though each rank sees one
# CPU (commux took that for crowded until ebfeac6). Both on one core: crowded. Expectations
# follow from the union of the masks, so the test holds on any machine with 2 CPUs or more.
@pytest.mark.parametrize("pins", [None, ((0,), (1,)), ((0,), (0,)), ((0, 1), (0,))])
def test_shm_shape_follows_the_cpus_the_ranks_share(pins):
    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs 2 CPUs")
    ws = 2
    shapes = run_ranks(_shape_when_pinned, ws, timeout=60, pins=pins)
    union = len(os.sched_getaffinity(0)) if pins is None else len({c for p in pins for c in p})
    crowded = ws > union
    for shape in shapes:
        assert shape["ranks"] == ws
        assert shape["crowded"] == int(crowded), (pins, shape)
        # Crowded: a deeper ring of small slots, every collective on the whole slot, no
        # polling; else depth 2, 256 KiB copy steps, a 2 us poll (docs/settings.md, COMMUX_SHM_*).
        assert shape["depth"] == (8 if crowded else 2), (pins, shape)
        assert shape["copy_step_bytes"] == (0 if crowded else 256 << 10), (pins, shape)
        assert shape["poll_ns"] == (0 if crowded else 2000), (pins, shape)
        assert shape["slot_bytes"] == 1 << 20, (pins, shape)
        # Single copy (COMMUX_SHM_CMA_BYTES unset): with a core per rank, allgather,
        # all_to_all and medium broadcasts; crowded, large all_to_all pieces only.
        assert _cma_sizes(shape) == _auto_cma(crowded), (pins, shape)
    assert shapes[0] == shapes[1]


def _no_small_slots(rank, ws):
    # COMMUX_SHM_SMALL_BYTES=0: no small slots at all; an empty broadcast once divided by
    # their size (found by review).
    dist.broadcast(torch.empty(0), 0)
    x = torch.full((5,), float(rank))
    dist.broadcast(x, 1)
    assert torch.equal(x, torch.ones(5)), x
    y = torch.ones(3)
    dist.all_reduce(y)
    assert torch.equal(y, torch.full((3,), float(ws))), y
    dist.barrier()
    out = torch.empty(2 * ws)
    dist.all_gather_into_tensor(out, torch.full((2,), float(rank)))
    assert torch.equal(out, torch.arange(ws).repeat_interleave(2).float()), out
    assert _shm_threads() == 1
    return True


def test_shm_without_small_slots():
    assert all(run_ranks(_no_small_slots, 3, timeout=90, env={"COMMUX_SHM_SMALL_BYTES": "0"}))


def _bad_setting(rank, ws, scratch, name):
    return expect_error(lambda: commux.load_extension().config(), (name,), f"a bad {name}",
                        exc_types=(ValueError,))


# Step numbers wrap, so the depth must divide 2^32; the control words hold 16 sets.
@pytest.mark.parametrize("name,value,says", [
    ("COMMUX_SHM_DEPTH", 1, "COMMUX_SHM_DEPTH=1 is not 2, 4, 8 or 16"),
    ("COMMUX_SHM_DEPTH", 3, "COMMUX_SHM_DEPTH=3 is not 2, 4, 8 or 16"),
    ("COMMUX_SHM_DEPTH", 32, "COMMUX_SHM_DEPTH=32 is not 2, 4, 8 or 16"),
    ("COMMUX_SHM_STREAM", "fast", "auto, on or off"),
    ("COMMUX_SHM_POLL_NS", "-5", "not a non-negative integer"),
])
def test_shm_settings_are_checked(name, value, says):
    msg = run_ranks(_bad_setting, 1, timeout=60, init="none", env={name: value}, name=name)[0]
    assert says in msg, msg


def _streamed(rank, ws):
    """Every collective that writes large pieces into the slots (shm/slot_copy.hpp), at odd
    byte offsets and lengths, checked against what each rank computes alone."""
    cfg = commux.load_extension().config()
    assert cfg["COMMUX_SHM_STREAM"] == os.environ.get("COMMUX_SHM_STREAM", "auto"), cfg
    g = torch.Generator().manual_seed(1234)
    # Odd: pieces start and end off the 16-byte grid. Where the ranks have a core each, the
    # slots hold 1 MiB and the copying collectives fill 256 KiB per step; 3 MiB takes several
    # steps of either.
    for n in (300_001, 1 << 20, 3 * (1 << 20) + 5):
        data = [torch.randint(0, 256, (n,), dtype=torch.uint8, generator=g) for _ in range(ws)]
        mine = data[rank]
        x = mine.clone()
        dist.all_reduce(x)  # chunked: each rank copies into its slot, then folds a block
        assert torch.equal(x, sum(d.to(torch.int64) for d in data).remainder(256).to(torch.uint8)), n
        b = mine.clone()
        dist.broadcast(b, src=ws - 1)
        assert torch.equal(b, data[ws - 1]), n
        out = torch.empty(n * ws, dtype=torch.uint8)
        dist.all_gather_into_tensor(out, mine)
        assert torch.equal(out, torch.cat(data)), n
        rs = torch.empty(n, dtype=torch.uint8)
        dist.reduce_scatter_tensor(rs, torch.cat([mine] * ws))
        assert torch.equal(rs, x), n  # every block of every rank is its own data: the sum
        sc = torch.empty(n, dtype=torch.uint8)
        dist.scatter(sc, [d.clone() for d in data] if rank == 0 else None, src=0)
        assert torch.equal(sc, data[rank]), n
        # Uneven all-to-all: rank r sends (j + 1) * n // 7 + r bytes to rank j.
        sizes = [[(j + 1) * n // 7 + r for j in range(ws)] for r in range(ws)]
        chunks = [torch.randint(0, 256, (sizes[r][j],), dtype=torch.uint8, generator=g)
                  for r in range(ws) for j in range(ws)]
        inp = torch.cat([chunks[rank * ws + j] for j in range(ws)])
        got = torch.empty(sum(sizes[r][rank] for r in range(ws)), dtype=torch.uint8)
        dist.all_to_all_single(got, inp, [sizes[r][rank] for r in range(ws)], sizes[rank])
        assert torch.equal(got, torch.cat([chunks[r * ws + rank] for r in range(ws)])), n
    assert _shm_threads() == 1, "the shared-memory path was not used"
    return True


# Each process picks its own way (on, off, auto); ranks that differ must still agree.
@pytest.mark.parametrize("stream,ranks", [("auto", 2), ("auto", 3), ("on", 3), ("off", 2),
                                          (["on", "off", "auto"], 3)])
def test_shm_large_pieces_streamed_or_cached(stream, ranks):
    assert all(run_ranks(_streamed, ranks, timeout=150, env={"COMMUX_SHM_STREAM": stream}))


def _polled(rank, ws):
    """Small collectives (the waits that poll before they yield) with a mix of poll settings
    across ranks, checked against what each rank computes alone, many rounds from a seed."""
    cfg = commux.load_extension().config()
    assert cfg["COMMUX_SHM_POLL_NS"] == (int(os.environ["COMMUX_SHM_POLL_NS"])
                                         if "COMMUX_SHM_POLL_NS" in os.environ else None), cfg
    g = torch.Generator().manual_seed(4321)
    for step in range(300):
        n = int(torch.randint(1, 64, (1,), generator=g))
        root = int(torch.randint(0, ws, (1,), generator=g))
        base = torch.randint(-50, 50, (ws, n), generator=g)
        x = base[rank].clone()
        dist.all_reduce(x)
        assert torch.equal(x, base.sum(0)), (step, n)
        b = base[rank].clone()
        dist.broadcast(b, src=root)
        assert torch.equal(b, base[root]), (step, n, root)
        out = torch.empty(ws * n, dtype=base.dtype)
        dist.all_gather_into_tensor(out, base[rank].clone())
        assert torch.equal(out, base.reshape(-1)), (step, n)
    assert _shm_threads() == 1, "the shared-memory path was not used"
    return True


@pytest.mark.parametrize("poll", ["unset", "0", "2000", ["50000", "0", "2000"]])
def test_shm_waits_that_poll(poll):
    # 3 ranks on this machine's 2 cores: unset means no polling there; set, they poll anyway
    # (a rank that polls while the one it waits for needs its core still gets its answer).
    env = {} if poll == "unset" else {"COMMUX_SHM_POLL_NS": poll}
    assert all(run_ranks(_polled, 3, timeout=150, env=env))


def _mismatch(rank, ws):
    # Different sizes, then different dtypes: every rank gets the same clear error, and the
    # channel stays in step.
    expect_error(lambda: dist.all_reduce(torch.ones(10 + 10 * rank)),
                 ("different tensors",), "allreduce with per-rank sizes")
    expect_error(lambda: dist.all_reduce(torch.ones(4, dtype=torch.float64 if rank else torch.float32)),
                 ("different tensors",), "allreduce with per-rank dtypes")
    big = torch.ones(300_000)  # the chunked algorithm checks too
    expect_error(lambda: dist.all_reduce(big if rank == 0 else torch.ones(300_001)),
                 ("different tensors",), "large allreduce with per-rank sizes")
    assert_group_works(ws)
    assert _shm_threads() == 1
    return True


def test_shm_allreduce_mismatch_is_a_clear_error():
    assert all(run_ranks(_mismatch, 3, timeout=90))


def _timeout_then_refusal(rank, ws):
    x = torch.ones(8)
    dist.all_reduce(x)  # the channel is set up and works
    if rank == 0:
        w = dist.all_reduce(torch.ones(8), async_op=True)
        expect_error(lambda: w.wait(timeout=datetime.timedelta(milliseconds=500)),
                     ("timed out",), "shm allreduce that a peer never joins")
    side_barrier("late", 60)
    # Every rank, the one that timed out and the one that came late, takes the same path:
    # it refuses the collective at the call, naming why (never UCX on one rank and shared
    # memory on the other, which hung until the timeout).
    for what, call in [("all_reduce", lambda: dist.all_reduce(torch.ones(8))),
                       ("broadcast", lambda: dist.broadcast(torch.ones(8), src=0))]:
        msg = expect_error(call, ("refused",), f"{what} after the channel broke",
                           exc_types=(dist.DistBackendError,))
        assert ("Timed out" if rank == 0 else "rank 0") in msg, msg
    assert not commux.health()["healthy"]
    # Point-to-point still works, and a new group runs collectives again.
    t = torch.full((4,), float(rank))
    if rank == 0:
        dist.send(t, dst=1)
    else:
        dist.recv(t, src=0)
        assert t[0].item() == 0.0
    fresh = dist.new_group([0, 1])
    for n in (3, 100_000):
        y = torch.full((n,), float(rank))
        dist.all_reduce(y, group=fresh)
        assert torch.equal(y, torch.full((n,), float(sum(range(ws)))))
    side_barrier("resume", 60)
    return True


def test_shm_timeout_breaks_channel_and_every_rank_refuses():
    assert all(run_ranks(_timeout_then_refusal, 2, timeout=90))


def _disagree(rank, ws):
    x = torch.full((1000,), float(rank))
    dist.all_reduce(x)
    assert torch.equal(x, torch.full((1000,), float(sum(range(ws)))))
    assert _shm_threads() == 0, "a rank with COMMUX_SHM=0 must keep every rank off it"
    return True


def test_shm_used_only_when_every_rank_allows_it():
    assert all(run_ranks(_disagree, 3, timeout=60, env={"COMMUX_SHM": ["1", "0", "1"]}))


def _teardown(rank, ws):
    for i in range(3):
        g = dist.new_group(list(range(ws)))
        x = torch.full((20_000,), float(rank))
        dist.all_reduce(x, group=g)
        assert torch.equal(x, torch.full((20_000,), float(sum(range(ws)))))
        dist.destroy_process_group(g)
    # Segments are unlinked once mapped, so nothing is left in /dev/shm.
    side_barrier("done", 60)
    left = [f for f in os.listdir("/dev/shm") if f.startswith(f"commux-{os.getpid()}-")]
    assert not left, left
    return True


def test_shm_groups_come_and_go():
    assert all(run_ranks(_teardown, 2, timeout=90))
