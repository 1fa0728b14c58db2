"""Soak: a million mixed operations on one group; resident memory and UCX requests must stay flat.

    python3 benchmarks/soak.py [--ops 1000000] [--ranks 2] [--report 100000]

Each rank runs, in a loop, a mix of
  - tagged point-to-point messages posted out of order (receives for tags 3, 2, 1 posted
    before the sends of tags 1, 2, 3), sizes 8 B to 64 KiB;
  - collectives of many sizes (all_reduce 8 B .. 1 MiB over shared memory and UCX,
    broadcast, all_gather, reduce_scatter, barrier);
  - receives that time out on purpose (a tag nobody sends, wait(timeout=1 ms));
  - every --stale-every operations, a collective that times out on purpose on a fresh
    two-rank subgroup (rank 0 gives up before rank 1 joins, so rank 1's message arrives
    after rank 0 cancelled): the subgroup is then destroyed, and the stale message must be
    purged from UCX's unexpected queue (counted in purged_messages).
Every 100,000 operations (--report) rank 0 prints resident memory and the engine's
operations and UCX requests in flight. It fails (exit 1) if memory grows more than
--max-growth-mib per 100k operations after the first report, or if requests are left in
flight at a quiet point. One "operation" is one call that returns a Work.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def soak(rank: int, world: int, args, port: int, out) -> None:
    import commux

    commux.register()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group(
        "ucx", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
        timeout=datetime.timedelta(seconds=120),
    )
    _C = commux.load_extension()
    peer_next, peer_prev = (rank + 1) % world, (rank - 1) % world
    sizes = [2, 16, 128, 1024, 16384]  # float32 elements: 8 B .. 64 KiB
    ar_sizes = [2, 256, 4096, 65536, 262144]  # 8 B .. 1 MiB
    bufs = {n: torch.full((n,), float(rank)) for n in sizes}  # p2p payloads (rewritten)
    ar_bufs = {n: torch.full((n,), float(rank)) for n in ar_sizes}  # never written
    recv_bufs = {n: torch.empty(n) for n in sizes}
    ops = 0
    timeouts = 0
    report_at = args.report
    stale_at = args.stale_every
    stale_done = 0
    rows = []
    start = time.monotonic()
    i = 0
    while ops < args.ops:
        n = sizes[i % len(sizes)]
        # Out of order: receives for tags 3, 2, 1, then sends of 1, 2, 3.
        works = [dist.irecv(recv_bufs[n], src=peer_prev, tag=t) for t in (3, 2, 1)]
        for t in (1, 2, 3):
            bufs[n][0] = float(rank * 10 + t)
            works.append(dist.isend(bufs[n].clone(), dst=peer_next, tag=t))
        for w in works:
            w.wait()
        ops += 6
        m = ar_sizes[i % len(ar_sizes)]
        t = ar_bufs[m].clone()
        dist.all_reduce(t)
        if t[0].item() != sum(range(world)):
            raise AssertionError(f"all_reduce {i}: {t[0].item()}")
        ops += 1
        if i % 4 == 0:
            b = torch.full((n,), float(i) if rank == 0 else -1.0)
            dist.broadcast(b, src=0)
            out_list = [torch.empty(n) for _ in range(world)]
            dist.all_gather(out_list, bufs[n])
            rs = torch.empty(n)
            dist.reduce_scatter(rs, [bufs[n]] * world)
            ops += 3
        if i % 50 == 0:
            dist.barrier()
            ops += 1
        if i % 100 == 0:
            w = dist.irecv(torch.empty(4), src=peer_prev, tag=999_999)  # nobody sends it
            try:
                w.wait(timeout=datetime.timedelta(milliseconds=1))
                raise AssertionError("a receive nobody matched completed")
            except dist.DistBackendError:
                timeouts += 1
            ops += 1
        if args.stale_every and ops >= stale_at:
            stale_at += args.stale_every
            g = dist.new_group([0, 1])
            w = None
            if rank <= 1:
                if rank == 1:
                    time.sleep(0.02)
                # Over UCX (all_gather has no shared-memory path): rank 0's part leaves
                # at once, rank 1's arrives after rank 0 gave up.
                gathered = torch.empty(8)
                w = dist.all_gather_into_tensor(gathered, torch.ones(4), group=g, async_op=True)
                try:
                    w.wait(timeout=datetime.timedelta(milliseconds=1 if rank == 0 else 2000))
                    stale_done += rank == 1
                except dist.DistBackendError:
                    stale_done += rank == 0
                ops += 1
            dist.barrier()  # rank 1's message has reached rank 0
            dist.destroy_process_group(g)
            del g, w
            gc.collect()  # torch keeps the group alive in reference cycles until collected
            if args.verbose and rank == 0:
                time.sleep(0.05)
                print("stale round", stale_done, _C._engine_stats()["purged_messages"], flush=True)
        i += 1
        if ops >= report_at:
            dist.barrier()  # quiet point: nothing of ours is in flight
            stats = _C._engine_stats()
            rows.append((ops, rss_mib(), stats["active_ops"], stats["inflight_requests"],
                         time.monotonic() - start))
            report_at += args.report
            if rank == 0 and args.verbose:
                print(rows[-1], flush=True)
    dist.barrier()
    time.sleep(0.2)  # the last sends' completions are handled
    stats = _C._engine_stats()
    if rank == 0:
        out.put((rows, timeouts, stats, time.monotonic() - start, stale_done))
    dist.destroy_process_group()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", type=int, default=1_000_000)
    p.add_argument("--ranks", type=int, default=2)
    p.add_argument("--report", type=int, default=100_000)
    p.add_argument("--max-growth-mib", type=float, default=2.0)
    p.add_argument("--stale-every", type=int, default=20_000)
    p.add_argument("--verbose", action="store_true", help="print each report as it comes")
    args = p.parse_args()
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=soak, args=(r, args.ranks, args, port, out)) for r in range(args.ranks)]
    for pr in procs:
        pr.start()
    rows, timeouts, final, seconds, stale = out.get()
    for pr in procs:
        pr.join(60)
    print(f"{'ops':>9} {'rss MiB':>8} {'ops in flight':>13} {'UCX requests':>12} {'s':>7}")
    for ops, rss, active, inflight, t in rows:
        print(f"{ops:>9} {rss:>8.1f} {active:>13} {inflight:>12} {t:>7.1f}")
    growth = [(b[1] - a[1]) / ((b[0] - a[0]) / 100_000) for a, b in zip(rows[1:], rows[2:])]
    per_100k = (rows[-1][1] - rows[1][1]) / ((rows[-1][0] - rows[1][0]) / 100_000) if len(rows) > 2 else 0.0
    print(f"{rows[-1][0] if rows else 0} operations in {seconds:.0f} s, {timeouts} timed-out "
          f"receives, {stale} collectives timed out on purpose; rank 0 at the end: {final}")
    print(f"resident memory growth after the first report: {per_100k:+.3f} MiB per 100k ops "
          f"(worst interval {max(growth) if growth else 0:+.3f})")
    ok = per_100k <= args.max_growth_mib and final["inflight_requests"] == 0
    if stale and final["purged_messages"] < stale:
        print(f"only {final['purged_messages']} stale messages purged for {stale} timed-out collectives")
        ok = False
    bad = [pr.exitcode for pr in procs if pr.exitcode != 0]
    if bad:
        print(f"ranks exited with {bad}")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
