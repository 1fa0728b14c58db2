"""``python3 -m commux.bench.halo_overlap``: what overlapping the halo exchange with the
stencil's compute buys, per step of a 2-D 5-point heat stencil (float64, two buffers, a
periodic grid chosen as MPI_Dims_create would), all through commux.halo:

  compute only   the update of every cell, no exchange (the floor of a step)
  ..., split     the same as the overlapped ways compute it: the inner cells, then the rim
                 strips (their floor: torch's kernels run at other speeds on the pieces)
  sequential     exchange the ghost cells, then update every cell
  overlap        start the exchange, update the cells that need no ghost cell, wait, update
                 the rim (the classic isend/irecv overlap)
  partitioned    the next buffer's exchange started receives-only; its rim updated first,
                 each face marked ready() as soon as it is computed; then the rest; wait

All three with an exchange reach the same values (checked before timing). Run as it is, it
launches itself per world size (``--mpi``: under mpirun, which binds each rank to a core;
else torchrun, which binds nothing):

    python3 -m commux.bench.halo_overlap --ranks 2,4 --mpi --sizes 256,1024,2048

Prints, on rank 0, the median over blocks of the max over ranks of the mean step time, and
each way's ratio to the sequential one (below 1: the overlap paid).
"""

from __future__ import annotations

import argparse
import os
import sys

from .halo import launch_worlds, time_ways

if "OMPI_COMM_WORLD_SIZE" in os.environ:  # started by mpirun: torch's ranks from it
    os.environ.setdefault("RANK", os.environ["OMPI_COMM_WORLD_RANK"])
    os.environ.setdefault("WORLD_SIZE", os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import commux.halo as halo  # noqa: E402

ALPHA = 0.1
WAYS = [("compute", "compute only"), ("split", "compute only, split"),
        ("sequential", "sequential"), ("overlap", "overlap"), ("partitioned", "partitioned")]


def update(src, dst, rows, cols):
    """dst's cells rows x cols (interior coordinates, ghost layer at 0 and n + 1) from src."""
    (r0, r1), (c0, c1) = rows, cols
    c = src[r0:r1, c0:c1]
    lap = (src[r0 - 1:r1 - 1, c0:c1] + src[r0 + 1:r1 + 1, c0:c1]
           + src[r0:r1, c0 - 1:c1 - 1] + src[r0:r1, c0 + 1:c1 + 1] - 4 * c)
    torch.add(c, lap, alpha=ALPHA, out=dst[r0:r1, c0:c1])


class Stencil:
    """Two buffers and an exchange on each; `way` says how a step meets the exchange."""

    def __init__(self, field, grid, tag_base):
        self.a, self.b = field.clone(), field.clone()
        self.ex = {id(self.a): halo.HaloExchange(self.a, 1, grid, tag_base=tag_base),
                   id(self.b): halo.HaloExchange(self.b, 1, grid, tag_base=tag_base + 100)}
        self.n = field.shape[0] - 2
        self.ex[id(self.a)].exchange()  # the first step's ghost cells
        n = self.n
        self.all = ((1, n + 1), (1, n + 1))
        self.inner = ((2, n), (2, n))
        # The rim, one strip a face, with the face's offset in the grid.
        self.rim = [((-1, 0), ((1, 2), (1, n + 1))), ((1, 0), ((n, n + 1), (1, n + 1))),
                    ((0, -1), ((2, n), (1, 2))), ((0, 1), ((2, n), (n, n + 1)))]

    def swap(self):
        self.a, self.b = self.b, self.a

    def compute(self):
        update(self.a, self.b, *self.all)
        self.swap()

    def split(self):
        update(self.a, self.b, *self.inner)
        for _, (rows, cols) in self.rim:
            update(self.a, self.b, rows, cols)
        self.swap()

    def sequential(self):
        self.ex[id(self.a)].exchange()
        update(self.a, self.b, *self.all)
        self.swap()

    def overlap(self):
        ex = self.ex[id(self.a)]
        ex.start()
        update(self.a, self.b, *self.inner)
        ex.wait()
        for _, (rows, cols) in self.rim:
            update(self.a, self.b, rows, cols)
        self.swap()

    def partitioned(self):
        # a's ghost cells are this step's (the last step's wait filled them).
        ex = self.ex[id(self.b)]
        ex.start(ready=False)
        faces = set(ex.faces)
        for offset, (rows, cols) in self.rim:
            update(self.a, self.b, rows, cols)
            # A face is the strip and its neighbours' corners: ready once both strips that
            # touch it are done (the rows first, so a column face is ready with its strip).
            if offset in faces:
                ex.ready(offset)
        update(self.a, self.b, *self.inner)
        ex.wait()
        self.swap()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", default="256,1024,2048", help="cells per side of a rank's block")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--block-ms", type=float, default=200.0)
    p.add_argument("--mpi", action="store_true", help="launch under mpirun (ranks bound)")
    p.add_argument("--ranks", default="2,4", help="world sizes to launch")
    p.add_argument("--launch-timeout", type=float, default=1800)
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if "RANK" not in os.environ:
        return launch_worlds("commux.bench.halo_overlap", args.ranks, args.mpi, argv,
                             args.launch_timeout)
    torch.set_num_threads(1)
    dist.init_process_group("ucx")
    rank = dist.get_rank()
    grid = halo.CartGrid(ndim=2, periodic=True)
    if rank == 0:
        print(f"grid {grid.dims}, 5-point stencil, float64, one ghost layer")
        print("| cells per side | " + " | ".join(f"{t} us" for _, t in WAYS) + " | "
              + " | ".join(f"{t} / sequential" for k, t in WAYS if k in ("overlap",
                                                                          "partitioned"))
              + " |")
        print("|---|" + "---|" * (len(WAYS) + 2))
    for n in [int(s) for s in args.sizes.split(",")]:
        torch.manual_seed(rank)
        field = torch.rand(n + 2, n + 2, dtype=torch.float64)
        runs = {k: Stencil(field, grid, 1000 + 1000 * i) for i, (k, _) in enumerate(WAYS)}
        # The three ways with an exchange compute the same values.
        for k in ("sequential", "overlap", "partitioned"):
            for _ in range(3):
                getattr(runs[k], k)()
        want = runs["sequential"].a[1:-1, 1:-1]
        for k in ("overlap", "partitioned"):
            assert torch.equal(runs[k].a[1:-1, 1:-1], want), f"{k} computed other values"
        steps = {k: getattr(runs[k], k) for k, _ in WAYS}
        med, _ = time_ways(steps, args.blocks, args.block_ms, warm=1)
        if rank == 0:
            print(f"| {n} | " + " | ".join(f"{med[k]:.1f}" for k, _ in WAYS) + " | "
                  + " | ".join(f"{med[k] / med['sequential']:.2f}"
                               for k in ("overlap", "partitioned")) + " |", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
