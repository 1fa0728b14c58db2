"""Message coalescing on a halo-like exchange: COMMUX_COALESCE and COMMUX_GROUP, V tensors.

    python3 benchmarks/coalescing.py [--vars 1,2,4,16] [--sizes 64,1024,16384,262144]

Two ranks exchange V tensors ("variables") each way per step, as a stencil code does with
its neighbour, in two styles:

* ``list``:  one ``send(list)`` + one ``recv(list)`` per step on the backend (one tensor per
  variable). COMMUX_COALESCE=1 packs the V tensors into ONE UCX message (IOV).
* ``batch``: ``dist.batch_isend_irecv`` of V isends + V irecvs (one tag per variable).
  COMMUX_GROUP=1 defers the 2V posts to the end of the coalescing window and posts them
  together.

Each setting runs in its own pair of processes (the options are read once per process);
settings alternate in rounds and the median over rounds is reported, with the speed-up
over the plain setting (both off) of the same run. Sizes are bytes per tensor.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

SETTINGS = {
    "plain": {"COMMUX_COALESCE": "0", "COMMUX_GROUP": "0"},
    "coalesce": {"COMMUX_COALESCE": "1", "COMMUX_GROUP": "0"},
    "group": {"COMMUX_COALESCE": "0", "COMMUX_GROUP": "1"},
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank_main(rank: int, setting: str, port: int, vars_: list, sizes: list, seconds: float, queue):
    os.environ.update(SETTINGS[setting])
    os.environ["OMP_NUM_THREADS"] = "1"
    import torch
    import torch.distributed as dist

    import commux

    commux.register()
    torch.set_num_threads(1)
    dist.init_process_group("ucx", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    peer = 1 - rank
    results = {}
    for v in vars_:
        for size in sizes:
            out = [torch.full((max(1, size // 4),), float(rank * 100 + i)) for i in range(v)]
            inp = [torch.empty_like(t) for t in out]

            def step_list():
                ws = backend.send(out, peer, 7)
                wr = backend.recv(inp, peer, 7)
                ws.wait()
                wr.wait()

            def step_batch():
                ops = [dist.P2POp(dist.isend, t, peer, tag=i) for i, t in enumerate(out)]
                ops += [dist.P2POp(dist.irecv, t, peer, tag=i) for i, t in enumerate(inp)]
                for w in dist.batch_isend_irecv(ops):
                    w.wait()

            for style, step in (("list", step_list), ("batch", step_batch)):
                for _ in range(20):
                    step()
                # Both ranks must run the same number of steps: rank 0 picks it.
                start = time.perf_counter()
                for _ in range(20):
                    step()
                per = (time.perf_counter() - start) / 20
                n = torch.tensor([max(10, min(5000, int(seconds / max(per, 1e-7))))])
                dist.broadcast(n, 0)
                dist.barrier()
                start = time.perf_counter()
                for _ in range(int(n)):
                    step()
                elapsed = (time.perf_counter() - start) / int(n)
                for i, t in enumerate(inp):  # the data must be right, not just fast
                    expected = float(peer * 100 + i)
                    if t[0].item() != expected or t[-1].item() != expected:
                        raise RuntimeError(f"{setting} {style} V={v}: wrong data in tensor {i}")
                results[(style, v, size)] = elapsed * 1e6
    dist.destroy_process_group()
    if rank == 0:
        queue.put(results)


def run_setting(setting, vars_, sizes, seconds, timeout):
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank_main, args=(r, setting, port, vars_, sizes, seconds, queue))
             for r in range(2)]
    for p in procs:
        p.start()
    try:
        result = queue.get(timeout=timeout)
    except Exception:
        for p in procs:
            p.kill()
        raise SystemExit(f"coalescing benchmark: setting {setting} did not finish in {timeout} s")
    for p in procs:
        p.join(timeout=30)
        if p.exitcode != 0:
            p.kill()
            raise SystemExit(f"coalescing benchmark: a rank of setting {setting} failed")
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vars", default="1,2,4,16")
    parser.add_argument("--sizes", default="64,1024,16384,262144")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=0.1, help="per measurement")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)
    vars_ = [int(x) for x in args.vars.split(",")]
    sizes = [int(x) for x in args.sizes.split(",")]
    samples = {s: {} for s in SETTINGS}
    for _ in range(args.rounds):
        for setting in SETTINGS:
            for key, us in run_setting(setting, vars_, sizes, args.seconds, args.timeout).items():
                samples[setting].setdefault(key, []).append(us)
    med = {s: {k: statistics.median(v) for k, v in d.items()} for s, d in samples.items()}
    print(f"{'style':6} {'V':>3} {'bytes/tensor':>12} {'plain us':>9} {'coalesce us':>12} "
          f"{'group us':>9} {'plain/coalesce':>15} {'plain/group':>12}")
    for style in ("list", "batch"):
        for v in vars_:
            for size in sizes:
                k = (style, v, size)
                p, c, g = med["plain"][k], med["coalesce"][k], med["group"][k]
                print(f"{style:6} {v:>3} {size:>12} {p:>9.1f} {c:>12.1f} {g:>9.1f} "
                      f"{p / c:>14.2f}x {p / g:>11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
