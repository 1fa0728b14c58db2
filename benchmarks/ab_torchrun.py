"""A/B of two commux installs by whole torchrun jobs in turn: each job (2 ranks by default)
times `--small` allreduces of 8 B and `--large` of 64 MiB (float32) after a warm-up, and
rank 0 prints microseconds per call; the jobs alternate A B A B ... `--pairs` times and the
medians of each side are printed. Coarser than benchmarks/ab_installs.py (one number per
job), but each job is a fresh pair of processes, so a slow minute hits both sides alike.

    python3 benchmarks/ab_torchrun.py --old /tmp/oldsite [--new FOLDER] [--pairs 6]
"""
import argparse
import os
import statistics
import subprocess
import sys


def rank_main(small, large):
    import time

    import torch
    import torch.distributed as dist

    import commux  # noqa: F401  (registers the backend)

    dist.init_process_group("ucx")
    times = []
    for n, iters in ((2, small), (16 << 20, large)):
        x = torch.ones(n)
        for _ in range(5):
            dist.all_reduce(x)
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(x)
        dist.barrier()
        times.append((time.perf_counter() - start) / iters * 1e6)
    if dist.get_rank() == 0:
        print("AB", *times, flush=True)
    dist.destroy_process_group()


def job(pythonpath, ranks, port, small, large):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
         f"--master-port={port}", __file__, "--rank-main", str(small), str(large)],
        env=env, capture_output=True, text=True, timeout=300, check=True).stdout
    line = next(x for x in out.splitlines() if x.startswith("AB "))
    return [float(v) for v in line.split()[1:]]


def main():
    if len(sys.argv) == 4 and sys.argv[1] == "--rank-main":
        rank_main(int(sys.argv[2]), int(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="folder holding the A install (pip --target)")
    ap.add_argument("--new", default="", help="folder holding the B install; default: installed")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--small", type=int, default=4000, help="8 B allreduces timed per job")
    ap.add_argument("--large", type=int, default=20, help="64 MiB allreduces timed per job")
    args = ap.parse_args()
    a, b = [], []
    for i in range(args.pairs):
        a.append(job(args.old, args.ranks, 29700 + 2 * i, args.small, args.large))
        b.append(job(args.new, args.ranks, 29701 + 2 * i, args.small, args.large))
        print(f"pair {i + 1}: A {a[-1][0]:.2f} us, {a[-1][1]:.0f} us; "
              f"B {b[-1][0]:.2f} us, {b[-1][1]:.0f} us", flush=True)
    for k, what in enumerate(("allreduce 8 B", "allreduce 64 MiB")):
        ma = statistics.median(r[k] for r in a)
        mb = statistics.median(r[k] for r in b)
        print(f"{what}: A median {ma:.2f} us, B median {mb:.2f} us, B/A {mb / ma:.2f}")


if __name__ == "__main__":
    main()
