"""A torchrun job whose rank 1 is SIGKILLed in the first attempt (test_restart.py).

torchrun --max-restarts=1 must bring it back on `ucx`: the second attempt shares the
rendezvous store with the first, so it must not read the first attempt's addresses.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import commux

commux.register()
attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
dist.init_process_group("ucx")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.full((1000,), float(rank + 1))
dist.all_reduce(t)
assert t[0].item() == world * (world + 1) / 2
if attempt == 0:
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    # The survivor is blocked on the dead rank until torchrun tears the attempt down.
    try:
        dist.recv(torch.empty(4), src=1)
    except dist.DistBackendError as e:
        print(f"attempt 0 rank {rank}: {e}", flush=True)
    time.sleep(60)  # torchrun stops this attempt and starts the next
    sys.exit(3)
# Second attempt: the whole set of operations works again.
got = torch.empty(4)
if rank == 0:
    dist.send(torch.full((4,), 5.0), dst=1, tag=7)
else:
    dist.recv(got, src=0, tag=7)
    assert got.tolist() == [5.0] * 4
for n in (8, 100_000):
    x = torch.ones(n)
    dist.all_reduce(x)
    assert x[0].item() == world
dist.barrier()
print(f"attempt {attempt} rank {rank}: PASS", flush=True)
dist.destroy_process_group()
