"""What an operation costs before it communicates, in a world of one rank (a HashStore, no
peers), best of 5 blocks of 20,000 calls, in microseconds per call:
  --op all_reduce   all_reduce of 2 floats (default);
  --op p2p          an irecv and an isend of 2 floats to this rank itself, both waited for
                    (the point-to-point path's own cost: tensors to buffers, the operation,
                    the Work, UCX's loopback).
Compare two installs in one run (the other first on PYTHONPATH), alternating:

    for i in 1 2 3; do echo "A $(PYTHONPATH=/tmp/oldsite python3 benchmarks/entry_cost.py)" \\
        "B $(python3 benchmarks/entry_cost.py)"; done
"""

import argparse
import time

import torch
import torch.distributed as dist

import commux

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--op", choices=["all_reduce", "p2p"], default="all_reduce")
ap.add_argument("--calls", type=int, default=20000)
args = ap.parse_args()

commux.register()
dist.init_process_group("ucx", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(2)
r = torch.empty(2)
pg = dist.group.WORLD


def once():
    if args.op == "all_reduce":
        dist.all_reduce(t)
    else:
        # Through the group itself: torch.distributed refuses a send to oneself.
        receive = pg.recv([r], 0, 3)
        pg.send([t], 0, 3).wait()
        receive.wait()


for _ in range(2000):
    once()
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    for _ in range(args.calls):
        once()
    best = min(best, (time.perf_counter() - start) / args.calls * 1e6)
print(f"{best:.3f}")
dist.destroy_process_group()
