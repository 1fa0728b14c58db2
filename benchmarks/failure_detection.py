"""What failure detection costs and how fast it is, per COMMUX_FAILURE_DETECTION mode.

    python3 benchmarks/failure_detection.py [--repeats 3] [--kills 3]

Part 1, speed: rank 1 is SIGKILLed while rank 0 waits in a receive from it; the time from
the kill to rank 0's DistBackendError, for `auto` (pidfd on this host) and `ucx` (UCX's
peer error handling, what peers on other hosts get).
Part 2, cost: the fast paths with detection `off`, `auto` and `ucx`, interleaved in one
run (--repeats rounds): p2p one-way latency (8 B, ping-pong median), p2p bandwidth (1 MiB
and 16 MiB, ping-pong), allreduce 8 B and 1 MiB (shared memory). Buffers are written
before timing. Ratios to `off` are printed; this machine is noisy, compare within a run.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import sys
import time

import torch
import torch.multiprocessing as mp


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _init(rank, port, env):
    os.environ.update(env)
    import torch.distributed as dist

    import commux

    commux.register()
    torch.set_num_threads(1)
    dist.init_process_group("ucx", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    return dist


def _detect(rank, port, env, out):
    dist = _init(rank, port, env)
    dist.all_reduce(torch.ones(1))
    if rank == 1:
        time.sleep(0.3)
        out.put(("killed_at", time.time()))
        out.close()
        out.join_thread()  # the queue's feeder thread must deliver it before the kill
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        dist.recv(torch.empty(4), src=1)
        out.put(("error", "received from a dead rank"))
    except dist.DistBackendError:
        out.put(("seen_at", time.time()))
    dist.destroy_process_group()


def _cost(rank, port, env, out):
    dist = _init(rank, port, env)
    peer = 1 - rank
    res = {}

    def pingpong(nbytes, iters):
        buf = torch.ones(max(nbytes // 4, 1))
        times = []
        dist.barrier()
        for _ in range(iters):
            t0 = time.perf_counter()
            if rank == 0:
                dist.send(buf, dst=peer)
                dist.recv(buf, src=peer)
            else:
                dist.recv(buf, src=peer)
                dist.send(buf, dst=peer)
            times.append((time.perf_counter() - t0) / 2)
        return times

    pingpong(8, 200)  # warm-up, connections
    res["p2p 8 B one-way (us)"] = statistics.median(pingpong(8, 3000)) * 1e6
    for n, label in ((1 << 20, "1 MiB"), (16 << 20, "16 MiB")):
        t = statistics.median(pingpong(n, 60 if n < (8 << 20) else 15))
        res[f"p2p {label} (GB/s)"] = n / t / 1e9
    for n, label, iters in ((2, "8 B", 3000), (1 << 18, "1 MiB", 200)):
        x = torch.ones(n)
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        res[f"allreduce {label} (us)"] = (time.perf_counter() - t0) / iters * 1e6
    if rank == 0:
        out.put(res)
    dist.barrier()
    dist.destroy_process_group()


def _job(target, env):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _port()
    procs = [ctx.Process(target=target, args=(r, port, env, out)) for r in range(2)]
    for p in procs:
        p.start()
    return procs, out


def detection(mode: str) -> float:
    procs, out = _job(_detect, {"COMMUX_FAILURE_DETECTION": mode, "COMMUX_SHM": "0"})
    got = dict(out.get(timeout=120) for _ in range(2))
    for p in procs:
        p.join(30)
    if "error" in got:
        raise RuntimeError(got["error"])
    return got["seen_at"] - got["killed_at"]


def cost(mode: str, before: str | None = None) -> dict:
    env = {"COMMUX_FAILURE_DETECTION": mode}
    if mode == "before":
        # Another commux build (one without failure detection), first on the path.
        env = {"PYTHONPATH": before + os.pathsep + os.environ.get("PYTHONPATH", "")}
        os.environ["PYTHONPATH"] = env["PYTHONPATH"]
    try:
        procs, out = _job(_cost, env)
    finally:
        if mode == "before":
            os.environ.pop("PYTHONPATH", None)
    res = out.get(timeout=600)
    for p in procs:
        p.join(30)
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--before", metavar="DIR",
                    help="also measure the commux installed in DIR (pip install --target DIR "
                         "of an older commit) as a 'before' column")
    ap.add_argument("--no-detection-timing", action="store_true")
    args = ap.parse_args()
    print("== time from SIGKILL to the survivor's error (receive from the dead rank)")
    for mode in () if args.no_detection_timing else ("auto", "ucx"):
        runs = [detection(mode) for _ in range(args.kills)]
        print(f"  {mode:5s}: median {statistics.median(runs) * 1e3:7.1f} ms  "
              f"(runs: {', '.join(f'{r * 1e3:.1f}' for r in runs)})")
    print("== fast paths by detection mode (median of rounds; ratio to off)")
    modes = ("off", "auto", "ucx") + (("before",) if args.before else ())
    rounds = {m: [] for m in modes}
    for _ in range(args.repeats):
        for m in modes:
            rounds[m].append(cost(m, args.before))
    keys = list(rounds["off"][0])
    med = {m: {k: statistics.median(r[k] for r in rounds[m]) for k in keys} for m in modes}
    print(f"  {'metric':26s}" + "".join(f"{m:>16s}" for m in modes))
    for k in keys:
        base = med["off"][k]
        cells = "".join(f"{med[m][k]:9.2f} ({med[m][k] / base:4.2f})" for m in modes)
        print(f"  {k:26s}{cells}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
