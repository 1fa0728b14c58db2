"""The timed loops that run inside every rank: one operation at one size, ucx and gloo
blocks interleaved in the same processes.

Why interleave: the shared 2-core machine drifts by 2x within minutes, so a ucx number
and a gloo number are only comparable when they were taken side by side. For every
(op, size) the backends alternate in blocks (ucx, gloo, ucx, gloo, ...); each block is
a short warm-up, a barrier on the block's own group, then ``k`` timed iterations, and
the time per operation is block time / k. ``k`` is fixed per backend before the first
block (calibration below) so that every block lasts about ``block_seconds`` whatever
the size, and every rank runs exactly the same number of calls (a rank that ran one
more collective than its peers would deadlock).

Ranks time their own blocks; afterwards the per-block times are max-reduced over the
ranks through the gloo group (a collective is done when its slowest rank is done) and
rank 0 reports the median (and minimum) over blocks.

What ``bytes`` means per op is defined in sizes.py (the tensor each rank passes in).
p2p is measured between ranks 0 and 1 at every world size while the other ranks idle in
the next barrier, so at 4 and 8 ranks it also shows what idle peers cost on 2 cores; one
iteration is a round trip and the worker reports half of it (one way).
"""

from __future__ import annotations

import statistics
import time

import torch
import torch.distributed as dist

from .sizes import element_count

# Calibration runs 1, 8, 64, 512 iterations until one run is long enough to time.
_CALIBRATION_GROWTH = 8
_CALIBRATION_MAX_N = 512


def make_op(op: str, nbytes: int, rank: int, world_size: int):
    """One iteration of ``op`` as ``fn(group)``, with its tensors allocated (and touched)
    once here, so the timed loop measures communication and not the allocator."""
    n = element_count(op, nbytes, world_size)

    def full(count: int) -> torch.Tensor:
        # Filled, not torch.empty: pages must be faulted in before timing starts.
        # Zeros keep repeated SUMs finite and free of denormals.
        return torch.zeros(count, dtype=torch.float32)

    if op == "p2p":
        buf = full(n)
        if rank == 0:
            def fn(group):
                dist.send(buf, 1, group=group)
                dist.recv(buf, 1, group=group)
        elif rank == 1:
            def fn(group):
                dist.recv(buf, 0, group=group)
                dist.send(buf, 0, group=group)
        else:
            def fn(group):
                pass
        return fn
    if op == "allreduce":
        buf = full(n)
        return lambda group: dist.all_reduce(buf, op=dist.ReduceOp.SUM, group=group)
    if op == "allgather":
        inp, out = full(n), full(n * world_size)
        return lambda group: dist.all_gather_into_tensor(out, inp, group=group)
    if op == "reduce_scatter":
        inp, out = full(n), full(n // world_size)
        return lambda group: dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM, group=group)
    if op == "broadcast":
        buf = full(n)
        return lambda group: dist.broadcast(buf, 0, group=group)
    if op == "alltoall":
        inp, out = full(n), full(n)
        return lambda group: dist.all_to_all_single(out, inp, group=group)
    raise ValueError(f"unknown op {op!r}")


class TorchSync:
    """Barriers on each block's own group, and the max over ranks through ``ctrl``."""

    def __init__(self, ctrl):
        self.ctrl = ctrl

    def barrier(self, group) -> None:
        dist.barrier(group=group)

    def max_over_ranks(self, values: torch.Tensor) -> torch.Tensor:
        dist.all_reduce(values, op=dist.ReduceOp.MAX, group=self.ctrl)
        return values


def _timed(fn, group, iterations: int, sync) -> float:
    sync.barrier(group)
    t0 = time.perf_counter()
    for _ in range(iterations):
        fn(group)
    return time.perf_counter() - t0


def calibrate(fn, group, sync, block_seconds: float, max_iters: int) -> tuple[int, int]:
    """(k, warm-up) for one backend: timed iterations per block, and untimed ones before.

    The first call is untimed (it may connect endpoints and allocate staging buffers).
    Runs of 1, 8, 64, 512 iterations follow until one lasts block_seconds/4; the
    slowest rank's time decides, through ``sync``, so every rank picks the same k.
    A point whose single iteration already exceeds the block gets no warm-up at all:
    at 256 MiB one more iteration per block would double the run for nothing.
    """
    fn(group)
    n = 1
    while True:
        t = sync.max_over_ranks(torch.tensor([_timed(fn, group, n, sync)], dtype=torch.float64)).item()
        if t >= block_seconds / 4 or n >= _CALIBRATION_MAX_N:
            break
        n *= _CALIBRATION_GROWTH
    per_iter = max(t / n, 1e-9)
    k = int(min(max(round(block_seconds / per_iter), 1), max_iters))
    warmup = 0 if per_iter >= block_seconds else min(max(k // 10, 1), 10)
    return k, warmup


def measure_point(fn, groups: dict, ctrl, rounds: int, block_seconds: float, max_iters: int,
                  on_block=None, sync=None) -> dict:
    """Interleaved blocks of ``fn`` on every group in ``groups`` (name -> group).
    ``sync`` (default: TorchSync(ctrl)) supplies the barriers and the max over ranks; the
    MPI peer passes its own.

    Returns, on every rank, name -> {median_s, min_s, iterations, blocks, warmup} where
    the times are per operation (per iteration of ``fn``), max over ranks per block.
    ``on_block(backend, round)`` is called before each block (progress/state file).
    """
    sync = sync or TorchSync(ctrl)
    names = list(groups)
    plans = {}
    for name in names:
        if on_block:
            on_block(name, "calibration")
        plans[name] = calibrate(fn, groups[name], sync, block_seconds, max_iters)
    per_op = torch.zeros(len(names), rounds, dtype=torch.float64)
    for r in range(rounds):
        for i, name in enumerate(names):
            if on_block:
                on_block(name, r)
            k, warmup = plans[name]
            for _ in range(warmup):
                fn(groups[name])
            per_op[i, r] = _timed(fn, groups[name], k, sync) / k
    sync.max_over_ranks(per_op)
    return {
        name: {
            "median_s": statistics.median(per_op[i].tolist()),
            "min_s": min(per_op[i].tolist()),
            "iterations": plans[name][0],
            "warmup": plans[name][1],
            "blocks": rounds,
        }
        for i, name in enumerate(names)
    }
