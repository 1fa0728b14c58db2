"""``python3 -m commux.bench.halo``: time per halo exchange, commux.halo.HaloExchange against
the same exchange written by hand (isend/irecv of .contiguous() faces, a tag per direction)
on commux and on gloo, and with --mpi against Open MPI through mpi4py on the same tensors:
MPI_Neighbor_alltoallw with subarray datatypes on a Cartesian communicator, and persistent
MPI_Send_init/MPI_Recv_init of the same datatypes (Startall/Waitall each step). All in one
job, interleaved in blocks so that all see the same machine.

Run as it is, it launches itself once per world size of ``--ranks`` (under ``mpirun`` with
--mpi, which binds each rank to a core, else under ``torchrun``, which binds nothing):

    python3 -m commux.bench.halo --ranks 2,4 --mpi --ndim 2 --sizes 16,64,256,1024

or under a launcher of one's own (benchmarks/halo.py is the same as a script):

    torchrun --standalone --nproc-per-node=4 -m commux.bench.halo --ndim 3 --diagonals
    mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 \
        -x MASTER_PORT=29561 python3 -m commux.bench.halo --mpi --ndim 2

Each rank holds an n^d block (float64) with one ghost layer, on a periodic grid chosen as
MPI_Dims_create would. Prints, on rank 0, the median over blocks of the max over ranks of the
mean time per exchange, and each one's ratio to commux.halo's. ``--ways future`` adds
commux.halo's step ended by blocking on its Work's future (``start().get_future().wait()``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

from .runner import free_port

if "OMPI_COMM_WORLD_SIZE" in os.environ:  # started by mpirun: torch's ranks from it
    if "--mpi" in sys.argv:  # MPI first, as in an MPI program
        from mpi4py import MPI  # noqa: F401
    os.environ.setdefault("RANK", os.environ["OMPI_COMM_WORLD_RANK"])
    os.environ.setdefault("WORLD_SIZE", os.environ["OMPI_COMM_WORLD_SIZE"])
    os.environ.setdefault("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import commux.halo as halo  # noqa: E402


def _subarrays(grid, shape):
    """(dimension, side, face type, ghost type) for each face of a one-ghost-layer block of
    `shape`, as MPI subarray datatypes straight in its memory, dimension by dimension, the
    negative side first."""
    from mpi4py import MPI

    for d in range(grid.ndim):
        for side in (-1, 1):
            sub = [n - 2 for n in shape]
            sub[d] = 1
            inner = [1] * grid.ndim
            ghost = [1] * grid.ndim
            inner[d] = 1 if side < 0 else shape[d] - 2
            ghost[d] = 0 if side < 0 else shape[d] - 1
            yield (d, side, MPI.DOUBLE.Create_subarray(shape, sub, inner).Commit(),
                   MPI.DOUBLE.Create_subarray(shape, sub, ghost).Commit())


def neighbour_alltoallw(grid, field):
    """MPI_Neighbor_alltoallw on a periodic Cartesian communicator of the grid's shape: for
    each dimension the negative then the positive neighbour, a subarray type for each face
    sent and each ghost region received, straight in the tensor's memory."""
    from mpi4py import MPI

    cart = MPI.COMM_WORLD.Create_cart(grid.dims, periods=[True] * grid.ndim, reorder=False)
    array = field.numpy()
    sends, recvs = [], []
    for _, _, face, into in _subarrays(grid, list(array.shape)):
        sends.append(face)
        recvs.append(into)
    k = len(sends)
    spec = ([1] * k, [0] * k)

    def step():
        cart.Neighbor_alltoallw([array, spec, sends], [array, spec, recvs])
    return step


def persistent_p2p(grid, field):
    """Persistent MPI_Send_init/MPI_Recv_init of the same subarray types, one pair per
    direction (a tag per direction, so that one rank as both neighbours, or itself, keeps
    them apart), started with Startall and ended with Waitall each step."""
    from mpi4py import MPI

    cart = MPI.COMM_WORLD.Create_cart(grid.dims, periods=[True] * grid.ndim, reorder=False)
    array = field.numpy()
    requests, types = [], []
    for d, side, face, into in _subarrays(grid, list(array.shape)):
        below, above = cart.Shift(d, 1)  # the neighbours at -1 and +1 in dimension d
        peer = below if side < 0 else above
        types += [face, into]
        travels = 2 * d + (side > 0)  # the face goes towards `side`
        arrives = 2 * d + (side < 0)  # the ghost cells' message came the other way
        requests.append(cart.Recv_init([array, 1, into], peer, arrives))
        requests.append(cart.Send_init([array, 1, face], peer, travels))

    def step():
        MPI.Prequest.Startall(requests)
        MPI.Request.Waitall(requests)
    step.keep = types  # the datatypes live as long as the requests
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


# (key, column title) in table order; each but commux.halo's also gets a ratio column.
_COLUMNS = [("halo", "commux.halo"), ("copy", "one copy"), ("future", "commux.halo via future"),
            ("hand", "by hand (commux)"), ("gloo", "by hand (gloo)"),
            ("mpi", "MPI Neighbor_alltoallw"), ("persistent", "MPI Send_init/Recv_init"),
            ("packed", "all packed"), ("iov", "none packed")]


# The columns by default. `future` blocks on a torch future each step, which is a thread
# wake-up more than wait() (docs/performance.md): what futures are for is chaining work on
# the step's end, not blocking on it.
DEFAULT_WAYS = "copy,hand,gloo,mpi,persistent,packed,iov"


def time_ways(ways: dict, blocks: int, block_ms: float, warm: int):
    """Each way's step time, in us: the median over `blocks` of the max over ranks of the
    mean; and its context switches per step on this rank. Each way gets its own number of
    steps per block (gloo's are a thousand times longer), from its warmed-up speed, and a
    block starts with a few untimed steps, so that what the previous way left (a progress
    thread asleep, cold caches) is not timed; blocks of the ways alternate."""
    iters = {}
    for name, step in ways.items():
        for _ in range(warm):
            step()
        t0 = time.perf_counter()
        for _ in range(max(warm, 3)):
            step()
        once = max((time.perf_counter() - t0) / max(warm, 3), 1e-7)
        count = torch.tensor([max(3, int(block_ms / 1e3 / once))])
        dist.all_reduce(count, op=dist.ReduceOp.MAX)
        iters[name] = int(count)
    times = {k: [] for k in ways}
    switches = {k: [] for k in ways}
    for _ in range(blocks):
        for name, step in ways.items():
            dist.barrier()
            for _ in range(min(iters[name], 50) if warm > 1 else 1):
                step()
            before = _switches()
            t0 = time.perf_counter()
            for _ in range(iters[name]):
                step()
            switches[name].append((_switches() - before) / iters[name])
            mean = torch.tensor([(time.perf_counter() - t0) / iters[name] * 1e6],
                                dtype=torch.float64)
            dist.all_reduce(mean, op=dist.ReduceOp.MAX)
            times[name].append(float(mean))
    return ({k: statistics.median(v) for k, v in times.items()},
            {k: statistics.median(v) for k, v in switches.items()})


def _switches() -> int:
    """Context switches of this process's threads so far (voluntary and involuntary)."""
    import resource

    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_nvcsw + use.ru_nivcsw


def launch_worlds(module: str, ranks: str, mpi: bool, argv: list, timeout: float) -> int:
    """Not under a launcher: `module` once per world size of `ranks`, under mpirun (`mpi`:
    each rank bound to a core) or torchrun (nothing bound), with `argv` less the launch's
    own options (--ranks, --launch-timeout); its table lines printed as they come."""
    keep, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a in ("--ranks", "--launch-timeout"):
            skip = True
        elif not a.startswith(("--ranks=", "--launch-timeout=")):
            keep.append(a)
    for np in [int(n) for n in ranks.split(",")]:
        port = str(free_port())
        if mpi:
            cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(np),
                   "-x", "MASTER_ADDR=127.0.0.1", "-x", f"MASTER_PORT={port}",
                   sys.executable, "-m", module] + keep
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                   f"--nproc-per-node={np}", f"--master-port={port}", "-m", module] + keep
        print(f"== {np} ranks: {' '.join(cmd[:cmd.index(module) + 1])} {' '.join(keep)}",
              flush=True)
        done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=timeout)
        lines = [line for line in done.stdout.splitlines()
                 if line.startswith(("|", "grid", "switches")) or done.returncode]
        print("\n".join(lines), flush=True)
        if done.returncode:
            return done.returncode
    return 0


def main(argv=None):
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
                   help="also Open MPI: Neighbor_alltoallw and persistent Send_init/Recv_init "
                        "(faces only; ranks started by mpirun)")
    p.add_argument("--ways", default=None,
                   help=f"these columns (commux.halo's always; default {DEFAULT_WAYS}; also "
                        "future: each step ended by blocking on its Work's future)")
    p.add_argument("--switches", action="store_true",
                   help="also print each way's context switches per step on rank 0 (its "
                        "threads, voluntary and involuntary: getrusage)")
    p.add_argument("--ranks", default="2,4",
                   help="world sizes to launch, when not started by a launcher")
    p.add_argument("--launch-timeout", type=float, default=1800,
                   help="seconds for one world size's run, when it launches them")
    argv = sys.argv[1:] if argv is None else argv
    args = p.parse_args(argv)
    if args.mpi and args.diagonals:
        p.error("--mpi: a Cartesian communicator's neighbourhood has the faces only")
    if "RANK" not in os.environ:
        return launch_worlds("commux.bench.halo", args.ranks, args.mpi, argv,
                             args.launch_timeout)
    dist.init_process_group("ucx")
    gloo = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    # Each rank alone in a group: the same exchange there copies every face into this
    # rank's own ghost cells, the floor of "one memory copy of the halo".
    alone = None
    for r in range(dist.get_world_size()):
        g = dist.new_group([r])
        if r == rank:
            alone = g
    dims = [int(d) for d in args.dims.split(",")] if args.dims else None
    grid = halo.CartGrid(dims=dims, ndim=args.ndim, periodic=True, diagonals=args.diagonals)
    columns = [(k, t) for k, t in _COLUMNS
               if (k not in ("mpi", "persistent") or args.mpi)
               and (k not in ("packed", "iov") or args.packing)
               and (k == "halo" or k in (args.ways or DEFAULT_WAYS).split(","))]
    if rank == 0:
        print(f"grid {grid.dims}, {'27/9' if args.diagonals else 'face'} neighbours, float64")
        print("| cells per side | halo bytes per rank | "
              + " | ".join(f"{t} us" for _, t in columns) + " | "
              + " | ".join(f"{t} / halo" for k, t in columns if k != "halo") + " |")
        print("|---|---|" + "---|" * (2 * len(columns) - 1))
    for n in [int(s) for s in args.sizes.split(",")]:
        if n ** args.ndim > 64 << 20:
            continue
        field = torch.rand([n + 2] * args.ndim, dtype=torch.float64)
        ex = halo.HaloExchange(field, 1, grid)
        by_itself = halo.CartGrid(dims=[1] * args.ndim, periodic=True,
                                  diagonals=args.diagonals, group=alone)
        ways = {"halo": ex.exchange,
                "copy": halo.HaloExchange(field, 1, by_itself).exchange,
                "future": lambda ex=ex: ex.start().get_future().wait(),
                "hand": by_hand(grid, field, None, lambda r: r),
                "gloo": by_hand(grid, field, gloo, lambda r: r)}
        if args.packing:
            ways["packed"] = halo.HaloExchange(field, 1, grid, pack_below=1 << 40).exchange
            ways["iov"] = halo.HaloExchange(field, 1, grid, pack_below=0).exchange
        if args.mpi:
            ways["mpi"] = neighbour_alltoallw(grid, field)
            ways["persistent"] = persistent_p2p(grid, field)
            # Each must fill the same ghost cells: the faces' (not the corners, which none
            # exchanges) after MPI's steps equal those after commux's.
            ex.exchange()
            ghosts = [halo._box(field.shape, [1] * grid.ndim, nb.offset, ghost=True)
                      for nb in grid.neighbours]
            want = [field[g].clone() for g in ghosts]
            for way in ("mpi", "persistent"):
                for g in ghosts:
                    field[g] = -1.0
                ways[way]()
                assert all(torch.equal(field[g], w) for g, w in zip(ghosts, want)), \
                    f"{way} filled other ghost cells than commux.halo"
        ways = {k: w for k, w in ways.items() if k in dict(columns)}
        med, switches = time_ways(ways, args.blocks, args.block_ms, warm=20)
        halo_bytes = sum(field[tuple(slice(1, 2) if o else slice(1, n + 1) for o in nb.offset)]
                         .numel() * 8 for nb in grid.neighbours if nb.rank >= 0)
        if rank == 0:
            print(f"| {n} | {halo_bytes} | " + " | ".join(f"{med[k]:.1f}" for k, _ in columns)
                  + " | " + " | ".join(f"{med[k] / med['halo']:.2f}" for k, _ in columns
                                       if k != "halo") + " |", flush=True)
            if args.switches:
                print(f"switches per step on rank 0, {n} cells per side: " + ", ".join(
                    f"{k} {switches[k]:.2f}" for k, _ in columns), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
