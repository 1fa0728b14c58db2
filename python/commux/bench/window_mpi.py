"""MPI RMA through mpi4py on torch tensors: the peer of ``commux.bench.window``.

    mpirun -n 2 [--allow-run-as-root] python3 -m commux.bench.window_mpi SIZES BLOCKS SECONDS

The window is ``MPI.Win.Allocate`` (MPI's own memory, as a commux window's is moved to shared
memory at registration), the data a torch tensor's buffer, written before timing. Passive
target, ``Lock_all`` once. A signal is the usual MPI-3 put-with-flag: ``Put`` a counter into
the peer's flag word and ``Flush``; the waiter polls its flag with ``Win.Sync`` and
``Iprobe`` (which drives MPI's progress).

  latency    rank 0 Puts n bytes, Flush, signals; rank 1 waits for the flag and answers
             the same way; half the round trip.
  bandwidth  rank 0 Puts a burst of n bytes (commux.bench.window.burst_of), Flush, signals;
             rank 1 waits and signals back; seconds per put.
  signal     a flag ping-pong; half the round trip.

Timed as commux.bench times everything (measure.py): median over blocks. Rank 0 prints one
line per measurement: ``mpi {"kind", "bytes", "seconds"}`` (JSON).
"""

import json
import sys

import numpy as np
import torch
from mpi4py import MPI

from commux.bench.mpi_ops import MpiSync
from commux.bench.measure import measure_point
from commux.bench.window import burst_of


def main():
    sizes = [int(s) for s in sys.argv[1].split(",")]
    blocks = int(sys.argv[2])
    block_seconds = float(sys.argv[3])
    comm = MPI.COMM_WORLD
    rank = comm.Get_rank()
    peer = 1 - rank

    def measure(kind, nbytes):
        n = max(1, nbytes // 4)
        src = torch.ones(n)
        data = src.numpy().view(np.uint8)
        win = MPI.Win.Allocate(n * 4 + 8, 1, comm=comm)
        mem = np.frombuffer(win.tomemory(), dtype=np.uint8)
        mem[:] = 0
        flag = np.frombuffer(win.tomemory(), dtype=np.int64, count=1, offset=n * 4)
        seq = np.zeros(1, dtype=np.int64)
        expected = [0]
        burst = burst_of(nbytes) if kind == "bandwidth" else 1
        win.Lock_all()
        comm.Barrier()

        def signal():
            seq[0] += 1
            win.Put(seq, peer, target=(n * 4, 1, MPI.INT64_T))
            win.Flush(peer)

        def put_signal(count):
            if kind != "signal":
                for _ in range(count):
                    win.Put(data, peer, target=(0, data.size, MPI.BYTE))
                win.Flush(peer)
            signal()

        def wait_flag():
            expected[0] += 1
            while True:
                win.Sync()
                if flag[0] >= expected[0]:
                    return
                # Drives MPI's progress: where the puts travel as messages (osc pt2pt over
                # TCP), Win.Sync alone lets them wait for a timer (about 4 ms a put).
                comm.Iprobe()

        def one():
            if rank == 0:
                put_signal(burst)
                wait_flag()
            else:
                wait_flag()
                if kind == "bandwidth":
                    signal()
                else:
                    put_signal(1)

        # commux.bench's timing, as commux's side of the table uses it (measure.py).
        got = measure_point(lambda _: one(), {kind: None}, None, blocks, block_seconds, 1 << 16,
                            sync=MpiSync(comm))
        per = burst if kind == "bandwidth" else 2
        win.Unlock_all()
        comm.Barrier()
        win.Free()
        if rank == 0:
            row = dict(kind=kind, bytes=nbytes, seconds=got[kind]["median_s"] / per)
            print("mpi " + json.dumps(row), flush=True)

    measure("signal", 0)
    for nbytes in sizes:
        measure("latency", nbytes)
        measure("bandwidth", nbytes)


if __name__ == "__main__":
    main()
