"""Time per halo exchange: commux.halo.HaloExchange against the same exchange written by hand
(isend/irecv of .contiguous() faces, a tag per direction) on commux and on gloo, and with
--mpi against Open MPI's MPI_Neighbor_alltoallw with subarray datatypes on a Cartesian
communicator (mpi4py, on the same tensors), in one job, interleaved in blocks so that all
see the same machine.

    torchrun --standalone --nproc-per-node=4 benchmarks/halo.py --ndim 2 --sizes 64,256,1024
    mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 \
        -x MASTER_PORT=29561 python3 benchmarks/halo.py --mpi --ndim 2

Each rank holds an n^d block (float64) with one ghost layer, on a periodic grid chosen as
MPI_Dims_create would. Prints, on rank 0, the median over blocks of the max over ranks of the
mean time per exchange, and each one's ratio to commux.halo's.
"""

import argparse
import os
import statistics
import sys
import time

if "--mpi" in sys.argv:  # MPI first, as in an MPI program; torch's ranks from it
    from mpi4py import MPI

    os.environ.setdefault("RANK", str(MPI.COMM_WORLD.Get_rank()))
    os.environ.setdefault("WORLD_SIZE", str(MPI.COMM_WORLD.Get_size()))
    os.environ.setdefault("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import commux.halo as halo  # noqa: E402


def neighbour_alltoallw(grid, field):
    """MPI_Neighbor_alltoallw on a periodic Cartesian communicator of the grid's shape: for
    each dimension the negative then the positive neighbour, a subarray type for each face
    sent and each ghost region received, straight in the tensor's memory."""
    from mpi4py import MPI

    cart = MPI.COMM_WORLD.Create_cart(grid.dims, periods=[True] * grid.ndim, reorder=False)
    array = field.numpy()
    shape = list(array.shape)
    sends, recvs = [], []
    for d in range(grid.ndim):
        for side in (-1, 1):
            sub = [n - 2 for n in shape]
            sub[d] = 1
            inner = [1] * grid.ndim
            ghost = [1] * grid.ndim
            inner[d] = 1 if side < 0 else shape[d] - 2
            ghost[d] = 0 if side < 0 else shape[d] - 1
            sends.append(MPI.DOUBLE.Create_subarray(shape, sub, inner).Commit())
            recvs.append(MPI.DOUBLE.Create_subarray(shape, sub, ghost).Commit())
    k = len(sends)
    spec = ([1] * k, [0] * k)

    def step():
        cart.Neighbor_alltoallw([array, spec, sends], [array, spec, recvs])
    return step


def by_hand(grid, field, group, peer_of):
    """What a stencil code writes today: slice, .contiguous(), post, wait, copy back."""
    faces = [nb for nb in grid.neighbours if nb.rank >= 0 and nb.rank != grid.rank]
    # This rank as its own neighbour (periodic size 1): a copy, as such codes do it.
    own = [nb for nb in grid.neighbours if nb.rank == grid.rank]

    # One ghost layer: the slices a hand-written code writes inline, computed once here.
    boxes = {(nb.offset, g): halo._box(field.shape, [1] * grid.ndim, nb.offset, g)
             for nb in grid.neighbours for g in (False, True)}
    boxes.update({(tuple(-o for o in nb.offset), False):
                  halo._box(field.shape, [1] * grid.ndim, tuple(-o for o in nb.offset), False)
                  for nb in own})

    def box(offset, ghost):
        return boxes[tuple(offset), ghost]

    def step():
        inbox, works = [], []
        for nb in faces:
            buf = torch.empty_like(field[box(nb.offset, True)])
            inbox.append((nb, buf))
            works.append(dist.irecv(buf, peer_of(nb.rank), group=group, tag=100 + nb.opposite))
        for nb in faces:
            works.append(dist.isend(field[box(nb.offset, False)].contiguous(), peer_of(nb.rank),
                                    group=group, tag=100 + nb.direction))
        for w in works:
            w.wait()
        for nb, buf in inbox:
            field[box(nb.offset, True)] = buf
        for nb in own:
            field[box(nb.offset, True)] = field[box(tuple(-o for o in nb.offset), False)]
    return step


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ndim", type=int, default=2)
    p.add_argument("--sizes", default="16,64,256,1024", help="cells per side of a rank's block")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--block-ms", type=float, default=60.0)
    p.add_argument("--diagonals", action="store_true")
    p.add_argument("--dims", default=None,
                   help="the process grid, e.g. 1,2 (default: chosen as MPI_Dims_create)")
    p.add_argument("--packing", action="store_true",
                   help="also time commux.halo with every face packed and with none packed "
                        "(the default chooses by piece size)")
    p.add_argument("--mpi", action="store_true",
                   help="also MPI_Neighbor_alltoallw (start under mpirun; faces only)")
    args = p.parse_args()
    if args.mpi and args.diagonals:
        p.error("--mpi: a Cartesian communicator's neighbourhood has the faces only")
    dist.init_process_group("ucx")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    dims = [int(d) for d in args.dims.split(",")] if args.dims else None
    grid = halo.CartGrid(dims=dims, ndim=args.ndim, periodic=True, diagonals=args.diagonals)
    if rank == 0:
        print(f"grid {grid.dims}, {'27/9' if args.diagonals else 'face'} neighbours, float64")
        mpi_cols = (" MPI Neighbor_alltoallw us |", " MPI / halo |") if args.mpi else ("", "")
        pack_cols = " all packed us | none packed us |" if args.packing else ""
        print("| cells per side | halo bytes per rank | commux.halo us | by hand (commux) us | "
              f"by hand (gloo) us |{mpi_cols[0]}{pack_cols} by hand commux / halo | gloo / halo |"
              f"{mpi_cols[1]}")
        print("|---|---|---|---|---|---|---|" + ("---|---|" if args.mpi else "")
              + ("---|---|" if args.packing else ""))
    for n in [int(s) for s in args.sizes.split(",")]:
        if n ** args.ndim > 64 << 20:
            continue
        field = torch.rand([n + 2] * args.ndim, dtype=torch.float64)
        ex = halo.HaloExchange(field, 1, grid)
        ways = {"halo": ex.exchange,
                "hand": by_hand(grid, field, None, lambda r: r),
                "gloo": by_hand(grid, field, gloo, lambda r: r)}
        if args.packing:
            ways["packed"] = halo.HaloExchange(field, 1, grid, pack_below=1 << 40).exchange
            ways["iov"] = halo.HaloExchange(field, 1, grid, pack_below=0).exchange
        if args.mpi:
            ways["mpi"] = neighbour_alltoallw(grid, field)
            # Both must fill the same ghost cells: the faces' (not the corners, which neither
            # exchanges) after MPI's step equal those after commux's.
            ex.exchange()
            ghosts = [halo._box(field.shape, [1] * grid.ndim, nb.offset, ghost=True)
                      for nb in grid.neighbours]
            want = [field[g].clone() for g in ghosts]
            for g in ghosts:
                field[g] = -1.0
            ways["mpi"]()
            assert all(torch.equal(field[g], w) for g, w in zip(ghosts, want)), \
                "MPI_Neighbor_alltoallw filled other ghost cells than commux.halo"
        # Each way its own number of steps per block (gloo's are a thousand times longer),
        # from its warmed-up speed; a block starts with a few untimed steps, so that what
        # the previous way left (a progress thread asleep, cold caches) is not timed.
        iters = {}
        for name, step in ways.items():
            for _ in range(20):
                step()
            t0 = time.perf_counter()
            for _ in range(20):
                step()
            once = max((time.perf_counter() - t0) / 20, 1e-7)
            count = torch.tensor([max(3, int(args.block_ms / 1e3 / once))])
            dist.all_reduce(count, op=dist.ReduceOp.MAX)
            iters[name] = int(count)
        times = {k: [] for k in ways}
        for _ in range(args.blocks):
            for name, step in ways.items():
                dist.barrier()
                for _ in range(min(iters[name], 50)):
                    step()
                t0 = time.perf_counter()
                for _ in range(iters[name]):
                    step()
                mean = torch.tensor([(time.perf_counter() - t0) / iters[name] * 1e6],
                                    dtype=torch.float64)
                dist.all_reduce(mean, op=dist.ReduceOp.MAX)
                times[name].append(float(mean))
        med = {k: statistics.median(v) for k, v in times.items()}
        halo_bytes = sum(field[tuple(slice(1, 2) if o else slice(1, n + 1) for o in nb.offset)]
                         .numel() * 8 for nb in grid.neighbours if nb.rank >= 0)
        if rank == 0:
            mpi = (f" {med['mpi']:.1f} |", f" {med['mpi'] / med['halo']:.2f} |") if args.mpi \
                else ("", "")
            pack = f" {med['packed']:.1f} | {med['iov']:.1f} |" if args.packing else ""
            print(f"| {n} | {halo_bytes} | {med['halo']:.1f} | {med['hand']:.1f} | "
                  f"{med['gloo']:.1f} |{mpi[0]}{pack} {med['hand'] / med['halo']:.2f} | "
                  f"{med['gloo'] / med['halo']:.2f} |{mpi[1]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
