"""One-sided windows against commux's own tagged send/recv, same run, same buffers.

Each iteration is a ping-pong between ranks 0 and 1 (half of it reported: one way):
  send/recv    rank 0 sends n bytes, rank 1 receives and sends them back
  put+signal   rank 0 puts n bytes into rank 1's window and signals; rank 1 waits for the
               signal, puts them back and signals; rank 0 waits
  put_signal   as put+signal with the fused call (commux's extension), when present
Ratios are against pg.send/recv (the backend's own send and recv, called on the group
object, without torch.distributed's Python argument checks, which cost a few us a call and
which a window call does not go through); dist.send/recv is shown beside it.
Blocks of each alternate (ABAB...), median over blocks, so the shared machine's drift hits
every column alike. The window's path is chosen as in a real job: `cma` (plain tensors,
one host), `mapped` (tensors in shared memory, one host), `moved` (plain tensors with
COMMUX_WINDOW_SHARE=1: moved to shared memory at registration, then as `mapped`),
`messages` (COMMUX_SHM=0: UCX messages, what another host gets).

    python3 benchmarks/window.py [--paths cma,mapped,messages] [--sizes 8,1024,65536,1048576]
                                 [--mpi]

--mpi: after each path's run, MPI RMA through mpi4py on the same sizes (window_mpi.py under
mpirun: Win.Allocate, Put + Flush + a flag Put + Flush, the target polling with Win.Sync),
so every path's row has an MPI time taken minutes apart at most.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import subprocess
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, port, path, sizes, blocks, block_seconds, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if path == "messages":
        os.environ["COMMUX_SHM"] = "0"
    if path == "moved":
        os.environ["COMMUX_WINDOW_SHARE"] = "1"
    dist.init_process_group("ucx", rank=rank, world_size=2)
    peer = 1 - rank
    rows = []
    for nbytes in sizes:
        n = max(1, nbytes // 4)
        src = torch.ones(n)
        dst = torch.zeros(n)
        win_buf = torch.zeros(n)
        if path == "mapped":
            win_buf.share_memory_()
        win = dist._new_window(win_buf)
        fused = getattr(win, "put_signal", None)

        def sendrecv():
            if rank == 0:
                dist.send(src, 1)
                dist.recv(dst, 1)
            else:
                dist.recv(dst, 0)
                dist.send(src, 0)

        pg = dist.group.WORLD

        def sendrecv_pg():
            # The same messages without torch.distributed's Python layer (dist.send/recv
            # check arguments and look the group up on every call; win.put is one binding).
            if rank == 0:
                pg.send([src], 1, 0).wait()
                pg.recv([dst], 1, 0).wait()
            else:
                pg.recv([dst], 0, 0).wait()
                pg.send([src], 0, 0).wait()

        def putsignal():
            if rank == 0:
                win.put(src, 1, 0, False)
                win.signal(1, False)
                win.wait_signal(1, False)
            else:
                win.wait_signal(0, False)
                win.put(src, 0, 0, False)
                win.signal(0, False)

        def putsignal_fused():
            if rank == 0:
                fused(src, 1, 0)
                win.wait_signal(1, False)
            else:
                win.wait_signal(0, False)
                fused(src, 0, 0)

        kinds = {"send/recv": sendrecv, "pg send/recv": sendrecv_pg, "put+signal": putsignal}
        if fused is not None:
            kinds["put_signal"] = putsignal_fused
        def timed(fn, k):
            """Seconds for k calls of fn, the slowest rank's, after a barrier."""
            dist.barrier()
            t0 = time.perf_counter()
            for _ in range(k):
                fn()
            took = torch.tensor([time.perf_counter() - t0])
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            return took.item()

        # Calibrate on send/recv: every kind gets the same count.
        k = 1
        while (took := timed(sendrecv, k)) <= block_seconds / 4 and k < 1 << 16:
            k *= 4
        k = max(1, int(k * block_seconds / max(took, 1e-6)))
        times = {name: [] for name in kinds}
        for _ in range(blocks):
            for name, fn in kinds.items():
                for _ in range(3):
                    fn()
                times[name].append(timed(fn, k) / k / 2)
        win.tensor_deregister()
        rows.append((nbytes, {name: statistics.median(v) for name, v in times.items()}))
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def _mpi_times(args):
    """{bytes: seconds one way} of MPI RMA's put+signal (window_mpi.py under mpirun)."""
    if shutil.which("mpirun") is None:
        sys.exit("window bench: --mpi needs mpirun (scripts/install.sh --mpi)")
    cmd = ["mpirun", "-n", "2", "--oversubscribe"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    here = os.path.dirname(os.path.abspath(__file__))
    cmd += [sys.executable, os.path.join(here, "window_mpi.py"), args.sizes, str(args.blocks),
            str(args.block_seconds)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        sys.exit(f"window bench: the MPI run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    times = {}
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[0] == "mpi":
            times[int(parts[1])] = float(parts[2])
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--paths", default="cma,mapped,moved,messages")
    ap.add_argument("--sizes", default="8,1024,65536,1048576,16777216")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.2)
    ap.add_argument("--mpi", action="store_true", help="MPI RMA (mpi4py) beside each path")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    ctx = mp.get_context("spawn")
    mpi_head = " mpi4py RMA us | put_signal / mpi |" if args.mpi else ""
    print("| path | bytes | dist.send/recv us | pg.send/recv us | put+signal us | ratio | "
          "put_signal us | ratio |" + mpi_head)
    print("|---|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if args.mpi else ""))
    for path in args.paths.split(","):
        out = ctx.Queue()
        port = _free_port()
        procs = [ctx.Process(target=_rank, args=(r, port, path, sizes, args.blocks,
                                                  args.block_seconds, out)) for r in range(2)]
        for p in procs:
            p.start()
        rows = out.get(timeout=900)
        for p in procs:
            p.join(timeout=60)
            if p.exitcode != 0:
                sys.exit(f"window bench: a rank of path {path} exited with {p.exitcode}")
        mpi = _mpi_times(args) if args.mpi else {}
        for nbytes, t in rows:
            sr = t["send/recv"] * 1e6
            pg = t["pg send/recv"] * 1e6
            ps = t["put+signal"] * 1e6
            fused = t.get("put_signal")
            extra = f"{fused * 1e6:.2f} | {fused * 1e6 / pg:.2f}" if fused else "- | -"
            tail = ""
            if args.mpi:
                m = mpi.get(nbytes)
                tail = (f" {m * 1e6:.2f} | {fused / m:.2f} |" if m and fused else " - | - |")
            print(f"| {path} | {nbytes} | {sr:.2f} | {pg:.2f} | {ps:.2f} | {ps / pg:.2f} | "
                  f"{extra} |{tail}", flush=True)


if __name__ == "__main__":
    main()
