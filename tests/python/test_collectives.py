"""Collectives: all_reduce (all ops x dtypes x sizes), reduce, broadcast,
barrier, async variants, back-to-back collectives, interleaving with p2p,
and subgroups.

To keep the number of process spawns small, every world size (1..5) runs
all collective checks in ONE spawned job (``_all_collectives``); each check
asserts with a message naming the op/dtype/size/root involved.
"""

import functools
import time

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, is_ucx, run_ranks

R = dist.ReduceOp
SIZES = [1, 1000, 0]
LARGE = 1_000_003  # odd, > 1M: exercises the bandwidth-optimal (chunked) path

FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int32, torch.int64]

# (op, dtypes) combinations that must work.
ALLREDUCE_MATRIX = [
    (R.SUM, FLOATS + [torch.complex64, torch.complex128] + INTS),
    (R.AVG, [torch.float32, torch.float64]),
    (R.PRODUCT, [torch.float32, torch.float64, torch.int32, torch.int64]),
    (R.MIN, FLOATS + INTS),
    (R.MAX, FLOATS + INTS),
    (R.BAND, [torch.bool] + INTS),
    (R.BOR, [torch.bool] + INTS),
    (R.BXOR, [torch.bool] + INTS),
]
# Combinations additionally run at LARGE size.
LARGE_COMBOS = [
    (R.SUM, torch.float32),
    (R.SUM, torch.int64),
    (R.SUM, torch.bfloat16),
    (R.AVG, torch.float64),
    (R.PRODUCT, torch.float64),
    (R.MAX, torch.float32),
    (R.BXOR, torch.int32),
]


def _op_name(op):
    return str(op).split(".")[-1]


def make_input(rank, n, dtype, op, salt=0):
    """Deterministic per-rank input for ``op``, chosen so that the reduction
    is exact in ``dtype`` (no overflow, exactly representable sums)."""
    g = torch.Generator().manual_seed(100_003 * salt + 1009 * rank + n)
    if op in (R.BAND, R.BOR, R.BXOR):
        if dtype == torch.bool:
            return torch.randint(0, 2, (n,), generator=g).bool()
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)
    if op in (R.SUM, R.AVG):
        lo = 0 if dtype == torch.uint8 else -15
        v = torch.randint(lo, 16, (n,), generator=g, dtype=torch.int64)
        if dtype.is_complex:
            w = torch.randint(-15, 16, (n,), generator=g, dtype=torch.int64)
            return torch.complex(v.double() * 0.5, w.double() * 0.5).to(dtype)
        if dtype.is_floating_point:
            return (v.double() * 0.5).to(dtype)
        return v.to(dtype)
    if op == R.PRODUCT:
        choices = torch.tensor([-2, -1, 1, 2], dtype=torch.int64)
        v = choices[torch.randint(0, 4, (n,), generator=g)]
        return v.to(dtype)
    if op in (R.MIN, R.MAX):
        if dtype.is_floating_point:
            v = torch.randint(-500, 500, (n,), generator=g, dtype=torch.int64)
            return (v.double() * 0.25).to(dtype)
        info = torch.iinfo(dtype)
        return torch.randint(info.min, info.max, (n,), generator=g, dtype=torch.int64).to(dtype)
    raise AssertionError(op)


def reference(inputs, op):
    """Reduce the list of per-rank inputs locally."""
    if op == R.SUM:
        return functools.reduce(torch.add, inputs)
    if op == R.AVG:
        acc = functools.reduce(torch.add, [x.double() if not x.is_complex() else x for x in inputs])
        return (acc / len(inputs)).to(inputs[0].dtype)
    if op == R.PRODUCT:
        return functools.reduce(torch.mul, inputs)
    if op == R.MIN:
        return functools.reduce(torch.minimum, inputs)
    if op == R.MAX:
        return functools.reduce(torch.maximum, inputs)
    if op == R.BAND:
        return functools.reduce(torch.bitwise_and, inputs)
    if op == R.BOR:
        return functools.reduce(torch.bitwise_or, inputs)
    if op == R.BXOR:
        return functools.reduce(torch.bitwise_xor, inputs)
    raise AssertionError(op)


def assert_result(got, exp, op, what):
    if op == R.AVG:
        torch.testing.assert_close(got, exp, msg=lambda m: f"{what}: {m}")
    else:
        assert got.dtype == exp.dtype and torch.equal(got, exp), (
            f"{what}: result differs from reference "
            f"(first elements got {got[:6].tolist()}, expected {exp[:6].tolist()})"
        )


def _check_allreduce(rank, ws, op, dtype, n, async_op=False, salt=0):
    what = f"all_reduce {_op_name(op)} {dtype} n={n} ws={ws}{' async' if async_op else ''}"
    t = make_input(rank, n, dtype, op, salt)
    exp = reference([make_input(r, n, dtype, op, salt) for r in range(ws)], op)
    w = dist.all_reduce(t, op=op, async_op=async_op)
    if async_op:
        w.wait()
    assert_result(t, exp, op, what)


def _all_collectives(rank, ws):
    timings = {}
    t_start = time.monotonic()

    # ---- all_reduce: every op x dtype x size ---------------------------------
    for op, dtypes in ALLREDUCE_MATRIX:
        for dtype in dtypes:
            for n in SIZES:
                _check_allreduce(rank, ws, op, dtype, n)
    for op, dtype in LARGE_COMBOS:
        _check_allreduce(rank, ws, op, dtype, LARGE)
    timings["all_reduce"] = time.monotonic() - t_start

    # ---- unsupported combination: clear error, group survives -----------------
    expect_error(
        lambda: dist.all_reduce(torch.ones(4), op=R.BAND),
        ("band", "dtype", "float", "type"),
        f"all_reduce BAND on float32 (ws={ws})",
    )
    _check_allreduce(rank, ws, R.SUM, torch.float32, 1000, salt=1)

    # ---- reduce to every root --------------------------------------------------
    # Only the root's result is specified by torch.distributed; non-root
    # buffers are checked in test_reduce_leaves_nonroot_inputs_unchanged.
    for root in range(ws):
        for op, dtype, n in [(R.SUM, torch.float32, 1000), (R.MAX, torch.int64, 1000),
                             (R.SUM, torch.float64, LARGE), (R.MIN, torch.int32, 1)]:
            t = make_input(rank, n, dtype, op, salt=root)
            exp = reference([make_input(r, n, dtype, op, salt=root) for r in range(ws)], op)
            dist.reduce(t, dst=root, op=op)
            if rank == root:
                assert_result(t, exp, op, f"reduce {_op_name(op)} {dtype} n={n} root={root}")

    # ---- broadcast from every root, small and 4 MiB ----------------------------
    for root in range(ws):
        for dtype, n in [(torch.int64, 7), (torch.float32, 1024 * 1024)]:
            src = (torch.arange(n) * (root + 3)).to(dtype)
            t = src.clone() if rank == root else torch.full((n,), -1).to(dtype)
            dist.broadcast(t, src=root)
            assert torch.equal(t, src), f"broadcast {dtype} n={n} from root {root}: wrong data"

    # ---- barrier: nobody leaves before the last rank arrived -------------------
    for variant in ("sync", "async"):
        dist.barrier()
        time.sleep(rank * 0.2)
        arrive = time.monotonic()
        if variant == "sync":
            dist.barrier()
        else:
            dist.barrier(async_op=True).wait()
        leave = time.monotonic()
        last_arrival = torch.tensor([arrive], dtype=torch.float64)
        dist.all_reduce(last_arrival, op=R.MAX)
        assert leave >= last_arrival.item(), (
            f"{variant} barrier: rank {rank} left at {leave:.4f} before the last rank "
            f"arrived at {last_arrival.item():.4f}"
        )

    # ---- async variants --------------------------------------------------------
    _check_allreduce(rank, ws, R.SUM, torch.float32, 1000, async_op=True, salt=2)
    _check_allreduce(rank, ws, R.MAX, torch.int64, LARGE, async_op=True, salt=2)
    for root in range(ws):
        src = torch.arange(1000, dtype=torch.float64) + root
        t = src.clone() if rank == root else torch.zeros(1000, dtype=torch.float64)
        dist.broadcast(t, src=root, async_op=True).wait()
        assert torch.equal(t, src), f"async broadcast from {root}"
        t = make_input(rank, 1000, torch.int32, R.SUM, salt=3)
        exp = reference([make_input(r, 1000, torch.int32, R.SUM, salt=3) for r in range(ws)], R.SUM)
        dist.reduce(t, dst=root, async_op=True).wait()
        if rank == root:
            assert torch.equal(t, exp), f"async reduce to {root}"

    # ---- 20 async all_reduces of different sizes back to back ------------------
    sizes = [1, 1000, 17, 65536, 0, 3, 250_000, 5, 4096, 1, 999, 2, 100_000, 8, 0, 33,
             1_000_003, 7, 12345, 1]
    tensors, works = [], []
    for k, n in enumerate(sizes):
        t = torch.full((n,), float(k + 1) * (rank + 1), dtype=torch.float64)
        tensors.append(t)
        works.append(dist.all_reduce(t, async_op=True))
    for w in reversed(works):
        w.wait()
    total = sum(range(1, ws + 1))
    for k, (n, t) in enumerate(zip(sizes, tensors)):
        exp = torch.full((n,), float(k + 1) * total, dtype=torch.float64)
        assert torch.equal(t, exp), (
            f"back-to-back async all_reduce #{k} (n={n}) got {t[:3].tolist()}, "
            f"expected {float(k + 1) * total}: consecutive collectives cross-matched"
        )

    # ---- collectives interleaved with p2p on user tag 0 -----------------------
    if ws >= 2:
        n = 4096
        coll_in = lambda r: torch.full((n,), float(r + 1))  # noqa: E731
        p2p_msg = torch.full((n,), -123.0)
        exp_coll = torch.full((n,), float(total))
        for order in range(2):
            coll = coll_in(rank)
            if rank == 0:
                if order == 0:
                    ws_ = dist.isend(p2p_msg.clone(), 1, tag=0)
                    wc = dist.all_reduce(coll, async_op=True)
                else:
                    wc = dist.all_reduce(coll, async_op=True)
                    ws_ = dist.isend(p2p_msg.clone(), 1, tag=0)
                wc.wait()
                ws_.wait()
            elif rank == 1:
                buf = torch.zeros(n)
                if order == 0:
                    wc = dist.all_reduce(coll, async_op=True)
                    wr = dist.irecv(buf, 0, tag=0)
                else:
                    wr = dist.irecv(buf, 0, tag=0)
                    wc = dist.all_reduce(coll, async_op=True)
                wr.wait()
                wc.wait()
                assert torch.equal(buf, p2p_msg), (
                    f"order {order}: p2p tag-0 message received {buf[:3].tolist()}: "
                    "cross-matched with collective traffic"
                )
            else:
                dist.all_reduce(coll)
            assert torch.equal(coll, exp_coll), (
                f"order {order}: all_reduce interleaved with p2p tag 0 got {coll[:3].tolist()}"
            )

    timings["total"] = time.monotonic() - t_start
    return timings


@pytest.mark.parametrize(
    "world_size,shm",
    [(1, "1"), (2, "1"), (3, "1"), (4, "1"), (5, "1"),
     # all_reduce over UCX (recursive doubling, ring) when shared memory is off
     pytest.param(3, "0", marks=pytest.mark.ucx_only), pytest.param(4, "0", marks=pytest.mark.ucx_only)],
    ids=lambda v: f"shm{v}" if isinstance(v, str) else str(v))
def test_collectives(world_size, shm):
    """All collective checks at one world size in one job: all_reduce for
    SUM/AVG/PRODUCT/MIN/MAX/BAND/BOR/BXOR over fitting dtypes at sizes 0, 1,
    1000 (+1_000_003 for a subset) against a local reference; BAND on float
    raises and the group survives; reduce to every root; broadcast from every
    root (small and 4 MiB); barrier ordering (sync/async); async variants; 20
    back-to-back async all_reduces; collectives interleaved with p2p on tag 0."""
    res = run_ranks(_all_collectives, world_size, timeout=150, env={"COMMUX_SHM": shm})
    print(f"ws={world_size} timings (rank 0): {res[0]}")


def _reduce_nonroot(rank, ws):
    # Expectation (documented commux behaviour): reduce() only writes the
    # result into the root's tensor; every non-root rank's input tensor is
    # left exactly as it was (it is a read-only input for non-roots).
    for root in range(ws):
        for dtype, n in [(torch.float32, 1000), (torch.int64, LARGE)]:
            t = make_input(rank, n, dtype, R.SUM, salt=10 + root)
            orig = t.clone()
            dist.reduce(t, dst=root)
            if rank != root:
                assert torch.equal(t, orig), (
                    f"reduce(dst={root}) {dtype} n={n} modified non-root rank {rank}'s tensor"
                )
            else:
                exp = reference(
                    [make_input(r, n, dtype, R.SUM, salt=10 + root) for r in range(ws)], R.SUM
                )
                assert torch.equal(t, exp)
    return True


@pytest.mark.skipif(not is_ucx(), reason="gloo uses non-root tensors as scratch space in "
                    "reduce(), so they are modified")
def test_reduce_leaves_nonroot_inputs_unchanged():
    """reduce(): non-root ranks' tensors are not modified (small and large
    messages, every root)."""
    run_ranks(_reduce_nonroot, 3)


# --------------------------------------------------------------------------
# Subgroups
# --------------------------------------------------------------------------


def _subgroups(rank, ws):
    assert ws == 4
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    gall = dist.new_group([0, 1, 2, 3])
    pair = g01 if rank < 2 else g23
    members = [0, 1] if rank < 2 else [2, 3]
    n = 1000

    for round_ in range(3):
        # Different data per group; same size and dtype everywhere so that a
        # cross-matched message shows up as wrong values, not a size error.
        t_pair = torch.full((n,), 100.0 + rank + round_)
        t_all = torch.full((n,), 1000.0 + 10 * rank + round_)
        t_world = torch.full((n,), 5.0 + rank + round_)
        works = [
            dist.all_reduce(t_pair, group=pair, async_op=True),
            dist.all_reduce(t_all, group=gall, async_op=True),
            dist.all_reduce(t_world, async_op=True),
        ]
        # p2p with the SAME tag in the pair group and in the world group.
        p2p = []
        if rank in (0, 2):
            peer = rank + 1
            p2p.append(dist.isend(torch.full((n,), 7000.0 + rank), peer, group=pair, tag=3))
            p2p.append(dist.isend(torch.full((n,), 9000.0 + rank), peer, tag=3))
        else:
            peer = rank - 1
            b_world, b_pair = torch.zeros(n), torch.zeros(n)
            # posted in the opposite order from the sends
            p2p.append(dist.irecv(b_world, peer, tag=3))
            p2p.append(dist.irecv(b_pair, peer, group=pair, tag=3))
        for w in p2p + works:
            w.wait()

        exp_pair = sum(100.0 + r + round_ for r in members)
        exp_all = sum(1000.0 + 10 * r + round_ for r in range(4))
        exp_world = sum(5.0 + r + round_ for r in range(4))
        assert torch.equal(t_pair, torch.full((n,), exp_pair)), (
            f"round {round_}: pair-group all_reduce got {t_pair[0].item()}, expected {exp_pair}"
        )
        assert torch.equal(t_all, torch.full((n,), exp_all)), (
            f"round {round_}: new_group([0..3]) all_reduce got {t_all[0].item()}, "
            f"expected {exp_all} (crossed with WORLD?)"
        )
        assert torch.equal(t_world, torch.full((n,), exp_world)), (
            f"round {round_}: WORLD all_reduce got {t_world[0].item()}, expected {exp_world}"
        )
        if rank in (1, 3):
            assert torch.equal(b_pair, torch.full((n,), 7000.0 + peer)), (
                f"round {round_}: subgroup p2p (tag 3) got {b_pair[0].item()}"
            )
            assert torch.equal(b_world, torch.full((n,), 9000.0 + peer)), (
                f"round {round_}: world p2p (tag 3) got {b_world[0].item()}"
            )
    for g in (g01, g23, gall):
        if rank in dist.get_process_group_ranks(g):
            dist.barrier(group=g)
    return True


def test_subgroups_do_not_cross():
    """With 4 ranks, new_group([0,1]), new_group([2,3]) and new_group([0..3])
    all_reduce concurrently with WORLD, plus p2p with the same tag inside the
    subgroup and the world group: results never cross between groups."""
    run_ranks(_subgroups, 4, timeout=90)


def _chunked_rings(rank, ws):
    import commux

    cfg = commux.load_extension().config()
    assert cfg["COMMUX_PIPELINE_CHUNK_BYTES"] == 4096 and cfg["COMMUX_ALLREDUCE_RING_MIN_BYTES"] == 1024
    for n in (ws, 1000 * ws + 3, 50_001):  # one element per rank, uneven blocks, many chunks
        x = torch.arange(n, dtype=torch.float64) * (rank + 1)
        dist.all_reduce(x)
        want = torch.arange(n, dtype=torch.float64) * (ws * (ws + 1) / 2)
        assert torch.equal(x, want), n
        inp = torch.arange(n * ws, dtype=torch.float32) + rank
        keep = inp.clone()
        out = torch.empty(n, dtype=torch.float32)
        dist.reduce_scatter_tensor(out, inp)
        full = sum(torch.arange(n * ws, dtype=torch.float32) + r for r in range(ws))
        assert torch.equal(out, full[rank * n:(rank + 1) * n]), n
        assert torch.equal(inp, keep)
    return True


@pytest.mark.ucx_only
@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_chunked_ring_reduce_scatter_and_allreduce(world_size):
    """The ring's reduce-scatter steps move and fold their blocks in chunks
    (COMMUX_PIPELINE_CHUNK_BYTES); tiny chunks make every block take many pieces."""
    env = {"COMMUX_PIPELINE_CHUNK_BYTES": "4096", "COMMUX_ALLREDUCE_RING_MIN_BYTES": "1024",
           "COMMUX_SHM": "0"}
    assert all(run_ranks(_chunked_rings, world_size, timeout=150, env=env))
