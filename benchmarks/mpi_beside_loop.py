"""commux and mpi4py (on the same torch tensors) in the same processes, alternating blocks of
one operation: the A/B for a single point when commux.bench's 50 ms blocks are too short.

    mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 \\
        -x MASTER_PORT=29555 python3 benchmarks/mpi_beside_loop.py --op broadcast --bytes 8

The operations and their sizes are commux.bench's (measure.make_op, mpi_ops.make_op); a p2p
call is a round trip between ranks 0 and 1.
Prints, on rank 0, each backend's median block (the max over ranks) and mpi4py / commux.
MPI starts first, as in an MPI program; commux then starts the ucx default group.
"""

import argparse
import os
import statistics
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
os.environ.setdefault("RANK", str(comm.Get_rank()))
os.environ.setdefault("WORLD_SIZE", str(comm.Get_size()))
os.environ.setdefault("LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", "0"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

import commux  # noqa: E402,F401  (registers the backend)
from commux.bench import measure, mpi_ops, sizes  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="broadcast", choices=sizes.OPS)
    p.add_argument("--bytes", type=int, default=8, help="bytes per rank's input tensor (float32)")
    p.add_argument("--iters", type=int, default=3000, help="calls per block")
    p.add_argument("--blocks", type=int, default=6, help="blocks per backend, alternating")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("ucx")
    rank, ws = comm.Get_rank(), comm.Get_size()
    ucx = measure.make_op(args.op, args.bytes, rank, ws)
    mpi = mpi_ops.make_op(args.op, args.bytes, rank, ws, "mpi4py-torch", comm)
    calls = {"ucx": lambda: ucx(None), "mpi4py": mpi}  # group None: the default (ucx) group
    blocks = {name: [] for name in calls}
    for fn in calls.values():
        for _ in range(min(args.iters, 200)):
            fn()
    for _ in range(args.blocks):
        for name, fn in calls.items():
            comm.Barrier()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                fn()
            blocks[name].append((time.perf_counter() - t0) / args.iters * 1e6)
    med = {k: comm.allreduce(statistics.median(v), op=MPI.MAX) for k, v in blocks.items()}
    if rank == 0:
        print(f"{args.op} {ws} ranks {sizes.input_bytes(args.op, args.bytes, ws)} B: commux "
              f"{med['ucx']:.1f} us, mpi4py on torch {med['mpi4py']:.1f} us per call (median "
              f"block); mpi4py/commux {med['mpi4py'] / med['ucx']:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
