"""commux and mpi4py (on the same torch tensors) in the same processes, alternating blocks of
one collective: the A/B for a single point when commux.bench's 50 ms blocks are too short.

    mpirun --allow-run-as-root --oversubscribe -np 4 -x MASTER_ADDR=127.0.0.1 \\
        -x MASTER_PORT=29555 python3 benchmarks/mpi_beside_loop.py --op broadcast --bytes 8

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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="broadcast", choices=["allreduce", "broadcast", "allgather", "alltoall"])
    p.add_argument("--bytes", type=int, default=8, help="bytes per rank's input tensor (float32)")
    p.add_argument("--iters", type=int, default=3000, help="calls per block")
    p.add_argument("--blocks", type=int, default=6, help="blocks per backend, alternating")
    args = p.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("ucx")
    ws = comm.Get_size()
    n = max(args.bytes // 4, ws)
    t, gathered, out = torch.zeros(n), torch.zeros(n * ws), torch.zeros(n)
    ucx, mpi = {
        "allreduce": (lambda: dist.all_reduce(t), lambda: comm.Allreduce(MPI.IN_PLACE, t, op=MPI.SUM)),
        "broadcast": (lambda: dist.broadcast(t, 0), lambda: comm.Bcast(t, root=0)),
        "allgather": (lambda: dist.all_gather_into_tensor(gathered, t), lambda: comm.Allgather(t, gathered)),
        "alltoall": (lambda: dist.all_to_all_single(out, t), lambda: comm.Alltoall(t, out)),
    }[args.op]
    blocks = {"ucx": [], "mpi4py": []}
    for fn in (ucx, mpi):
        for _ in range(min(args.iters, 200)):
            fn()
    for _ in range(args.blocks):
        for name, fn in (("ucx", ucx), ("mpi4py", mpi)):
            comm.Barrier()
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(args.iters):
                fn()
            blocks[name].append((time.perf_counter() - t0) / args.iters * 1e6)
    med = {k: comm.allreduce(statistics.median(v), op=MPI.MAX) for k, v in blocks.items()}
    if comm.Get_rank() == 0:
        print(f"{args.op} {ws} ranks {n * 4} B: commux {med['ucx']:.1f} us, mpi4py on torch "
              f"{med['mpi4py']:.1f} us per call (median block); mpi4py/commux "
              f"{med['mpi4py'] / med['ucx']:.2f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
