"""Host-aware collectives across namespace "hosts": commux (COMMUX_HIERARCHY as set) beside
Gloo in the same job. Run it through the multi-host harness, once per setting:

    for mode in off leader parallel; do
      COMMUX_HIERARCHY=$mode HIER_BENCH_OUT=/tmp/hier-2x2-$mode.json \\
        scripts/multihost_check.sh --hosts 2 --job benchmarks/hierarchical.py
    done
    python3 benchmarks/hierarchical.py --table /tmp/hier-2x2-*.json   # medians of repeated runs

Each op runs `iters` times after a warm-up; the time per op is the slowest rank's mean.
Buffers are written before timing. Sizes are bytes of float32 per rank: the buffer, the
allgather's output and the reduce-scatter's input (each rank's block is 1/world of it).
`HIER_BENCH_OPS` (comma-separated) and `HIER_BENCH_SIZES` narrow a run.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

SIZES = [8, 64 * 1024, 1 << 20, 16 << 20]
OPS = ["allreduce", "broadcast", "reduce", "allgather", "reduce_scatter", "barrier"]


def iterations(nbytes):
    return 200 if nbytes <= 4096 else 60 if nbytes <= 65536 else 15 if nbytes <= (1 << 20) else 4


def run_job():
    import torch
    import torch.distributed as dist

    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    local = int(os.environ["LOCAL_WORLD_SIZE"])
    dist.init_process_group("ucx")
    # Gloo must be told which interface crosses between the hosts.
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "eth0")
    gloo = dist.new_group(backend="gloo")
    ops = os.environ.get("HIER_BENCH_OPS", ",".join(OPS)).split(",")
    sizes = [int(s) for s in os.environ.get("HIER_BENCH_SIZES", ",".join(map(str, SIZES))).split(",")]
    results = {}
    for name, group in (("ucx", None), ("gloo", gloo)):
        per = results.setdefault(name, {})
        for op in ops:
            for nbytes in sizes if op != "barrier" else [0]:
                t = torch.full((max(nbytes // 4, 1),), float(rank + 1))
                block = torch.full((max(nbytes // 4 // world, 1),), float(rank + 1))
                whole = torch.full((block.numel() * world,), float(rank + 1))
                calls = {
                    "allreduce": lambda: dist.all_reduce(t, group=group),
                    "broadcast": lambda: dist.broadcast(t, src=0, group=group),
                    "reduce": lambda: dist.reduce(t, dst=world - 1, group=group),
                    "allgather": lambda: dist.all_gather_into_tensor(whole, block, group=group),
                    "reduce_scatter": lambda: dist.reduce_scatter_tensor(block, whole, group=group),
                    "barrier": lambda: dist.barrier(group=group),
                }
                call = calls[op]
                for _ in range(3):
                    call()
                n = iterations(nbytes)
                dist.barrier(group=gloo)
                start = time.perf_counter()
                for _ in range(n):
                    call()
                mean = torch.tensor([(time.perf_counter() - start) / n])
                dist.all_reduce(mean, op=dist.ReduceOp.MAX, group=gloo)
                per[f"{op} {nbytes}"] = mean.item() * 1e6
    if rank == 0 and os.environ.get("HIER_BENCH_OUT"):
        with open(os.environ["HIER_BENCH_OUT"], "w") as f:
            json.dump({"mode": os.environ.get("COMMUX_HIERARCHY", "auto"), "world": world,
                       "local": local, "us": results}, f, indent=1)
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    # One write (scripts/multihost_check.sh greps whole lines from a log the host's ranks
    # share; unbuffered print writes the newline apart, and two ranks' lines could merge).
    sys.stdout.flush()
    os.write(1, f"multihost ok rank {rank} host {socket.gethostname()} (benchmark)\n".encode())


def table(paths):
    """One column per mode; several runs of a mode give the median of each point."""
    import statistics

    runs = [json.load(open(p)) for p in paths]
    order = ["off", "leader", "parallel", "auto"]
    modes = sorted({r["mode"] for r in runs}, key=order.index)
    by_mode = {m: [r for r in runs if r["mode"] == m] for m in modes}
    keys = list(runs[0]["us"]["ucx"])
    shape = f'{runs[0]["world"] // runs[0]["local"]} hosts x {runs[0]["local"]} ranks'
    counts = ", ".join(f"{m}: {len(by_mode[m])}" for m in modes)
    print(f"{shape}: us per op (slowest rank's mean; median over runs, {counts})\n")
    head = " | ".join(f"ucx {m}" for m in modes)
    gl = " | ".join(f"gloo ({m} runs)" for m in modes)
    print(f"| op bytes | {head} | {gl} |")
    print("|---" * (1 + 2 * len(modes)) + "|")
    for k in keys:
        med = {(m, b): statistics.median(r["us"][b][k] for r in by_mode[m])
               for m in modes for b in ("ucx", "gloo")}
        u = " | ".join(f"{med[m, 'ucx']:.0f}" for m in modes)
        g = " | ".join(f"{med[m, 'gloo']:.0f}" for m in modes)
        print(f"| {k} | {u} | {g} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--table":
        table(sys.argv[2:])
    else:
        run_job()
