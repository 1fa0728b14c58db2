"""What creating a process group and using it the first time cost, at 2..64 ranks on this host.

    python3 benchmarks/bootstrap.py [--ranks 2,4,8,16,32,64] [--backends ucx,gloo]
                                    [--repeats 1] [--out DIR] [--label NAME] [--per-host K]

For every world size N and backend, N rank processes start (environment as torchrun sets it:
RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE), import torch (and commux), then wait for a
common start signal, so that interpreter start-up is not part of what is measured. Each rank
then times

* init:      ``init_process_group(backend, store=...)``,
* allreduce: the first ``all_reduce`` of a small tensor (--bytes),
* total:     the two together (group creation plus first use),
* barrier:   a ``barrier()`` right after (the second collective, for contrast),
* load:      (ucx) loading commux's extension and UCX, once per process whatever N; done
             before the start signal, so it is not in init (torch loads it in its first
             init_process_group),

and the table gives the slowest rank (max) and the median. ``wall`` is from the start signal
to the last rank's end of the first allreduce.

Store operations: every rank hands ``init_process_group`` a counting wrapper (a Python
``torch.distributed.Store``) around its TCPStore client; torch's PrefixStore and the backend's
C++ calls reach it through the PyStore trampoline. It counts set/get/add/check/wait/
multi_get/... per phase, the keys a multi_get asked for, and the bytes get/multi_get
returned. ``ops`` in the table is init plus first allreduce per rank (max over ranks, and
rank 0, which hosts no store here: the parent does). A TCPStore get or multi_get is two round
trips (it waits for the keys first), whatever the number of keys.

--per-host K splits the ranks into "hosts" of K (COMMUX_HOST, LOCAL_RANK, LOCAL_WORLD_SIZE
as on K-rank nodes), so that the group spans hosts and the first allreduce runs in parts.
With COMMUX_FAILURE_DETECTION=ucx in the environment every watched rank of another
"host" costs a UCX endpoint, as on real hosts (here they share a PID namespace, where a
pidfd would do). Then ``records`` (the peer records a rank read: ``known_ranks``) and
``endpoints`` show what watching costs per rank.

The machine is shared and small: beyond its core count the ranks are oversubscribed, so the
times grow with N for that reason too; compare backends and builds within one run.
Output: results.md (the table), results.csv (one row per world), ranks.csv (one row per
rank) under --out. --before DIR measures another commux build (pip install --target DIR of
an older commit) in the same run, as backend ``ucx@before``.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

STORE_OPS = ("set", "get", "add", "check", "wait", "compare_set", "delete_key", "num_keys",
             "multi_get", "multi_set", "append")
PHASES = ("init", "allreduce", "barrier")


# --------------------------------------------------------------------------------------
# One rank
# --------------------------------------------------------------------------------------


def _counting_store(real):
    import torch.distributed as dist

    class CountingStore(dist.Store):
        """Forwards to `real` and counts calls per phase (set by the rank)."""

        def __init__(self):
            super().__init__()
            self.phase = "init"
            self.counts = {p: {} for p in PHASES + ("teardown",)}
            self.keys = {p: 0 for p in PHASES + ("teardown",)}
            self.bytes = {p: 0 for p in PHASES + ("teardown",)}

        def _count(self, op, keys=1):
            c = self.counts[self.phase]
            c[op] = c.get(op, 0) + 1
            self.keys[self.phase] += keys

        def set(self, key, value):
            self._count("set")
            return real.set(key, value)

        def get(self, key):
            self._count("get")
            value = real.get(key)
            self.bytes[self.phase] += len(value)
            return value

        def add(self, key, value):
            self._count("add")
            return real.add(key, value)

        def check(self, keys):
            self._count("check", len(keys))
            return real.check(keys)

        def wait(self, keys, *timeout):
            self._count("wait", len(keys))
            return real.wait(keys, *timeout)

        def compare_set(self, key, expected, desired):
            self._count("compare_set")
            return real.compare_set(key, expected, desired)

        def delete_key(self, key):
            self._count("delete_key")
            return real.delete_key(key)

        def num_keys(self):
            self._count("num_keys")
            return real.num_keys()

        def multi_get(self, keys):
            self._count("multi_get", len(keys))
            values = real.multi_get(keys)
            self.bytes[self.phase] += sum(len(v) for v in values)
            return values

        def multi_set(self, keys, values):
            self._count("multi_set", len(keys))
            return real.multi_set(keys, values)

        def append(self, key, value):
            self._count("append")
            return real.append(key, value)

        def has_extended_api(self):
            return real.has_extended_api()

        def set_timeout(self, timeout):
            return real.set_timeout(timeout)

        @property
        def timeout(self):
            return real.timeout

    return CountingStore()


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def worker(args) -> int:
    import torch
    import torch.distributed as dist

    backend = args.backend.split("@")[0]
    load_s = 0.0
    if backend == "ucx":
        import commux

        commux.register()
        # Loading commux's extension and UCX (dlopen, ~0.4 s here) happens once per process
        # whatever the group size; done before the start and shown apart (column load).
        t = time.perf_counter()
        commux.load_extension()
        load_s = time.perf_counter() - t
    torch.set_num_threads(1)
    timeout = datetime.timedelta(seconds=args.timeout)
    real = dist.TCPStore("127.0.0.1", args.port, is_master=False, timeout=timeout,
                         wait_for_workers=False)
    store = real if args.no_count else _counting_store(real)
    # Start together: what is timed below is bootstrap, not interpreter start-up.
    real.add("bench/ready", 1)
    real.wait(["bench/go"])
    t0 = time.perf_counter()
    dist.init_process_group(backend, store=store, rank=args.rank, world_size=args.world,
                            timeout=timeout)
    t1 = time.perf_counter()
    if not args.no_count:
        store.phase = "allreduce"
    x = torch.ones(max(args.bytes // 4, 1))
    dist.all_reduce(x)
    t2 = time.perf_counter()
    end_of_first = time.time()
    if not args.no_count:
        store.phase = "barrier"
    dist.barrier()
    t3 = time.perf_counter()
    if not args.no_count:
        store.phase = "teardown"
    if not bool((x == args.world).all()):
        raise RuntimeError(f"rank {args.rank}: allreduce gave {x[0].item()}, expected {args.world}")
    times = {"init": t1 - t0, "allreduce": t2 - t1, "total": t2 - t0, "barrier": t3 - t2,
             "load": load_s}
    out = {"rank": args.rank, "times": times, "end_of_first": end_of_first, "rss_mib": _rss_mib()}
    if not args.no_count:
        out["counts"] = {p: store.counts[p] for p in PHASES}
        out["keys"] = {p: store.keys[p] for p in PHASES}
        out["bytes"] = {p: store.bytes[p] for p in PHASES}
    if backend == "ucx":
        import commux

        C = commux.load_extension()
        out["endpoints"] = C._engine_stats()["endpoints"]
        pg = dist.group.WORLD._get_backend(torch.device("cpu"))
        if hasattr(pg, "known_ranks"):  # builds before it read every record
            out["records"] = len(pg.known_ranks())
        if hasattr(C, "ucx_context_hints"):
            out["ucx_hints"] = C.ucx_context_hints()
    # One line the parent parses (stdout may carry other output before it).
    print("BOOTSTRAP-RESULT " + json.dumps(out), flush=True)
    # Nobody leaves while another rank may still finish its barrier: a rank that exits is
    # a rank that died to the others (at once through UCX's error handling).
    real.set(f"bench/done/{args.rank}", "1")
    real.wait([f"bench/done/{r}" for r in range(args.world)])
    dist.destroy_process_group()
    return 0


# --------------------------------------------------------------------------------------
# The parent: one world at a time
# --------------------------------------------------------------------------------------


def run_world(backend: str, n: int, args, before: str | None) -> dict:
    import torch.distributed as dist

    startup_s = 30 + 3 * n  # importing torch n times on a few cores
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=datetime.timedelta(seconds=startup_s + args.timeout))
    env = dict(os.environ)
    if before:
        env["PYTHONPATH"] = before + os.pathsep + env.get("PYTHONPATH", "")
    logs = tempfile.TemporaryDirectory(prefix="bootstrap-")
    procs, files = [], []
    k = args.per_host or n
    for r in range(n):
        env_r = dict(env, RANK=str(r), WORLD_SIZE=str(n), LOCAL_RANK=str(r % k),
                     LOCAL_WORLD_SIZE=str(k))
        if args.per_host:
            env_r["COMMUX_HOST"] = f"bench-host{r // k}"

        cmd = [sys.executable, os.path.abspath(__file__), "--_worker", "--_rank", str(r),
               "--_world", str(n), "--_port", str(master.port), "--_backend", backend,
               "--bytes", str(args.bytes), "--timeout", str(args.timeout)]
        if args.no_count:
            cmd.append("--no-count")
        # Files, not pipes: a rank that writes much must never block on a full pipe.
        out_f = open(os.path.join(logs.name, f"{r}.out"), "w+")
        err_f = open(os.path.join(logs.name, f"{r}.err"), "w+")
        files.append((out_f, err_f))
        procs.append(subprocess.Popen(cmd, env=env_r, stdout=out_f, stderr=err_f,
                                      start_new_session=True, stdin=subprocess.DEVNULL))
    error = None
    try:
        deadline = time.monotonic() + startup_s
        while master.add("bench/ready", 0) < n:
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {master.add('bench/ready', 0)} of {n} ranks started "
                                   f"within {startup_s} s")
            if any(p.poll() is not None for p in procs):
                raise RuntimeError("a rank exited before the start")
            time.sleep(0.05)
        go = time.time()
        master.set("bench/go", "1")
        deadline = time.monotonic() + args.timeout
        for r, p in enumerate(procs):
            left = max(deadline - time.monotonic(), 0.1)
            try:
                p.wait(timeout=left)
            except subprocess.TimeoutExpired:
                raise TimeoutError(f"TIMED OUT after {args.timeout} s (rank {r} still running)")
    except (TimeoutError, RuntimeError) as e:
        error = str(e)
    finally:
        for p in procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in procs:
            p.wait()
    outs = []
    for out_f, err_f in files:
        out_f.seek(0)
        err_f.seek(0)
        outs.append((out_f.read(), err_f.read()))
        out_f.close()
        err_f.close()
    logs.cleanup()
    if error is not None and "TIMED OUT" in error:
        stuck = [r for r, p in enumerate(procs) if p.returncode == -signal.SIGKILL]
        error += f"; killed ranks {stuck}; rank {stuck[0] if stuck else 0} stderr: " + \
            outs[stuck[0] if stuck else 0][1][-800:]
    if error is None:
        ranks = []
        for r, (stdout, stderr) in enumerate(outs):
            line = next((l for l in stdout.splitlines() if l.startswith("BOOTSTRAP-RESULT ")), None)
            if procs[r].returncode != 0 or line is None:
                error = f"rank {r} exit {procs[r].returncode}: {stderr[-1500:]}"
                break
            ranks.append(json.loads(line[len("BOOTSTRAP-RESULT "):]))
    if error is not None:
        return {"backend": backend, "ranks": n, "error": error}
    return summarize(backend, n, ranks, go)


def _ops(rank: dict, phases) -> int:
    return sum(sum(rank["counts"][p].values()) for p in phases)


def summarize(backend: str, n: int, ranks: list, go: float) -> dict:
    row = {"backend": backend, "ranks": n, "error": ""}
    for what in ("init", "allreduce", "total", "barrier", "load"):
        values = [r["times"][what] for r in ranks]
        row[f"{what}_max_ms"] = max(values) * 1e3
        row[f"{what}_median_ms"] = statistics.median(values) * 1e3
    row["wall_ms"] = (max(r["end_of_first"] for r in ranks) - go) * 1e3
    row["rss_max_mib"] = max(r["rss_mib"] for r in ranks)
    if "counts" in ranks[0]:
        first = ("init", "allreduce")
        per_rank = [_ops(r, first) for r in ranks]
        row["ops_max"] = max(per_rank)
        row["ops_median"] = statistics.median(per_rank)
        row["ops_rank0"] = per_rank[0]
        row["ops_init_max"] = max(_ops(r, ("init",)) for r in ranks)
        row["ops_allreduce_max"] = max(_ops(r, ("allreduce",)) for r in ranks)
        row["ops_barrier_max"] = max(_ops(r, ("barrier",)) for r in ranks)
        row["ops_total_all_ranks"] = sum(per_rank)
        row["keys_read_max"] = max(r["keys"]["init"] + r["keys"]["allreduce"] for r in ranks)
        row["bytes_read_max"] = max(r["bytes"]["init"] + r["bytes"]["allreduce"] for r in ranks)
        # The busiest rank's calls by kind (init + first allreduce).
        busiest = ranks[per_rank.index(max(per_rank))]
        kinds = {}
        for p in first:
            for op, c in busiest["counts"][p].items():
                kinds[op] = kinds.get(op, 0) + c
        row["ops_by_kind_busiest"] = " ".join(f"{op}={kinds[op]}" for op in STORE_OPS if op in kinds)
    if "endpoints" in ranks[0]:
        row["endpoints_max"] = max(r["endpoints"] for r in ranks)
        row["endpoints_median"] = statistics.median(r["endpoints"] for r in ranks)
    if "records" in ranks[0]:
        row["records_max"] = max(r["records"] for r in ranks)
        row["records_median"] = statistics.median(r["records"] for r in ranks)
    if "ucx_hints" in ranks[0]:
        row["ucx_hints"] = json.dumps(ranks[0]["ucx_hints"], sort_keys=True)
    row["_per_rank"] = ranks
    return row


COLUMNS = [
    ("backend", "backend", "{}"), ("ranks", "N", "{}"),
    ("init_max_ms", "init max ms", "{:.0f}"), ("init_median_ms", "init med", "{:.0f}"),
    ("allreduce_max_ms", "1st allreduce max ms", "{:.1f}"),
    ("allreduce_median_ms", "1st ar med", "{:.1f}"),
    ("total_max_ms", "total max ms", "{:.0f}"), ("total_median_ms", "total med", "{:.0f}"),
    ("barrier_max_ms", "next barrier max ms", "{:.1f}"), ("wall_ms", "wall ms", "{:.0f}"),
    ("load_max_ms", "load max ms", "{:.0f}"),
    ("ops_max", "store ops/rank max", "{}"), ("ops_rank0", "rank 0", "{}"),
    ("bytes_read_max", "bytes read/rank", "{}"), ("ops_by_kind_busiest", "busiest rank's ops", "{}"),
    ("records_max", "records max", "{}"), ("records_median", "records med", "{:.0f}"),
    ("endpoints_max", "endpoints max", "{}"), ("endpoints_median", "endpoints med", "{:.0f}"),
]


def markdown(rows: list, label: str) -> str:
    lines = []
    if label:
        lines.append(f"build: {label}\n")
    lines.append("| " + " | ".join(h for _, h, _ in COLUMNS) + " |")
    lines.append("|" + "|".join("---" for _ in COLUMNS) + "|")
    for row in rows:
        if row.get("error"):
            lines.append(f"| {row['backend']} | {row['ranks']} | FAILED: {row['error'][:200]} |")
            continue
        cells = [fmt.format(row[k]) if k in row else "-" for k, _, fmt in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


CONDENSED = [("init_max_ms", "init"), ("allreduce_max_ms", "1st allreduce"),
             ("total_max_ms", "total"), ("wall_ms", "wall")]


def condensed(rows: list) -> str:
    """One line per (backend, N): the median over repeats of each world's slowest rank."""
    groups = {}
    for row in rows:
        if not row.get("error"):
            groups.setdefault((row["ranks"], row["backend"]), []).append(row)
    head = ["N", "backend", "worlds"] + [f"{h} ms" for _, h in CONDENSED] + \
        ["store ops/rank", "busiest rank's ops"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for (n, backend), group in sorted(groups.items(), key=lambda kv: kv[0][0]):
        cells = [str(n), backend, str(len(group))]
        cells += [f"{statistics.median(float(r[k]) for r in group):.0f}" for k, _ in CONDENSED]
        cells += [str(group[0].get("ops_max", "-")), str(group[0].get("ops_by_kind_busiest", "-"))]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4,8,16,32,64", help="world sizes, comma-separated")
    ap.add_argument("--backends", default="ucx,gloo")
    ap.add_argument("--repeats", type=int, default=1, help="worlds per (backend, N), interleaved")
    ap.add_argument("--bytes", type=int, default=32, help="size of the allreduced tensor")
    ap.add_argument("--timeout", type=float, default=None,
                    help="seconds a world may take once started (default 60 + 2 s per rank)")
    ap.add_argument("--out", default="bootstrap-results")
    ap.add_argument("--label", default="", help="a name for the build measured (in the table)")
    ap.add_argument("--before", metavar="DIR",
                    help="also measure the commux installed in DIR, as backend ucx@before")
    ap.add_argument("--per-host", type=int, default=0, metavar="K",
                    help="ranks per \"host\" (COMMUX_HOST): the group spans N/K hosts")
    ap.add_argument("--no-count", action="store_true",
                    help="hand torch the TCPStore itself (no counting wrapper, no Python in "
                         "the store path)")
    ap.add_argument("--_worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--_rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--_backend", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args._worker:
        args.rank, args.world, args.port, args.backend = args._rank, args._world, args._port, args._backend
        return worker(args)

    sizes = [int(s) for s in args.ranks.split(",") if s]
    backends = [b for b in args.backends.split(",") if b]
    if args.before:
        backends.append("ucx@before")
    os.makedirs(args.out, exist_ok=True)
    rows, failed = [], False
    for n in sizes:
        timeout = args.timeout if args.timeout is not None else 60 + 2 * n
        for rep in range(args.repeats):
            for backend in backends:
                sub = argparse.Namespace(**vars(args))
                sub.timeout = timeout
                t = time.monotonic()
                row = run_world(backend, n, sub, args.before if backend == "ucx@before" else None)
                row["repeat"] = rep
                rows.append(row)
                if row["error"]:
                    failed = True
                    print(f"{backend:>10} N={n:<3} FAILED: {row['error']}", file=sys.stderr, flush=True)
                else:
                    print(f"{backend:>10} N={n:<3} init {row['init_max_ms']:7.0f} ms  first allreduce "
                          f"{row['allreduce_max_ms']:7.1f} ms  total {row['total_max_ms']:7.0f} ms  "
                          f"ops/rank {row.get('ops_max', '-')}  ({time.monotonic() - t:.0f} s)",
                          flush=True)
    table = markdown(rows, args.label)
    if args.repeats > 1:
        table += "\nMedian over the repeats of each world's slowest rank:\n\n" + condensed(rows)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    fields = []
    for row in rows:
        for k in row:
            if not k.startswith("_") and k not in fields:
                fields.append(k)
    with open(os.path.join(args.out, "results.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        for row in rows:
            w.writerow({k: v for k, v in row.items() if not k.startswith("_")})
    with open(os.path.join(args.out, "ranks.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["backend", "ranks", "repeat", "rank", "init_ms", "allreduce_ms", "total_ms",
                    "barrier_ms", "load_ms", "rss_mib", "ops_init", "ops_allreduce", "ops_barrier",
                    "bytes_read", "counts"])
        for row in rows:
            for r in row.get("_per_rank", []):
                t = r["times"]
                counted = "counts" in r
                w.writerow([row["backend"], row["ranks"], row["repeat"], r["rank"],
                            f"{t['init'] * 1e3:.3f}", f"{t['allreduce'] * 1e3:.3f}",
                            f"{t['total'] * 1e3:.3f}", f"{t['barrier'] * 1e3:.3f}",
                            f"{t['load'] * 1e3:.3f}",
                            f"{r['rss_mib']:.1f}",
                            _ops(r, ("init",)) if counted else "",
                            _ops(r, ("allreduce",)) if counted else "",
                            _ops(r, ("barrier",)) if counted else "",
                            r["bytes"]["init"] + r["bytes"]["allreduce"] if counted else "",
                            json.dumps(r["counts"], sort_keys=True) if counted else ""])
    print()
    print(table)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
