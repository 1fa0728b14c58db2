"""MPI RMA's put+signal ping-pong on torch tensors, the peer of benchmarks/window.py:

    mpirun -n 2 [--allow-run-as-root] python3 benchmarks/window_mpi.py SIZES BLOCKS SECONDS

The window is `MPI.Win.Allocate` (MPI's own memory, as a commux window's may be shared), the
data a torch tensor's buffer. One iteration: rank 0 `Put`s n bytes into rank 1's window, then
`Flush`, then `Put`s a flag and `Flush`es it (the usual put-with-signal of MPI-3 passive
target: `Lock_all` once); rank 1 polls its flag with `Win.Sync`, puts back the same way,
and rank 0 polls. Half the round trip is reported, median over blocks. Prints one line
per size: "mpi BYTES SECONDS_ONE_WAY".
"""

import statistics
import sys
import time

import numpy as np
import torch
from mpi4py import MPI


def main():
    sizes = [int(s) for s in sys.argv[1].split(",")]
    blocks = int(sys.argv[2])
    block_seconds = float(sys.argv[3])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    peer = 1 - rank
    for nbytes in sizes:
        n = max(1, nbytes // 4)
        src = torch.ones(n)  # written before timing: untouched pages read as the zero page
        win = MPI.Win.Allocate(n * 4 + 8, 1, comm=comm)
        mem = np.frombuffer(win.tomemory(), dtype=np.uint8)
        mem[:] = 0
        flag = np.frombuffer(win.tomemory(), dtype=np.int64, count=1, offset=n * 4)
        seq = np.zeros(1, dtype=np.int64)
        data = src.numpy().view(np.uint8)
        win.Lock_all()
        comm.Barrier()

        def put_signal():
            win.Put(data, peer, target=(0, data.size, MPI.BYTE))
            win.Flush(peer)
            seq[0] += 1
            win.Put(seq, peer, target=(n * 4, 1, MPI.INT64_T))
            win.Flush(peer)

        def wait_flag(want):
            while True:
                win.Sync()
                if flag[0] >= want:
                    return

        expected = [0]

        def one():
            expected[0] += 1
            if rank == 0:
                put_signal()
                wait_flag(expected[0])
            else:
                wait_flag(expected[0])
                put_signal()

        def timed(k):
            """Seconds for k iterations, the slowest rank's, after a barrier."""
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                one()
            return comm.allreduce(time.perf_counter() - t0, op=MPI.MAX)

        k = 1
        while (took := timed(k)) <= block_seconds / 4 and k < 1 << 16:
            k *= 4
        k = max(1, int(k * block_seconds / max(took, 1e-6)))
        times = []
        for _ in range(blocks):
            for _ in range(3):
                one()
            times.append(timed(k) / k / 2)
        win.Unlock_all()
        comm.Barrier()
        win.Free()
        if rank == 0:
            print(f"mpi {nbytes} {statistics.median(times)}", flush=True)


if __name__ == "__main__":
    main()
