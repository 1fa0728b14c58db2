"""all_gather (list), all_gather_into_tensor, reduce_scatter (list) and
reduce_scatter_tensor at world sizes 1-4, checked against a local reference; the
inputs must come back untouched, bad sizes raise and the group survives."""

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, run_ranks

R = dist.ReduceOp


def _data(rank, n, dtype, salt=0):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    if dtype.is_floating_point:
        return torch.randn(n, generator=g).to(dtype)
    return torch.randint(-50, 50, (n,), generator=g, dtype=dtype)


def _check_summed_block(got, rank, ws, n, dtype, salt, what):
    """``got`` must be this rank's block of the sum over ranks of _data(r, ws * n, salt)."""
    total = sum(_data(r, ws * n, dtype, salt=salt) for r in range(ws))
    want = total[rank * n:(rank + 1) * n]
    if dtype.is_floating_point:
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    else:
        assert torch.equal(got, want), f"{what} n={n}"


def _gather_family(rank, ws):
    for n in (0, 1, 7, 300_001):
        for dtype in (torch.float32, torch.int64):
            mine = _data(rank, n, dtype, salt=n)
            everyone = [_data(r, n, dtype, salt=n) for r in range(ws)]
            # all_gather into a list (outputs are views of a 2-D tensor: contiguous rows)
            outs = [torch.full((n,), -1, dtype=dtype) for _ in range(ws)]
            dist.all_gather(outs, mine)
            for r in range(ws):
                assert torch.equal(outs[r], everyone[r]), f"all_gather n={n} {dtype} block {r}"
            # all_gather_into_tensor, output 2-D
            out = torch.empty(ws, n, dtype=dtype)
            dist.all_gather_into_tensor(out, mine)
            assert torch.equal(out, torch.stack(everyone)), f"all_gather_into_tensor n={n} {dtype}"
            assert torch.equal(mine, _data(rank, n, dtype, salt=n)), "all_gather changed its input"

            # reduce_scatter_tensor: input ws*n, output n
            big = _data(rank, ws * n, dtype, salt=n + 1)
            before = big.clone()
            got = torch.empty(n, dtype=dtype)
            dist.reduce_scatter_tensor(got, big, op=R.SUM)
            _check_summed_block(got, rank, ws, n, dtype, n + 1, "reduce_scatter_tensor")
            assert torch.equal(big, before), "reduce_scatter_tensor changed its input"
            # reduce_scatter with a list input, MAX
            pieces = list(_data(rank, ws * n, dtype, salt=n + 2).chunk(ws)) if n else [
                torch.empty(0, dtype=dtype) for _ in range(ws)]
            got = torch.empty(n, dtype=dtype)
            dist.reduce_scatter(got, pieces, op=R.MAX)
            stacked = torch.stack([_data(r, ws * n, dtype, salt=n + 2) for r in range(ws)])
            want = stacked.max(dim=0).values[rank * n:(rank + 1) * n]
            assert torch.equal(got, want), f"reduce_scatter MAX n={n} {dtype}"
            # In place: the output is this rank's own block of the input (as FSDP's shards
            # are), which must be read before it is written over.
            big = _data(rank, ws * n, dtype, salt=n + 3)
            mine_in = big.view(ws, n)[rank] if n else big[:0]
            dist.reduce_scatter_tensor(mine_in, big, op=R.SUM)
            _check_summed_block(mine_in, rank, ws, n, dtype, n + 3, "in-place reduce_scatter_tensor")
    # AVG (what FSDP2 uses), async
    x = torch.arange(ws * 6, dtype=torch.float64) * (rank + 1)
    out = torch.empty(6, dtype=torch.float64)
    dist.reduce_scatter_tensor(out, x, op=R.AVG, async_op=True).wait()
    want = (torch.arange(ws * 6, dtype=torch.float64) * sum(range(1, ws + 1)) / ws)[rank * 6:(rank + 1) * 6]
    torch.testing.assert_close(out, want)
    # A wrong output size is a clear error, and the group still works afterwards.
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(ws * 3 + 1), torch.ones(3)),
                 ["output", "world size"], "all_gather_into_tensor with a wrong output size")
    assert_group_works(ws)
    return True


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_allgather_and_reduce_scatter(world_size):
    assert all(run_ranks(_gather_family, world_size, timeout=120))
