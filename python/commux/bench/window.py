"""``python3 -m commux.bench.window``: one-sided windows against commux's own tagged
send/recv and against MPI RMA (mpi4py), same sizes, same kind of buffers.

Three measurements between ranks 0 and 1, each beside the same pattern through
``pg.send/recv`` (the backend's send and recv on the group object, without
torch.distributed's Python argument checks, which a window call does not go through):

  latency    a ping-pong, one way reported: rank 0 puts n bytes into rank 1's window and
             signals (``put`` then ``signal``, and the fused ``put_signal``); rank 1 waits,
             answers the same way. Beside it: send n bytes, the peer receives and sends back.
  bandwidth  rank 0 puts a burst of n-byte puts (async), then signals; rank 1 waits and
             signals back. Beside it: the same burst of sends. Reported in GB/s.
  signal     a signal ping-pong (no data), beside a 0-byte send/recv ping-pong.

Blocks of each column alternate in the same processes (ABAB...), median over blocks, so
the shared machine's drift hits every column alike.

Local runs (2 ranks spawned here, one host) measure the paths a window takes there:
``mapped`` (the default: registration moves the tensor to shared memory), ``cma``
(``COMMUX_WINDOW_SHARE=0``), ``messages`` (``COMMUX_SHM=0``: UCX messages, what a peer on
another host gets). ``--mpi`` runs the same measurements through Open MPI RMA after each
path (``mpirun``, window_mpi.py: ``Win.Allocate``, ``Put`` + ``Flush`` + a flag ``Put``).

Under torchrun (``RANK`` set, as from ``scripts/multihost_check.sh --nproc 1 --job
benchmarks/window.py``) it measures whatever path the job's hosts give, and rank 0 prints
the table; every rank ends with the harness's "multihost ok rank R" line. Across namespace
hosts, with MPI beside it (docs/performance.md has the run):

    scripts/multihost_check.sh --hosts 2 --nproc 1 --job benchmarks/window.py --keep-logs
    benchmarks/window_mpi_hosts.sh > mpi.log
    python3 -m commux.bench.window --combine /tmp/commux-multihost.*/host0.log mpi.log
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys

from .measure import TorchSync, measure_point
from .runner import free_port
from .sizes import format_size

DEFAULT_SIZES = "8,1024,65536,1048576,16777216,67108864"
BURST_BYTES = 16 << 20  # a bandwidth burst moves about this much (1..16 puts)


def burst_of(nbytes: int) -> int:
    return max(1, min(16, BURST_BYTES // max(nbytes, 1)))


class _WorldSync(TorchSync):
    """measure.py's barriers and max on the default group (its 'groups' are the kinds)."""

    def __init__(self):
        super().__init__(None)

    def barrier(self, group) -> None:
        import torch.distributed as dist

        dist.barrier()


def _measure(rank, sizes, blocks, block_seconds):
    """Runs in ranks 0 and 1 of an initialised group; returns rank 0's rows."""
    import torch
    import torch.distributed as dist

    pg = dist.group.WORLD
    peer = 1 - rank if rank < 2 else None
    rows = []
    # commux.bench's timing (measure.py): each kind calibrated, then blocks of the kinds
    # alternating, max over ranks per block, median over blocks. Ranks past 1 idle.
    call = (lambda kind: kind()) if peer is not None else (lambda kind: None)
    sync = _WorldSync()

    def run_kinds(kinds, per_call):
        """{name: seconds per unit} for each of kinds (name -> fn)."""
        got = measure_point(call, kinds, None, blocks, block_seconds, 1 << 16, sync=sync)
        return {name: v["median_s"] / per_call for name, v in got.items()}

    empty = torch.empty(0)
    ack = torch.zeros(1)
    signal_window = dist._new_window(torch.zeros(1))
    path_of_signal = signal_window.path(peer) if peer is not None else ""

    def send_recv_empty():
        if rank == 0:
            pg.send([empty], 1, 0).wait()
            pg.recv([empty], 1, 0).wait()
        else:
            pg.recv([empty], 0, 0).wait()
            pg.send([empty], 0, 0).wait()

    def signal_pingpong():
        if rank == 0:
            signal_window.signal(1, False)
            signal_window.wait_signal(1, False)
        else:
            signal_window.wait_signal(0, False)
            signal_window.signal(0, False)

    t = run_kinds({"send/recv": send_recv_empty, "signal": signal_pingpong}, 2)
    rows.append(dict(kind="signal", path=path_of_signal, bytes=0, columns=t))
    signal_window.tensor_deregister()

    for nbytes in sizes:
        n = max(1, nbytes // 4)
        src = torch.ones(n)  # written: untouched pages read as the shared zero page
        dst = torch.zeros(n)
        win_buf = torch.zeros(n)
        win = dist._new_window(win_buf)
        path = win.path(peer) if peer is not None else ""

        def sendrecv():
            if rank == 0:
                pg.send([src], 1, 0).wait()
                pg.recv([dst], 1, 0).wait()
            else:
                pg.recv([dst], 0, 0).wait()
                pg.send([src], 0, 0).wait()

        def put_then_signal():
            if rank == 0:
                win.put(src, 1, 0, False)
                win.signal(1, False)
                win.wait_signal(1, False)
            else:
                win.wait_signal(0, False)
                win.put(src, 0, 0, False)
                win.signal(0, False)

        def put_signal():
            if rank == 0:
                win.put_signal(src, 1, 0)
                win.wait_signal(1, False)
            else:
                win.wait_signal(0, False)
                win.put_signal(src, 0, 0)

        t = run_kinds({"send/recv": sendrecv, "put+signal": put_then_signal,
                       "put_signal": put_signal}, 2)
        rows.append(dict(kind="latency", path=path, bytes=nbytes, columns=t))

        burst = burst_of(nbytes)

        def send_burst():
            if rank == 0:
                for w in [pg.send([src], 1, 0) for _ in range(burst)]:
                    w.wait()
                pg.recv([ack], 1, 1).wait()
            else:
                for w in [pg.recv([dst], 0, 0) for _ in range(burst)]:
                    w.wait()
                pg.send([ack], 0, 1).wait()

        def put_burst():
            if rank == 0:
                works = [win.put(src, 1, 0, True) for _ in range(burst)]
                win.signal(1, False)
                for w in works:
                    w.wait()
                win.wait_signal(1, False)
            else:
                win.wait_signal(0, False)
                win.signal(0, False)

        t = run_kinds({"send/recv": send_burst, "put": put_burst}, burst)
        rows.append(dict(kind="bandwidth", path=path, bytes=nbytes, burst=burst,
                         columns={k: nbytes / v / 1e9 for k, v in t.items()}))
        win.tensor_deregister()
    return rows


def spawn_pair(target, args, timeout=1800):
    """Runs target(rank, port, *args, out) in 2 fresh processes (ranks 0 and 1 of a group on
    127.0.0.1:port); returns what rank 0 puts on `out`. Exits naming a rank that failed."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=target, args=(r, port, *args, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        rows = out.get(timeout=timeout)
    finally:
        for p in procs:
            p.join(timeout=60)
            if p.is_alive():
                p.kill()
    for r, p in enumerate(procs):
        if p.exitcode != 0:
            sys.exit(f"{target.__module__}: rank {r} exited with {p.exitcode}")
    return rows


def _local_rank(rank, port, path, sizes, blocks, block_seconds, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    if path == "messages":
        os.environ["COMMUX_SHM"] = "0"
    if path == "cma":
        os.environ["COMMUX_WINDOW_SHARE"] = "0"
    import torch.distributed as dist

    dist.init_process_group("ucx", rank=rank, world_size=2)
    rows = _measure(rank, sizes, blocks, block_seconds)
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def _mpi_rows(sizes, blocks, block_seconds, extra=()):
    """MPI RMA's rows for the same measurements (window_mpi.py under mpirun)."""
    if shutil.which("mpirun") is None:
        sys.exit("commux.bench.window: --mpi needs mpirun and mpi4py (scripts/install.sh --mpi)")
    cmd = ["mpirun", "-n", "2", "--oversubscribe", *extra]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    cmd += [sys.executable, "-m", "commux.bench.window_mpi", ",".join(map(str, sizes)),
            str(blocks), str(block_seconds)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"commux.bench.window: the MPI run failed ({done.returncode}):\n"
                 f"{done.stderr[-3000:]}")
    return [json.loads(line[4:]) for line in done.stdout.splitlines() if line.startswith("mpi ")]


def table(rows, mpi=None) -> str:
    """Markdown: one table per kind; ratios against send/recv and, when given, MPI."""
    mpi = {(r["kind"], r["bytes"]): r["seconds"] for r in (mpi or [])}
    out = []
    lat = [r for r in rows if r["kind"] in ("latency", "signal")]
    if lat:
        head = "| path | what | bytes | send/recv us | put+signal us | / send | put_signal us | / send |"
        sep = "|---|---|---:|---:|---:|---:|---:|---:|"
        if mpi:
            head += " MPI RMA us | put_signal / MPI |"
            sep += "---:|---:|"
        out += [head, sep]
        for r in lat:
            c = r["columns"]
            sr = c["send/recv"] * 1e6
            if r["kind"] == "signal":
                ps = c["signal"] * 1e6
                line = (f"| {r['path']} | signal ping-pong | 0 | {sr:.2f} | - | - | {ps:.2f} | "
                        f"{ps / sr:.2f} |")
            else:
                pts = c["put+signal"] * 1e6
                ps = c["put_signal"] * 1e6
                line = (f"| {r['path']} | put+signal latency | {format_size(r['bytes'])} | {sr:.2f} | "
                        f"{pts:.2f} | {pts / sr:.2f} | {ps:.2f} | {ps / sr:.2f} |")
            if mpi:
                m = mpi.get((r["kind"], r["bytes"]))
                line += f" {m * 1e6:.2f} | {ps / (m * 1e6):.2f} |" if m else " - | - |"
            out.append(line)
        out.append("")
    bw = [r for r in rows if r["kind"] == "bandwidth"]
    if bw:
        head = "| path | bytes | burst | send GB/s | put GB/s | put / send |"
        sep = "|---|---:|---:|---:|---:|---:|"
        if mpi:
            head += " MPI put GB/s | put / MPI |"
            sep += "---:|---:|"
        out += [head, sep]
        for r in bw:
            c = r["columns"]
            line = (f"| {r['path']} | {format_size(r['bytes'])} | {r['burst']} | {c['send/recv']:.3g} | "
                    f"{c['put']:.3g} | {c['put'] / c['send/recv']:.2f} |")
            if mpi:
                m = mpi.get(("bandwidth", r["bytes"]))
                gbps = r["bytes"] / m / 1e9 if m else None
                line += f" {gbps:.3g} | {c['put'] / gbps:.2f} |" if gbps else " - | - |"
            out.append(line)
    return "\n".join(out)


def _combine(commux_log, mpi_log):
    rows = None
    with open(commux_log) as f:
        for line in f:
            if line.startswith("window rows "):
                rows = json.loads(line[len("window rows "):])
    if rows is None:
        sys.exit(f"commux.bench.window: no 'window rows' line in {commux_log}")
    with open(mpi_log) as f:
        mpi = [json.loads(line[4:]) for line in f if line.startswith("mpi ")]
    print(table(rows, mpi))


def _torchrun(args, sizes):
    import torch.distributed as dist

    dist.init_process_group("ucx")
    rank = dist.get_rank()
    rows = _measure(rank, sizes, args.blocks, args.block_seconds)
    if rank == 0:
        print(table(rows), flush=True)
        print("window rows " + json.dumps(rows), flush=True)  # for --combine
        if args.out:
            os.makedirs(args.out, exist_ok=True)
            with open(os.path.join(args.out, "window.json"), "w") as f:
                json.dump(rows, f)
    dist.destroy_process_group()
    sys.stdout.flush()
    os.write(1, f"multihost ok rank {rank} window bench\n".encode())


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m commux.bench.window", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--paths", default="mapped,cma,messages",
                    help="local runs: comma list of mapped, cma, messages")
    ap.add_argument("--sizes", default=DEFAULT_SIZES, help="bytes, comma list")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--block-seconds", type=float, default=0.2)
    ap.add_argument("--mpi", action="store_true", help="MPI RMA (mpi4py) after each path")
    ap.add_argument("--mpi-args", default="", help="extra mpirun arguments (space separated)")
    ap.add_argument("--mpi-only", action="store_true", help="only the MPI rows")
    ap.add_argument("--out", help="folder for window.json (rows of every path)")
    ap.add_argument("--combine", nargs=2, metavar=("COMMUX_LOG", "MPI_LOG"),
                    help="print one table from a torchrun run's output (its 'window rows' line) "
                    "and window_mpi's output (its 'mpi' lines), e.g. across namespace hosts")
    args = ap.parse_args(argv)
    if args.combine:
        return _combine(*args.combine)
    sizes = [int(s) for s in args.sizes.split(",")]
    if "RANK" in os.environ and "LOCAL_RANK" in os.environ:
        return _torchrun(args, sizes)
    every = []
    paths = [] if args.mpi_only else args.paths.split(",")
    for path in paths:
        rows = spawn_pair(_local_rank, (path, sizes, args.blocks, args.block_seconds))
        mpi = _mpi_rows(sizes, args.blocks, args.block_seconds, args.mpi_args.split()) if args.mpi else None
        print(f"\n### {path}\n\n{table(rows, mpi)}\n", flush=True)
        every.append(dict(path=path, rows=rows, mpi=mpi))
    if args.mpi_only:
        mpi = _mpi_rows(sizes, args.blocks, args.block_seconds, args.mpi_args.split())
        for r in mpi:
            print(f"mpi {r['kind']} {r['bytes']} {r['seconds'] * 1e6:.2f} us", flush=True)
        every.append(dict(path="mpi", rows=[], mpi=mpi))
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        with open(os.path.join(args.out, "window.json"), "w") as f:
            json.dump(every, f)


if __name__ == "__main__":
    main()
