"""The algorithms for many ranks (recursive doubling and dissemination allgather,
recursive-halving reduce-scatter, Rabenseifner allreduce, scatter+allgather broadcast) over
real UCX. They are chosen from 9 ranks on; COMMUX_LOG_ALGORITHMS_MIN_RANKS=2 and a huge
COMMUX_RING_MIN_BLOCK_BYTES make 3-5 ranks (power of two and not) take them at every size,
with shared memory off so the schedules run. The schedules themselves are checked at up to
4,096 ranks in the simulator (tests/cpp/test_schedules.cpp)."""

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
    # Which algorithm ran shows in an operation's description: rank 0 times out alone in an
    # all_gather, so the test fails if the rings were still chosen. (Last: after a timeout the
    # group runs no more collectives.)
    if rank == 0:
        w = dist.all_gather_into_tensor(torch.empty(ws * 4), torch.ones(4), async_op=True)
        name = "recursive_doubling" if ws & (ws - 1) == 0 else "dissemination"
        expect_error(lambda: w.wait(timeout=datetime.timedelta(milliseconds=300)), (name,),
                     f"all_gather_into_tensor on {ws} ranks (should be {name})")
    side_barrier("described", 60)
    return True


@pytest.mark.ucx_only
@pytest.mark.parametrize("world_size", [3, 4, 5])
def test_logarithmic_algorithms_exact(world_size):
    assert all(run_ranks(_everything, world_size, timeout=240, env=LOG_ALGORITHMS))
