"""The MPI counterpart of collective_loop.py: a standalone loop of one mpi4py collective,
same blocks and same figures (best and median block, max over ranks; CPU time per call).

    mpirun --allow-run-as-root --oversubscribe -np 4 python3 benchmarks/mpi4py_loop.py \
        --op broadcast --bytes 8 --buffer torch

--buffer torch passes torch tensors (what a torch user calling MPI gets; mpi4py exports
them per call), numpy passes numpy arrays. Run it next to collective_loop.py under
`perf stat -a -e context-switches` to compare how often the ranks switch per call.
"""

import argparse
import statistics
import time

import numpy as np
import torch
from mpi4py import MPI


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="broadcast",
                   choices=["broadcast", "allreduce", "allgather", "alltoall"])
    p.add_argument("--bytes", type=int, default=8,
                   help="bytes of each rank's tensor (float32), as collective_loop.py")
    p.add_argument("--iters", type=int, default=2000, help="calls per block")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--buffer", default="torch", choices=["torch", "numpy"])
    args = p.parse_args()
    comm = MPI.COMM_WORLD
    # At least a float per rank (an all_to_all piece each), as collective_loop.py.
    n = max(args.bytes // 4, comm.size)

    def make(count):
        # Written, not just allocated: untouched pages all read as the kernel's zero page.
        return torch.ones(count) if args.buffer == "torch" else np.ones(count, dtype=np.float32)

    buf, out, gathered = make(n), make(n), make(n * comm.size)
    call = {
        "broadcast": lambda: comm.Bcast(buf, root=0),
        "allreduce": lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM),
        "allgather": lambda: comm.Allgather(buf, gathered),
        "alltoall": lambda: comm.Alltoall(buf, out),
    }[args.op]
    for _ in range(args.warmup):
        call()
    per_call, cpu = [], []
    for _ in range(args.blocks):
        comm.Barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.iters):
            call()
        per_call.append(comm.allreduce((time.perf_counter() - t0) / args.iters * 1e6, op=MPI.MAX))
        cpu.append(comm.allreduce((time.process_time() - c0) / args.iters * 1e6, op=MPI.MAX))
    if comm.rank == 0:
        print(f"mpi4py {args.op} {comm.size} ranks {n * 4} B ({args.buffer}): best block "
              f"{min(per_call):.1f} us, median block {statistics.median(per_call):.1f} us per call; "
              f"CPU per call and rank (max) {statistics.median(cpu):.1f} us")


if __name__ == "__main__":
    main()
