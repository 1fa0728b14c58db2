"""The mixed soak that hung the shared-memory path under load (issue 23), as a repeatable run.

    python3 benchmarks/soak_mixed.py [--ranks 2] [--iterations 3000] [--runs 8] [--hog]
                                     [--hang-after 45] [--shm 1]

Each iteration, on every rank, in this order:
  - 4 isend + 4 irecv each way with the ring neighbours, tags posted in three different
    permutations, sizes 1..16K floats;
  - an all_reduce of 8 B..1 MiB, async_op on odd iterations;
  - a broadcast from alternating roots while that all_reduce is in flight;
  - the wait on the all_reduce;
  - an all_gather of 1..3000 floats;
  - every 40th iteration an irecv of a tag nobody sends, waited with a 50 ms timeout.
Every result is checked. `--hog` runs a CPU-bound process beside the ranks (the load under
which the hang showed). A run that makes no progress for --hang-after seconds is a hang:
the script takes a native stack dump of every thread of every rank (gdb) before it kills
them, prints where, and fails. Exit 0 only when every run passed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import random
import socket
import subprocess
import sys
import tempfile
import time


def rank_main(rank: int, world: int, port: int, iterations: int, seed: int, progress: str) -> None:
    import torch
    import torch.distributed as dist

    import commux

    commux.register()
    torch.set_num_threads(1)
    dist.init_process_group(
        "ucx", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=60),
    )
    rng = random.Random(seed)  # same draws on every rank
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    perms = [[0, 1, 2, 3], [3, 2, 1, 0], [2, 0, 3, 1]]
    with open(progress, "w") as out:
        for it in range(iterations):
            sizes = [rng.randint(1, 16384) for _ in range(4)]
            send_perm = perms[it % 3]
            recv_perm = perms[(it + 1) % 3]
            sends = [torch.full((sizes[t],), float(rank * 1000 + t + it)) for t in range(4)]
            recvs = [torch.empty(sizes[t]) for t in range(4)]
            works = [dist.irecv(recvs[t], src=prv, tag=t) for t in recv_perm]
            works += [dist.isend(sends[t], dst=nxt, tag=t) for t in send_perm]
            for w in works:
                w.wait()
            for t in range(4):
                expect = float(prv * 1000 + t + it)
                assert bool((recvs[t] == expect).all()), f"p2p tag {t} iteration {it}"
            ar_n = rng.choice([2, 256, 4096, 16384, 65536, 262144])
            ar = torch.full((ar_n,), float(rank + 1))
            async_ar = it % 2 == 1
            ar_work = dist.all_reduce(ar, async_op=async_ar)
            root = it % world
            bc_n = rng.randint(1, 8192)
            bc = torch.full((bc_n,), float(rank))
            dist.broadcast(bc, src=root)
            if async_ar:
                ar_work.wait()
            assert bool((ar == world * (world + 1) / 2).all()), f"all_reduce iteration {it}"
            assert bool((bc == float(root)).all()), f"broadcast iteration {it}"
            ag_n = rng.randint(1, 3000)
            parts = [torch.empty(ag_n) for _ in range(world)]
            dist.all_gather(parts, torch.full((ag_n,), float(rank)))
            for r, p in enumerate(parts):
                assert bool((p == float(r)).all()), f"all_gather iteration {it}"
            if it % 40 == 0:
                lost = dist.irecv(torch.empty(1), src=prv, tag=999)
                try:
                    lost.wait(timeout=datetime.timedelta(milliseconds=50))
                    raise AssertionError("a receive nobody sends completed")
                except RuntimeError as e:
                    assert "Timed out" in str(e), str(e)
            out.seek(0)
            out.write(f"{it + 1:>10}\n")
            out.flush()
    dist.barrier()
    dist.destroy_process_group()


def dump_stacks(pids: list[int], path: str) -> None:
    with open(path, "w") as out:
        for pid in pids:
            out.write(f"===== pid {pid}\n")
            out.flush()
            subprocess.run(
                ["gdb", "-p", str(pid), "-batch", "-ex", "thread apply all bt",
                 # The shared-memory lane's state, in whichever frame has it.
                 "-ex", "thread apply all -s -q -- frame apply all -s -q -- p this->lane_",
                 "-ex", "thread apply all -s -q -- frame apply all -s -q -- p this->kicked_",
                 "-ex", "thread apply all -s -q -- frame apply all -s -q -- p this->busy_",
                 "-ex", "thread apply all -s -q -- frame apply all -s -q -- p this->queue_"],
                stdout=out, stderr=subprocess.STDOUT, timeout=120, check=False,
            )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_run(args, run: int, seed: int) -> bool:
    tmp = tempfile.mkdtemp(prefix="commux-soak-")
    port = free_port()
    env = dict(os.environ, COMMUX_SHM=str(args.shm), OMP_NUM_THREADS="1")
    procs, progress = [], []
    for rank in range(args.ranks):
        progress.append(os.path.join(tmp, f"rank{rank}.progress"))
        procs.append(subprocess.Popen(
            [sys.executable, __file__, "--rank", str(rank), "--world", str(args.ranks),
             "--port", str(port), "--iterations", str(args.iterations), "--seed", str(seed),
             "--progress", progress[-1]],
            env=env,
        ))
    last, last_change = None, time.monotonic()
    start = time.monotonic()
    while any(p.poll() is None for p in procs):
        time.sleep(1)
        seen = []
        for path in progress:
            try:
                seen.append(open(path).read().strip())
            except OSError:
                seen.append("")
        if seen != last:
            last, last_change = seen, time.monotonic()
        elif time.monotonic() - last_change > args.hang_after:
            dump = os.path.join(tmp, "stacks.txt")
            dump_stacks([p.pid for p in procs if p.poll() is None], dump)
            for p in procs:
                p.kill()
            print(f"run {run} seed {seed}: HANG at iterations {seen}; native stacks of every "
                  f"rank in {dump}", flush=True)
            return False
    codes = [p.returncode for p in procs]
    ok = all(c == 0 for c in codes)
    print(f"run {run} seed {seed}: {'passed' if ok else 'FAILED'} ({args.iterations} iterations, "
          f"{time.monotonic() - start:.0f} s, exit codes {codes})", flush=True)
    return ok


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=3000)
    ap.add_argument("--runs", type=int, default=8)
    ap.add_argument("--hog", action="store_true")
    ap.add_argument("--hang-after", type=float, default=45.0)
    ap.add_argument("--shm", type=int, default=1)
    ap.add_argument("--seed", type=int, default=None)
    # A rank of the job (internal).
    ap.add_argument("--rank", type=int, default=None)
    ap.add_argument("--world", type=int, default=None)
    ap.add_argument("--port", type=int, default=None)
    ap.add_argument("--progress", default=None)
    args = ap.parse_args()
    if args.rank is not None:
        rank_main(args.rank, args.world, args.port, args.iterations, args.seed, args.progress)
        return 0
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if args.hog else None
    try:
        passed = 0
        for run in range(args.runs):
            seed = args.seed if args.seed is not None else random.randrange(1 << 30)
            if not one_run(args, run, seed):
                print(f"soak_mixed: {passed} passed, 1 failed (replay: --seed {seed})")
                return 1
            passed += 1
        print(f"soak_mixed: {passed} passed, 0 failed")
        return 0
    finally:
        if hog is not None:
            hog.kill()


if __name__ == "__main__":
    sys.exit(main())
