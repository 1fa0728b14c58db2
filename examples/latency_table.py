"""Side-by-side latency of process groups (e.g. commux/UCX vs gloo) measured in the same run.

Two measurements per message size:

* ``p2p`` -- one-way latency from a blocking ``send``/``recv`` ping-pong between group
  ranks 0 and 1: half the median round trip seen by rank 0 (other ranks sit it out);
* ``allreduce`` -- median time of one blocking ``all_reduce`` (SUM) on rank 0.

Medians rather than means, because a shared 2-core machine produces long outliers.
The groups are measured interleaved -- for every size they take turns in short blocks
of iterations -- so slow drift of the machine (other jobs, frequency changes) lands on
all of them alike instead of on whichever happened to run last.  Each (size, group)
pair is warmed up first so connection setup and buffer allocation stay out of the
samples.

examples/demo.py uses it as a module (``latency_table`` and ``format_table``). Run on its
own, it prints the table of commux (``ucx``) against gloo in the same run::

    torchrun --standalone --nproc-per-node=2 examples/latency_table.py [--iters 200]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist

KiB, MiB = 1 << 10, 1 << 20
SIZES_BYTES: dict[str, tuple[int, ...]] = {
    "p2p": (8, 4 * KiB, 1 * MiB),
    "allreduce": (8, 64 * KiB, 1 * MiB),
}
WARMUP = 10  # iterations per (size, group) before timing
BLOCK = 10  # consecutive timed iterations a group gets before the next group's turn


@dataclass
class Row:
    """Latency of one operation at one message size, in microseconds, per group name."""

    op: str
    nbytes: int
    latency_us: dict[str, float]


def _ping_pong(buf: torch.Tensor, group: dist.ProcessGroup) -> float:
    """One round trip rank 0 -> rank 1 -> rank 0; returns its duration in seconds on rank 0."""
    rank = dist.get_rank(group)
    if rank == 0:
        t0 = time.perf_counter()
        dist.send(buf, group=group, group_dst=1)
        dist.recv(buf, group=group, group_src=1)
        return time.perf_counter() - t0
    if rank == 1:
        dist.recv(buf, group=group, group_src=0)
        dist.send(buf, group=group, group_dst=0)
    return 0.0


def _allreduce(buf: torch.Tensor, group: dist.ProcessGroup) -> float:
    """One blocking all_reduce; returns its duration in seconds on this rank."""
    t0 = time.perf_counter()
    dist.all_reduce(buf, group=group)
    return time.perf_counter() - t0


# op name -> (timed call, fraction of its duration reported): a round trip is two one-way trips.
_OPS = {"p2p": (_ping_pong, 0.5), "allreduce": (_allreduce, 1.0)}


def _interleaved_medians(
    groups: Mapping[str, dist.ProcessGroup],
    once: Callable[[torch.Tensor, dist.ProcessGroup], float],
    nbytes: int,
    iters: int,
) -> dict[str, float]:
    """Median of `iters` timings of `once` per group, the groups taking turns every BLOCK iterations.

    Every rank runs the same sequence of calls, so collectives and ping-pong partners line up.
    """
    # float32: supported by every backend for p2p and SUM; zeros: repeated SUMs stay finite.
    bufs = {name: torch.zeros(nbytes // 4, dtype=torch.float32) for name in groups}
    for name, group in groups.items():
        for _ in range(WARMUP):
            once(bufs[name], group)
    samples: dict[str, list[float]] = {name: [] for name in groups}
    for start in range(0, iters, BLOCK):
        for name, group in groups.items():
            samples[name].extend(once(bufs[name], group) for _ in range(min(BLOCK, iters - start)))
    return {name: statistics.median(s) for name, s in samples.items()}


def latency_table(
    groups: Mapping[str, dist.ProcessGroup],
    sizes_bytes: Mapping[str, Sequence[int]] = SIZES_BYTES,
    iters: int = 200,
) -> list[Row]:
    """Measure p2p and allreduce latency for every group, interleaved per size.

    Collective: every rank of the groups calls it; all groups must span the same >= 2 ranks.
    `sizes_bytes` maps "p2p" and/or "allreduce" to message sizes (multiples of 4 bytes).
    Returns the rows on group rank 0 (where the timings are taken) and [] elsewhere.
    """
    if any(dist.get_world_size(g) < 2 for g in groups.values()):
        raise ValueError("latency_table needs groups of at least 2 ranks")
    rows = []
    for op, sizes in sizes_bytes.items():
        once, share = _OPS[op]
        for nbytes in sizes:
            if nbytes <= 0 or nbytes % 4:
                raise ValueError(f"message size must be a positive multiple of 4 bytes, got {nbytes}")
            medians = _interleaved_medians(groups, once, nbytes, iters)
            rows.append(Row(op, nbytes, {name: 1e6 * share * t for name, t in medians.items()}))
    first = next(iter(groups.values()))
    return rows if dist.get_rank(first) == 0 else []


def _format_size(nbytes: int) -> str:
    """8 -> "8 B", 65536 -> "64 KiB", 1048576 -> "1 MiB"."""
    for unit, scale in (("MiB", MiB), ("KiB", KiB)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def format_table(rows: Sequence[Row]) -> str:
    """Render rows as a fixed-width table.

    With exactly two groups a last column gives second/first, i.e. how many times faster
    the first group is (for {"ucx": ..., "gloo": ...} that is the gloo/ucx speedup).
    """
    if not rows:
        return ""
    names = list(rows[0].latency_us)
    header = ["operation", "size"] + [f"{name} us" for name in names]
    if len(names) == 2:
        header.append(f"{names[1]}/{names[0]}")
    lines = []
    for row in rows:
        us = [row.latency_us[name] for name in names]
        cells = [row.op, _format_size(row.nbytes)] + [f"{v:.1f}" for v in us]
        if len(names) == 2:
            cells.append(f"{us[1] / us[0]:.2f}x")
        lines.append(cells)
    widths = [max(len(r[i]) for r in [header, *lines]) for i in range(len(header))]

    def fmt(cells: list[str]) -> str:
        # Left-align the two label columns, right-align the numbers.
        return "  ".join(c.ljust(w) if i < 2 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([fmt(header), fmt(["-" * w for w in widths]), *map(fmt, lines)])


def print_latencies(groups: Mapping[str, dist.ProcessGroup], **kwargs) -> None:
    """Measures `groups` side by side (collective) and prints the table on rank 0."""
    rows = latency_table(groups, **kwargs)
    if dist.get_rank() == 0:
        print("latency (median, rank 0's clock; p2p is one-way = half a round trip):")
        print(format_table(rows), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description="p2p and allreduce latency, commux (ucx) vs gloo, same run")
    parser.add_argument("--iters", type=int, default=200, help="timed iterations per (size, group)")
    args = parser.parse_args()
    import commux  # the "ucx" backend only exists once registered

    commux.register()
    dist.init_process_group(backend="ucx")
    if dist.get_world_size() < 2:
        print("latency_table: needs 2 or more ranks (torchrun --nproc-per-node=2)", file=sys.stderr)
        dist.destroy_process_group()
        return 2
    groups = {"ucx": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    print_latencies(groups, iters=args.iters)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
