"""What an operation costs before it communicates: all_reduce of 2 floats in a world of one
rank (a HashStore, no peers), best of 5 blocks of 20,000 calls, in microseconds per call.
Compare two installs in one run (the other first on PYTHONPATH), alternating:

    for i in 1 2 3; do echo "A $(PYTHONPATH=/tmp/oldsite python3 benchmarks/entry_cost.py)" \\
        "B $(python3 benchmarks/entry_cost.py)"; done
"""

import time

import torch
import torch.distributed as dist

import commux

commux.register()
dist.init_process_group("ucx", store=dist.HashStore(), rank=0, world_size=1)
t = torch.ones(2)
for _ in range(2000):
    dist.all_reduce(t)
best = float("inf")
for _ in range(5):
    start = time.perf_counter()
    for _ in range(20000):
        dist.all_reduce(t)
    best = min(best, (time.perf_counter() - start) / 20000 * 1e6)
print(f"{best:.3f}")
dist.destroy_process_group()
