"""Floors measured inside a rank: what torch.distributed itself costs per call, how fast
this machine copies memory, and the floor per (op, ranks, bytes) built from them.

* ``fake_p2p_us``: one ``dist.send`` and one ``dist.recv`` of an 8-byte tensor through
  torch's *fake* backend, which returns at once without communicating. What remains is
  torch.distributed's Python and dispatch layer, which commux cannot avoid; added to
  ``ucx_perftest``'s one-way tag latency it gives the lowest one-way p2p time a c10d
  backend on top of UCX could reach here.
* ``fake_ops_us``: the same for one call of each collective the bench times
  (all_reduce, broadcast, all_gather_into_tensor, reduce_scatter_tensor,
  all_to_all_single) on tensors shaped like the bench's smallest point.
* ``memcpy_gbps``: ``dst.copy_(src)`` of large uint8 tensors, one thread (the ranks run
  with OMP_NUM_THREADS=1 as well). A ring allreduce makes every rank receive
  2(p-1)/p*N bytes and reduce (p-1)/p*N, about 3(p-1)/p*N bytes of copy-like work, so
  ``3(p-1)/p*N / memcpy rate`` is the bound large allreduces are compared against.

floor_model.py turns those into the table's "floor" column.

Run as ``python -m commux.bench.floor`` it prints the fake-backend numbers as JSON from a
single-process fake world (FakeStore), the fallback for when a fake subgroup cannot be
created inside the ucx world.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

import torch
import torch.distributed as dist

_FAKE_CALLS = 2000
_FAKE_BLOCKS = 7
_MEMCPY_REPEATS = 7


def _register_fake_backend() -> None:
    # Importing the module registers backend "fake" with torch.distributed.
    import torch.testing._internal.distributed.fake_pg  # noqa: F401


def fake_group():
    """A fake-backend subgroup of the current world (collective: every rank calls it)."""
    _register_fake_backend()
    return dist.new_group(backend="fake")


def fake_p2p_us(group=None) -> dict:
    """Median per-call microseconds of send and of recv (8 bytes) on a fake group."""
    t = torch.zeros(2, dtype=torch.float32)
    for _ in range(100):
        dist.send(t, 1, group=group)
        dist.recv(t, 1, group=group)
    send, recv = [], []
    for _ in range(_FAKE_BLOCKS):
        t0 = time.perf_counter()
        for _ in range(_FAKE_CALLS):
            dist.send(t, 1, group=group)
        t1 = time.perf_counter()
        for _ in range(_FAKE_CALLS):
            dist.recv(t, 1, group=group)
        t2 = time.perf_counter()
        send.append((t1 - t0) / _FAKE_CALLS * 1e6)
        recv.append((t2 - t1) / _FAKE_CALLS * 1e6)
    return {"fake_send_us": statistics.median(send), "fake_recv_us": statistics.median(recv)}


def _fake_calls(world_size: int, group) -> dict:
    """op -> one call on tensors of the bench's smallest point (one float per rank)."""
    t, out = torch.zeros(world_size), torch.zeros(world_size * world_size)
    one, a2a = torch.zeros(1), torch.zeros(world_size)
    return {
        "allreduce": lambda: dist.all_reduce(t, group=group),
        "broadcast": lambda: dist.broadcast(t, 0, group=group),
        "allgather": lambda: dist.all_gather_into_tensor(out, t, group=group),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(one, t, group=group),
        "alltoall": lambda: dist.all_to_all_single(a2a, t, group=group),
    }


def fake_ops_us(group=None) -> dict:
    """Median per-call microseconds of each collective on a fake group:
    {"fake_allreduce_us": ..., ...}."""
    result = {}
    for op, call in _fake_calls(dist.get_world_size(group), group).items():
        for _ in range(100):
            call()
        blocks = []
        for _ in range(_FAKE_BLOCKS):
            t0 = time.perf_counter()
            for _ in range(_FAKE_CALLS):
                call()
            blocks.append((time.perf_counter() - t0) / _FAKE_CALLS * 1e6)
        result[f"fake_{op}_us"] = statistics.median(blocks)
    return result


def memcpy_gbps(nbytes: int) -> float:
    """Median rate of ``dst.copy_(src)`` in 10**9 bytes (copied) per second."""
    src = torch.ones(nbytes, dtype=torch.uint8)
    dst = torch.zeros(nbytes, dtype=torch.uint8)
    dst.copy_(src)
    times = []
    for _ in range(_MEMCPY_REPEATS):
        t0 = time.perf_counter()
        dst.copy_(src)
        times.append(time.perf_counter() - t0)
    return nbytes / statistics.median(times) / 1e9


def standalone_fake_us(world_size: int = 2) -> dict:
    """``fake_p2p_us`` and ``fake_ops_us`` in a fresh single-process fake world (rank 0 of
    ``world_size``)."""
    _register_fake_backend()
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=world_size)
    try:
        return dict(fake_p2p_us(), **fake_ops_us())
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(standalone_fake_us(int(sys.argv[1]) if len(sys.argv) > 1 else 2)))
    sys.exit(0)
