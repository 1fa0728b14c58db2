"""gather and scatter (every root) and all_to_all / all_to_all_single (even and uneven
splits) at world sizes 1-4, checked against what each rank knows the others sent."""

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, run_ranks


def _block(rank, n, salt):
    return torch.arange(n, dtype=torch.float64) + 1000 * rank + 100000 * salt


def _gather_scatter_alltoall(rank, ws):
    for root in range(ws):
        for n in (0, 1, 5, 70_001):
            # gather: root collects everyone's block
            outs = [torch.full((n,), -1.0, dtype=torch.float64) for _ in range(ws)] if rank == root else None
            dist.gather(_block(rank, n, root), gather_list=outs, dst=root)
            if rank == root:
                for r in range(ws):
                    assert torch.equal(outs[r], _block(r, n, root)), f"gather root {root} n={n} block {r}"
            # scatter: root hands out one block per rank
            got = torch.full((n,), -1.0, dtype=torch.float64)
            ins = [_block(r, n, root + 7) for r in range(ws)] if rank == root else None
            dist.scatter(got, scatter_list=ins, src=root)
            assert torch.equal(got, _block(rank, n, root + 7)), f"scatter root {root} n={n}"

    # all_to_all_single, equal splits, 2-D rows
    inp = torch.stack([_block(rank, 3, d) for d in range(ws)])  # row d goes to rank d
    out = torch.empty(ws, 3, dtype=torch.float64)
    dist.all_to_all_single(out, inp)
    for s in range(ws):
        assert torch.equal(out[s], _block(s, 3, rank)), f"all_to_all_single from {s}"
    # uneven splits: rank s sends (s + d) % 3 rows to rank d
    send_splits = [(rank + d) % 3 for d in range(ws)]
    recv_splits = [(s + rank) % 3 for s in range(ws)]
    inp = torch.cat([_block(rank, k, d).repeat(2, 1).t() for d, k in enumerate(send_splits)])
    out = torch.empty(sum(recv_splits), 2, dtype=torch.float64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_splits, input_split_sizes=send_splits)
    want = torch.cat([_block(s, k, rank).repeat(2, 1).t() for s, k in enumerate(recv_splits)])
    assert torch.equal(out, want), "all_to_all_single with uneven splits"
    # all_to_all with lists of different sizes
    ins = [_block(rank, d + 1, d) for d in range(ws)]
    outs = [torch.empty(rank + 1, dtype=torch.float64) for _ in range(ws)]
    dist.all_to_all(outs, ins)
    for s in range(ws):
        assert torch.equal(outs[s], _block(s, rank + 1, rank)), f"all_to_all from {s}"
    # a bad split is a clear error and the group survives
    if ws > 1:
        expect_error(lambda: dist.all_to_all_single(torch.empty(ws), torch.empty(ws),
                                                    output_split_sizes=[1] * ws,
                                                    input_split_sizes=[2] + [1] * (ws - 1)),
                     ["split"], "all_to_all_single with splits that do not add up")
    assert_group_works(ws)
    return True


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_gather_scatter_alltoall(world_size):
    assert all(run_ranks(_gather_scatter_alltoall, world_size, timeout=120))
