"""One HaloExchange timed alone, for A/B runs of one setting or build against another:
a periodic grid of 2 ranks along the first dimension (the others of size 1, so each rank is
also its own neighbour there), float64 blocks of `cells` per side, one ghost layer.
Rank 0 prints the mean step and how each neighbour's messages travel.

    torchrun --standalone --nproc-per-node=2 benchmarks/halo_ab.py --cells 32 --ndim 3
    COMMUX_SHM_CMA_BYTES=0 torchrun ... (every message through UCX)
"""
import argparse
import time

import torch
import torch.distributed as dist

import commux  # noqa: F401  (registers the backend)
import commux.halo as halo


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cells", type=int, default=32)
    p.add_argument("--ndim", type=int, default=3)
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--warm", type=int, default=200)
    args = p.parse_args()
    dist.init_process_group("ucx")
    grid = halo.CartGrid(dims=[dist.get_world_size()] + [1] * (args.ndim - 1), periodic=True)
    t = torch.rand([args.cells + 2] * args.ndim, dtype=torch.float64)
    ex = halo.HaloExchange(t, 1, grid)
    dist.barrier()
    for _ in range(args.warm):
        ex.start()
        ex.wait()
    start = time.perf_counter()
    for _ in range(args.steps):
        ex.start()
        ex.wait()
    us = (time.perf_counter() - start) / args.steps * 1e6
    if dist.get_rank() == 0:
        print(f"cells {args.cells} ndim {args.ndim}: {us:.1f} us a step; shared {ex.sharing()}, "
              f"packed {ex.packing()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
