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

from harness import INIT_METHODS, forwarding_store, free_port, run_ranks


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


def _peer_record_reads(rank, world_size, port, scratch=None):
    import datetime
    import os

    import commux

    real = dist.TCPStore("127.0.0.1", port, world_size, is_master=(rank == 0),
                         timeout=datetime.timedelta(seconds=60))
    reads = []

    def record(op, keys, values):
        reads.append((op, keys))
        return values

    store = forwarding_store(real, record)  # held here: c10d keeps only the C++ half
    dist.init_process_group("ucx", store=store, rank=rank, world_size=world_size)
    t = torch.ones(4)
    dist.all_reduce(t)
    assert t[0].item() == world_size
    dist.barrier()
    hints = commux.load_extension().ucx_context_hints()
    dist.barrier()  # rank 0 hosts the store: nobody may still need it when it leaves
    dist.destroy_process_group()
    peer_reads = [(op, sum("/peer/" in k for k in keys)) for op, keys in reads]
    expected_eps = int(os.environ.get("WORLD_SIZE") or world_size)
    assert hints["estimated_num_eps"] == expected_eps, hints
    return [r for r in peer_reads if r[1] > 0]


@pytest.mark.ucx_only
@pytest.mark.parametrize("shm", ["0", "1"])
def test_first_collective_reads_peer_records_in_one_request(shm):
    """Every member's record is read before the first collective (each is watched for
    death): all of them in one store request, not one round trip per rank. UCX was told
    the group size as its endpoint estimate (no WORLD_SIZE in the environment here)."""
    world_size = 5
    reads = run_ranks(_peer_record_reads, world_size, timeout=90, init="none",
                      env={"COMMUX_SHM": shm}, port=free_port())
    for rank, got in enumerate(reads):
        assert got == [("multi_get", world_size - 1)], f"rank {rank}: {got}"


def _one_rank_never_joins(rank, world_size, port, scratch=None):
    import datetime

    real = dist.TCPStore("127.0.0.1", port, world_size, is_master=(rank == 0),
                         timeout=datetime.timedelta(seconds=60))
    error = None
    if rank != world_size - 1:
        dist.init_process_group("ucx", store=real, rank=rank, world_size=world_size)
        real.set_timeout(datetime.timedelta(seconds=3))  # the wait for the missing record
        try:
            dist.all_reduce(torch.ones(1))
        except dist.DistStoreError as e:
            error = str(e)
        dist.destroy_process_group()
    real.set_timeout(datetime.timedelta(seconds=60))
    real.add("finished", 1)
    if rank == 0:  # hosts the store: the last to go
        while real.add("finished", 0) < world_size:
            import time

            time.sleep(0.05)
    return error


@pytest.mark.ucx_only
def test_missing_peer_record_names_the_rank():
    """A rank that never creates the group: the others' first collective waits for its
    record (one request for all) and fails after the store timeout naming it, not listing
    every key it waited for."""
    # Without shared memory: its set-up would be the first to wait for the missing rank.
    errors = run_ranks(_one_rank_never_joins, 4, timeout=90, init="none", port=free_port(),
                       env={"COMMUX_SHM": "0"})
    for rank in range(3):
        assert errors[rank] is not None, f"rank {rank}: the allreduce did not fail"
        assert "rank(s) 3 " in errors[rank] and "did every rank create this group" in errors[rank], \
            errors[rank]
