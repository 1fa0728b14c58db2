"""Process-group initialization through every rendezvous method.

``init_process_group`` hands the backend a store, rank and world size; the
backend then has to exchange its own addressing information (for commux: UCX
worker addresses) through that store.  Each rendezvous method wraps the store
differently (TCPStore, FileStore, PrefixStore around a user store), so every
method is exercised at every supported world size with a collective that
needs all-to-all connectivity.
"""

import pytest
import torch
import torch.distributed as dist

from harness import INIT_METHODS, run_ranks


def _simple_allreduce(rank, world_size):
    t = torch.full((8,), float(rank + 1))
    dist.all_reduce(t)
    expected = world_size * (world_size + 1) / 2
    assert torch.equal(t, torch.full((8,), expected)), (
        f"rank {rank}: allreduce gave {t.tolist()}, expected {expected}"
    )
    # A second, differently sized op over the same connections.
    u = torch.arange(1000, dtype=torch.int64) * (rank + 1)
    dist.all_reduce(u, op=dist.ReduceOp.MAX)
    assert torch.equal(u, torch.arange(1000, dtype=torch.int64) * world_size)
    return dist.get_backend()


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("init", INIT_METHODS)
def test_init_method_allreduce(init, world_size):
    """init via tcp://, file://, env:// and explicit store= works for world
    sizes 1..5 and the resulting group can allreduce."""
    backends = run_ranks(_simple_allreduce, world_size, init=init, timeout=90)
    assert len(set(backends)) == 1, backends
