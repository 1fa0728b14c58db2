"""One 2-rank shared-memory collective in blocks, for COMMUX_SHM_STREAM comparisons: the
inputs alternate between two random tensors (the slots never see the same bytes twice in a
row), and rank 0 prints each block's time per call. Alternate launches with the settings
compared; the machine's slow stretches last seconds, so only neighbouring launches compare.

    for m in off auto; do OP=alltoall NBYTES=4194304 COMMUX_SHM_STREAM=$m \\
        torchrun --standalone --nproc-per-node=2 benchmarks/shm_stream_ab.py; done
"""

import os
import time

import torch
import torch.distributed as dist

import commux  # noqa: F401  (registers the backend)


def main() -> None:
    dist.init_process_group("ucx")
    rank, ws = dist.get_rank(), dist.get_world_size()
    n = int(os.environ.get("NBYTES", 4 << 20))
    op = os.environ.get("OP", "alltoall")
    g = torch.Generator().manual_seed(rank)
    xs = [torch.rand(n // 4, generator=g) for _ in range(2)]
    y = torch.empty(n // 4 * (ws if op == "allgather" else 1))

    def call(i):
        if op == "alltoall":
            dist.all_to_all_single(y, xs[i % 2])
        elif op == "allgather":
            dist.all_gather_into_tensor(y, xs[i % 2])
        else:
            dist.all_reduce(xs[i % 2])

    for i in range(30):
        call(i)
    times = []
    for _ in range(int(os.environ.get("BLOCKS", 6))):
        dist.barrier()
        t = time.perf_counter()
        for i in range(100):
            call(i)
        times.append((time.perf_counter() - t) / 100 * 1e6)
    if rank == 0:
        mode = os.environ.get("COMMUX_SHM_STREAM", "auto")
        print(f"{mode:4s} {op} {n}", " ".join(f"{v:.0f}" for v in times), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
