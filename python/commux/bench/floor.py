"""Floors measured inside a rank: what torch.distributed itself costs per p2p call, and
how fast this machine copies memory.

* ``fake_p2p_us``: one ``dist.send`` and one ``dist.recv`` of an 8-byte tensor through
  torch's *fake* backend, which returns at once without communicating. What remains is
  torch.distributed's Python and dispatch layer, which commux cannot avoid; added to
  ``ucx_perftest``'s one-way tag latency it gives the lowest one-way p2p time a c10d
  backend on top of UCX could reach here.
* ``memcpy_gbps``: ``dst.copy_(src)`` of large uint8 tensors, one thread (the ranks run
  with OMP_NUM_THREADS=1 as well). A ring allreduce makes every rank receive
  2(p-1)/p*N bytes and reduce (p-1)/p*N, about 3(p-1)/p*N bytes of copy-like work, so
  ``3(p-1)/p*N / memcpy rate`` is the bound large allreduces are compared against.

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


def standalone_fake_p2p_us() -> dict:
    """``fake_p2p_us`` in a fresh single-process fake world (rank 0 of 2)."""
    _register_fake_backend()
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=2)
    try:
        return fake_p2p_us()
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(json.dumps(standalone_fake_p2p_us()))
    sys.exit(0)
