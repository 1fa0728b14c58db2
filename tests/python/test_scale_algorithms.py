"""The algorithms for many ranks (recursive doubling and dissemination allgather,
recursive-halving reduce-scatter, Rabenseifner allreduce, scatter+allgather broadcast,
Bruck's all-to-all) over real UCX. They are chosen from 9 ranks on;
COMMUX_LOG_ALGORITHMS_MIN_RANKS=2 and a huge COMMUX_RING_MIN_BLOCK_BYTES make 3-5 ranks
(power of two and not) take them at every size, with shared memory off so the schedules
run. The schedules themselves are checked at up to 4,096 ranks in the simulator
(tests/cpp/test_schedules.cpp)."""

import datetime

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, run_ranks, side_barrier
from test_allgather_reduce_scatter import _gather_family

LOG_ALGORITHMS = {"COMMUX_SHM": "0", "COMMUX_LOG_ALGORITHMS_MIN_RANKS": "2",
                  "COMMUX_RING_MIN_BLOCK_BYTES": str(1 << 40)}


def _allreduce_and_broadcast(rank, ws):
    for n in (0, 1, ws - 1, 1000, 65_537, 600_001):
        for dtype in (torch.float64, torch.int64):
            x = (torch.arange(n, dtype=torch.float64) * (rank + 1)).to(dtype)
            dist.all_reduce(x)
            want = (torch.arange(n, dtype=torch.float64) * (ws * (ws + 1) // 2)).to(dtype)
            assert torch.equal(x, want), f"all_reduce n={n} {dtype} on {ws} ranks"
            for root in range(ws):
                b = torch.full((n,), float(rank), dtype=torch.float64).to(dtype)
                dist.broadcast(b, src=root)
                assert torch.equal(b, torch.full((n,), float(root), dtype=torch.float64).to(dtype)), \
                    f"broadcast n={n} {dtype} from {root} on {ws} ranks"
    y = torch.full((4097,), float(rank + 1))
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    assert torch.equal(y, torch.full((4097,), float(ws)))
    assert_group_works(ws)
    return True


def _everything(rank, ws):
    assert _gather_family(rank, ws) and _allreduce_and_broadcast(rank, ws)
    # The rings would fail this: rank 0's all_gather names recursive doubling or dissemination.
    name = "recursive_doubling" if ws & (ws - 1) == 0 else "dissemination"
    _expect_algorithm(rank, lambda: dist.all_gather_into_tensor(
        torch.empty(ws * 4), torch.ones(4), async_op=True), name,
        f"all_gather_into_tensor on {ws} ranks")
    return True


def _expect_algorithm(rank, start, name, what):
    """Which algorithm ran shows in an operation's description: rank 0 starts one alone
    (`start` returns its Work), which times out with `name` in its message. Last in a job:
    after a timeout the group runs no more collectives."""
    if rank == 0:
        w = start()
        expect_error(lambda: w.wait(timeout=datetime.timedelta(milliseconds=300)), (name,),
                     f"{what} (should be {name})")
    side_barrier("described", 60)


@pytest.mark.ucx_only
@pytest.mark.parametrize("world_size", [3, 4, 5])
def test_logarithmic_algorithms_exact(world_size):
    assert all(run_ranks(_everything, world_size, timeout=240, env=LOG_ALGORITHMS))


def _a2a_block(src, dst, n, dtype):
    """What rank src sends rank dst: exact in every dtype used below."""
    return (torch.arange(n, dtype=torch.int64) % 997 + 1000 * src + 100_000 * dst).to(dtype)


def _bruck_alltoall(rank, ws):
    # Bruck takes small blocks of all_to_all_single without split sizes on CPU tensors; at 3
    # ranks it would take as many steps as pairwise exchange and copy more, so the cost model
    # keeps pairwise there. Equal split sizes and lists of equal tensors stay pairwise (a
    # rank cannot know the others' are equal too) and must arrive all the same.
    for n in (0, 1, 5, 1000):
        for dtype in (torch.float64, torch.int64, torch.float32):
            inp = torch.stack([_a2a_block(rank, d, n, dtype) for d in range(ws)])  # row d: to d
            want = torch.stack([_a2a_block(s, rank, n, dtype) for s in range(ws)])
            what = f"n={n} {dtype} on {ws} ranks"
            # Read from the input and written to the output in place (the direct path)...
            out = torch.full((ws, n), -1, dtype=dtype)
            dist.all_to_all_single(out, inp)
            assert torch.equal(out, want), f"all_to_all_single {what}"
            # ... with equal split sizes given (pairwise)...
            out = torch.full((ws, n), -1, dtype=dtype)
            dist.all_to_all_single(out, inp, output_split_sizes=[1] * ws, input_split_sizes=[1] * ws)
            assert torch.equal(out, want), f"all_to_all_single with equal splits {what}"
            # ... and staged: an output that is not contiguous, and one tensor for both.
            out_t = torch.full((n, ws), -1, dtype=dtype).t()
            dist.all_to_all_single(out_t, inp)
            assert torch.equal(out_t, want), f"all_to_all_single into a transposed output {what}"
            both = inp.clone()
            dist.all_to_all_single(both, both)
            assert torch.equal(both, want), f"all_to_all_single in place {what}"
            # Lists of equal tensors (2-D, so the blocks are flattened rows; pairwise).
            outs = [torch.full((2, n), -1, dtype=dtype) for _ in range(ws)]
            dist.all_to_all(outs, [_a2a_block(rank, d, 2 * n, dtype).view(2, n) for d in range(ws)])
            for s in range(ws):
                assert torch.equal(outs[s], _a2a_block(s, rank, 2 * n, dtype).view(2, n)), \
                    f"all_to_all from {s} {what}"
    # Uneven splits and 256 KiB blocks stay pairwise, and still arrive.
    send = [(rank + d) % 3 for d in range(ws)]
    recv = [(s + rank) % 3 for s in range(ws)]
    out = torch.full((sum(recv),), -1.0, dtype=torch.float64)
    dist.all_to_all_single(out, torch.cat([_a2a_block(rank, d, k, torch.float64) for d, k in enumerate(send)]),
                           output_split_sizes=recv, input_split_sizes=send)
    assert torch.equal(out, torch.cat([_a2a_block(s, rank, k, torch.float64) for s, k in enumerate(recv)]))
    big = 1 << 15
    out = torch.empty(ws * big, dtype=torch.float64)
    dist.all_to_all_single(out, torch.cat([_a2a_block(rank, d, big, torch.float64) for d in range(ws)]))
    assert torch.equal(out, torch.cat([_a2a_block(s, rank, big, torch.float64) for s in range(ws)]))
    assert_group_works(ws)
    _expect_algorithm(rank, lambda: dist.all_to_all_single(
        torch.empty(ws * 4), torch.ones(ws * 4), async_op=True),
        "pairwise" if ws == 3 else "bruck", f"all_to_all_single on {ws} ranks")
    return True


@pytest.mark.ucx_only
@pytest.mark.parametrize("world_size", [3, 4, 5])
def test_bruck_alltoall_exact(world_size):
    assert all(run_ranks(_bruck_alltoall, world_size, timeout=240, env=LOG_ALGORITHMS))
