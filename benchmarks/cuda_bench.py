"""CUDA benchmark for commux: p2p bandwidth between 2 ranks (sharing one GPU or one GPU each)
against the GPU's own device-to-device copy rate, and allreduce times over sizes.

    python3 benchmarks/cuda_bench.py [--out DIR] [--max-bytes 256M] [--iters 20]

Writes cuda_bench.csv to --out and prints a table. Needs a CUDA GPU and commux built
against a CUDA torch.
"""

import argparse
import csv
import os
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def parse_size(text):
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(text[:-1]) * units[text[-1].upper()] if text[-1].upper() in units else int(text)


def sizes_up_to(top, start=8, step=4):
    out, s = [], start
    while s <= top:
        out.append(s)
        s *= step
    return out


def timed(fn, iters):
    """Median seconds per call of fn() over `iters` runs, GPU work included."""
    samples = []
    for _ in range(iters):
        torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        samples.append(time.perf_counter() - t)
    samples.sort()
    return samples[len(samples) // 2]


def worker(rank, ws, init_file, args, queue):
    import commux

    commux.register()
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    dist.init_process_group("ucx", init_method=f"file://{init_file}", rank=rank, world_size=ws)
    rows = []
    peer = 1 - rank
    for nbytes in sizes_up_to(args.max_bytes, start=1 << 10):
        n = nbytes // 4
        a = torch.ones(n, device=dev)
        b = torch.empty(n, device=dev)
        def pingpong():
            if rank == 0:
                dist.send(a, peer)
                dist.recv(b, peer)
            else:
                dist.recv(b, peer)
                dist.send(a, peer)
        pingpong()  # warm-up (connection, IPC handles)
        dist.barrier()
        one_way = timed(pingpong, args.iters) / 2
        copy = timed(lambda: b.copy_(a), args.iters)
        rows.append(("p2p", nbytes, one_way * 1e6, nbytes / one_way / 1e9, nbytes / copy / 1e9))
    for nbytes in sizes_up_to(args.max_bytes, start=8):
        x = torch.ones(max(nbytes // 4, 1), device=dev)
        dist.all_reduce(x)
        dist.barrier()
        t = timed(lambda: dist.all_reduce(x), args.iters)
        rows.append(("allreduce", nbytes, t * 1e6, nbytes / t / 1e9, float("nan")))
    if rank == 0:
        queue.put(rows)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="cuda-bench")
    p.add_argument("--max-bytes", type=parse_size, default=256 << 20)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--ranks", type=int, default=2)
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("cuda_bench: no CUDA GPU visible; nothing to measure")
        return 0
    os.makedirs(args.out, exist_ok=True)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    init_file = tempfile.mktemp(prefix="commux-cuda-bench-")
    procs = [ctx.Process(target=worker, args=(r, args.ranks, init_file, args, queue)) for r in range(args.ranks)]
    for proc in procs:
        proc.start()
    rows = queue.get(timeout=600)
    for proc in procs:
        proc.join(timeout=60)
    print(f"{'op':<10} {'bytes':>12} {'us':>12} {'GB/s':>8} {'d2d copy GB/s':>14}")
    for op, nbytes, us, gbps, copy in rows:
        print(f"{op:<10} {nbytes:>12} {us:>12.1f} {gbps:>8.2f} {copy:>14.2f}")
    with open(os.path.join(args.out, "cuda_bench.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["op", "bytes", "us", "gbps", "d2d_copy_gbps"])
        w.writerows(rows)
    return 0 if all(proc.exitcode == 0 for proc in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
