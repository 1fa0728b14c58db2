"""all_reduce_coalesced: every tensor of the list is reduced on its own (unlike the
legacy multi-tensor all_reduce), in one collective, with mixed shapes."""

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, run_ranks


def _coalesced(rank, ws):
    shapes = [(3,), (2, 5), (0,), (1000,)]
    tensors = [torch.full(s, float(rank + 1 + i)) for i, s in enumerate(shapes)]
    dist.all_reduce_coalesced(tensors, op=dist.ReduceOp.SUM)
    for i, (s, t) in enumerate(zip(shapes, tensors)):
        want = torch.full(s, float(sum(r + 1 + i for r in range(ws))))
        assert torch.equal(t, want), f"tensor {i} of shape {s}"
    avg = [torch.full((4,), float(rank)), torch.full((2, 2), 2.0 * rank)]
    dist.all_reduce_coalesced(avg, op=dist.ReduceOp.AVG)
    mean = sum(range(ws)) / ws
    assert torch.allclose(avg[0], torch.full((4,), mean)) and torch.allclose(avg[1], torch.full((2, 2), 2 * mean))
    # A reduction needs one dtype (as gloo): a mix is a clear error, and the group goes on.
    mixed = [torch.ones(2), torch.ones(2, dtype=torch.float64)]
    expect_error(lambda: dist.all_reduce_coalesced(mixed), ("dtype",),
                 "all_reduce_coalesced of float32 and float64")
    again = [torch.ones(2)]
    dist.all_reduce_coalesced(again)
    assert torch.equal(again[0], torch.full((2,), float(ws)))
    return True


@pytest.mark.parametrize("world_size", [1, 3])
def test_allreduce_coalesced(world_size):
    assert all(run_ranks(_coalesced, world_size, timeout=90))
