"""``python3 -m commux.bench``: options, the plan (which points run in which world), and
the order of a run: raw UCX first (on a machine not yet busy with ranks), then one
fresh world per world size, then the reports.

The exit status is 0 when every world completed, whatever the targets say (they are
performance goals on a noisy shared machine, printed as PASS/MISS, not test failures);
it is 1 when a world failed, hung or timed out, after writing what was measured.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import floor_model, mpi_ops, mpi_peer, raw_ucx, report, runner, targets
from .sizes import OPS, SIZE_CONVENTION, footprint_bytes, format_size, input_bytes, parse_size, size_list

CORES = os.cpu_count() or 1
# A point runs only if all ranks' tensors, twice over (backend staging buffers, gloo's
# and UCX's copies), fit in this share of the memory available when the run starts.
MEMORY_SHARE = 0.6

FULL = dict(ranks="2,4", min_bytes="8", max_bytes="256M", step=4, rounds=5, block_seconds=0.05)
# --quick: what CI can afford (well under a minute) and still every op at 2 ranks.
QUICK = dict(ranks="2", sizes=[8, 64 << 10, 1 << 20], rounds=2, block_seconds=0.02)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python3 -m commux.bench",
        description="Benchmark commux (torch.distributed backend 'ucx') against gloo in the same "
        "processes, next to raw UCX (ucx_perftest), a torch.distributed floor (fake backend) and "
        "the memcpy rate. Sizes take K/M/G suffixes (binary: 64K = 65536).",
    )
    p.add_argument("--ops", default=",".join(OPS), help=f"comma list from {','.join(OPS)} (default: all)")
    p.add_argument("--ranks", help=f"world sizes, comma list (default {FULL['ranks']}; --quick: 2); "
                   "more ranks than cores oversubscribe")
    p.add_argument("--backends", default="ucx,gloo", help="ucx,gloo (default) or ucx")
    p.add_argument("--min-bytes", help=f"smallest size (default {FULL['min_bytes']})")
    p.add_argument("--max-bytes", help=f"largest size (default {FULL['max_bytes']})")
    p.add_argument("--step", type=int, help=f"size factor between points, counted down from "
                   f"--max-bytes (default {FULL['step']}; 2 for every power of two)")
    p.add_argument("--rounds", type=int, help=f"timed blocks per backend and point, interleaved "
                   f"(default {FULL['rounds']}; --quick: {QUICK['rounds']})")
    p.add_argument("--block-seconds", type=float, help="target length of one block; sets the timed "
                   f"iterations per block (default {FULL['block_seconds']}; --quick: {QUICK['block_seconds']})")
    p.add_argument("--max-iters", type=int, default=1000, help="cap on timed iterations per block (1000)")
    p.add_argument("--timeout", type=float, help="hard limit per world in seconds (default: sized "
                   "from the plan, printed at the start of each world)")
    p.add_argument("--stall-timeout", type=float, default=180.0, help="a world in which no rank starts "
                   "a new block for this many seconds is hung and killed (default 180)")
    p.add_argument("--out", default="./commux-bench", help="output folder (default ./commux-bench)")
    p.add_argument("--quick", action="store_true", help="short CI run: 2 ranks, 8 B / 64 KiB / 1 MiB, "
                   "2 rounds, short ucx_perftest")
    p.add_argument("--mpi", action="store_true", help="also run the same points through Open MPI: "
                   "mpi4py on torch tensors and on numpy, in blocks interleaved with ucx and gloo in the "
                   "same ranks (started under mpirun), its C API (mpi_bench.c, compiled with mpicc) "
                   "as a separate world, plus commux's C++ p2p (commux_bench) against Open MPI's; needs mpirun, "
                   "mpicc and mpi4py (scripts/install.sh --mpi)")
    p.add_argument("--pinning", choices=["default", "pinned", "unpinned", "both"], default="default",
                   help="how the ranks are placed on CPUs: default (the launcher's own: commux's "
                   "launcher binds nothing, as torchrun; mpirun binds each rank to a core up to 2 ranks), "
                   "pinned (each rank bound to one CPU, round-robin), unpinned (no binding, mpirun "
                   "--bind-to none under --mpi), or both (every world pinned, then unpinned, and a table "
                   "of the two side by side). Each world prints where its ranks may run")
    p.add_argument("--no-raw-ucx", action="store_true", help="skip ucx_perftest")
    p.add_argument("--no-plot", action="store_true", help="skip results.png and the <op>.png files")
    p.add_argument("--quiet", action="store_true", help="no line per point while measuring")
    return p


def _comma_list(text: str) -> list[str]:
    return [x.strip() for x in text.split(",") if x.strip()]


def _mem_available() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def plan_world(ops: list[str], sizes: list[int], ranks: int, memory: int | None):
    """([op, requested bytes], ...) to measure at ``ranks``, and the points skipped for
    memory. Requested sizes that round to the same measured size are measured once
    (8 B and 16 B are both 16 B for reduce_scatter at 4 ranks)."""
    plan, skipped = [], []
    for op in ops:
        planned = set()
        for nbytes in sizes:
            actual = input_bytes(op, nbytes, ranks)
            if actual in planned:
                continue
            planned.add(actual)
            need = 2 * ranks * footprint_bytes(op, nbytes, ranks)
            if memory is not None and need > MEMORY_SHARE * memory:
                skipped.append(dict(op=op, ranks=ranks, bytes=actual, reason=f"needs ~{need / 2**30:.1f} GiB"))
                continue
            plan.append([op, nbytes])
    return plan, skipped


def estimate_seconds(op: str, nbytes: int, ranks: int, n_backends: int, rounds: int,
                     block_seconds: float) -> float:
    """A pessimistic guess of one point's wall time, for sizing the hard timeout: every
    iteration assumed to move 3x its tensors at 1 GB/s, slowed by oversubscription.
    (The default run took 110 s at 2 ranks and 175 s at 4 against guesses of 2-3x that.)"""
    oversubscription = max(1.0, ranks / CORES)
    t_iter = oversubscription * (1e-3 + 3 * footprint_bytes(op, nbytes, ranks) / 1e9)
    # calibration (~2 iterations or a third of a block) + rounds blocks (+10% warm-up)
    per_backend = 2 * t_iter + block_seconds / 3 + rounds * 1.1 * max(block_seconds, t_iter)
    return n_backends * (per_backend + 0.05)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    base = QUICK if args.quick else FULL
    try:
        ops = _comma_list(args.ops)
        bad = [o for o in ops if o not in OPS]
        if bad or not ops:
            raise ValueError(f"unknown op(s) {bad}; choose from {', '.join(OPS)}")
        backends = _comma_list(args.backends)
        if backends not in (["ucx", "gloo"], ["gloo", "ucx"], ["ucx"]):
            raise ValueError("--backends must be ucx,gloo or ucx")
        world_sizes = [int(x) for x in _comma_list(args.ranks or base["ranks"])]
        if not world_sizes or min(world_sizes) < 2:
            raise ValueError("--ranks: every world needs at least 2 ranks")
        if args.quick and not (args.min_bytes or args.max_bytes or args.step):
            sizes = list(QUICK["sizes"])
        else:
            sizes = size_list(parse_size(args.min_bytes or FULL["min_bytes"]),
                              parse_size(args.max_bytes or FULL["max_bytes"]), args.step or FULL["step"])
        rounds = args.rounds or base["rounds"]
        block_seconds = args.block_seconds or base["block_seconds"]
        if rounds < 1 or block_seconds <= 0 or args.max_iters < 1:
            raise ValueError("--rounds, --block-seconds and --max-iters must be positive")
    except ValueError as error:
        print(f"commux.bench: error: {error}", file=sys.stderr)
        return 2

    if args.mpi and (why := mpi_peer.missing()):
        print(f"commux.bench: error: --mpi: {why}", file=sys.stderr)
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    t_start = time.monotonic()
    print(f"commux.bench: ops {','.join(ops)}; ranks {','.join(map(str, world_sizes))}; backends "
          f"{','.join(backends)}; sizes {format_size(sizes[0])} .. {format_size(sizes[-1])} "
          f"({len(sizes)} sizes); {rounds} rounds of ~{block_seconds} s blocks; {CORES} cores; out {out}",
          flush=True)

    raw = {"rows": [], "tag_lat_us": {}, "tag_bw_gbps": {}, "error": "skipped (--no-raw-ucx)"}
    if not args.no_raw_ucx:
        print("raw UCX (ucx_perftest, server and client on localhost) ...", flush=True)
        raw = raw_ucx.measure(quick=args.quick)
        for size, us in raw["tag_lat_us"].items():
            print(f"  tag_lat {format_size(size)}: {us:.2f} us one way (median of averages)")
        for size, g in raw["tag_bw_gbps"].items():
            print(f"  tag_bw {format_size(size)}: {g:.2f} GB/s")
    if raw["error"]:
        print(f"  raw UCX: {raw['error']}", flush=True)

    mpi_exe, cpp_p2p = None, None
    if args.mpi:
        mpi_exe, why = mpi_peer.compile_c(out)
        if why:
            print(f"  mpi-c: {why}", flush=True)
        cpp_p2p, why = mpi_peer.commux_cpp_p2p()
        if cpp_p2p:
            print(f"commux C++ p2p 8 B (commux_bench --blocking, median of 3 runs): {cpp_p2p['lat_us']:.2f} us mean, "
                  f"{cpp_p2p['lat_median_us']:.2f} us median one way", flush=True)
        else:
            print(f"  commux_bench: {why}", flush=True)

    memory = _mem_available()
    points, worlds, skipped, failures = [], [], [], []
    modes = ["pinned", "unpinned"] if args.pinning == "both" else [args.pinning]
    floors: dict = {mode: {} for mode in modes}  # launch mode -> world size -> floor dict
    pinning: dict = {mode: {} for mode in modes}  # launch mode -> world size -> what the ranks had
    # 64 MiB for the allreduce bound; every planned size from 64 KiB for the floor column.
    memcpy_sizes = sorted({64 << 20, min(256 << 20, max(64 << 20, sizes[-1]))}
                          | {n for n in sizes if 64 << 10 <= n <= 256 << 20})
    for mode in modes:
        if len(modes) > 1:
            print(f"== launch mode: {mode} ==", flush=True)
        for ranks in world_sizes:
            plan, skip = plan_world(ops, sizes, ranks, memory)
            if mode == modes[0]:
                skipped += skip
                for s in skip:
                    print(f"  skipped {s['op']} {format_size(s['bytes'])} at {ranks} ranks: {s['reason']} "
                          f"({MEMORY_SHARE:.0%} of {memory / 2**30:.1f} GiB available)")
            columns = len(backends) + (len(mpi_ops.BACKENDS) if args.mpi else 0)
            estimate = sum(estimate_seconds(op, n, ranks, columns, rounds, block_seconds) for op, n in plan)
            # Generous on purpose: real hangs are caught sooner by the stall limit.
            timeout = args.timeout or 120 + 2 * estimate
            print(f"world of {ranks} ranks: {len(plan)} points, hard timeout {timeout:.0f} s, "
                  f"stall timeout {args.stall_timeout:.0f} s", flush=True)
            spec = dict(backends=backends, points=plan, rounds=rounds, block_seconds=block_seconds,
                        max_iters=args.max_iters, memcpy_sizes=memcpy_sizes,
                        pg_timeout_s=timeout + 60, progress=not args.quiet, mpi=args.mpi)
            folder = f"ranks{ranks}" if len(modes) == 1 else f"{mode}-ranks{ranks}"
            world = runner.run_world(ranks, spec, os.path.join(out, "work", folder), timeout,
                                     args.stall_timeout,
                                     mpi_peer.mpirun_command(ranks, mode) if args.mpi else None,
                                     pinned=mode == "pinned")
            worlds.append(dict(ranks=ranks, launch=mode, seconds=round(world.seconds, 1), error=world.error,
                               points=len(world.result.get("points", [])), planned=len(plan)))
            points += [dict(p, launch=mode) for p in world.result.get("points", [])]
            if affinity := world.result.get("affinity"):
                kind = report.pinning_kind(affinity)
                pinning[mode][ranks] = dict(kind=kind, affinity=affinity)
                print(f"  ranks {report.describe_pinning(affinity)}", flush=True)
                if mode in ("pinned", "unpinned") and kind != mode:
                    print(f"  WARNING: asked for {mode} ranks, got {kind}", flush=True)
            if world.result.get("floor"):
                floors[mode][ranks] = world.result["floor"]
                f = world.result["floor"]
                print(f"  floor: fake send {f.get('fake_send_us', float('nan')):.2f} us, fake recv "
                      f"{f.get('fake_recv_us', float('nan')):.2f} us; memcpy "
                      + ", ".join(f"{format_size(n)} {f[f'memcpy_gbps_{n}']:.2f} GB/s"
                                  for n in memcpy_sizes if f"memcpy_gbps_{n}" in f)
                      + "; fake " + ", ".join(f"{op} {f[f'fake_{op}_us']:.2f} us" for op in OPS
                                              if f"fake_{op}_us" in f))
            if world.stderr:
                print(world.stderr, file=sys.stderr, flush=True)
            print(f"world of {ranks} ranks: {world.seconds:.1f} s", flush=True)
            if world.error:
                failures.append(world.error.splitlines()[0])
                print(f"ERROR: {world.error}", file=sys.stderr, flush=True)
            if mpi_exe:
                t0 = time.monotonic()
                print(f"MPI world of {ranks} ranks (Open MPI C) ...", flush=True)
                got_c, error = mpi_peer.run_c(mpi_exe, ranks, plan, rounds, block_seconds, args.max_iters,
                                              timeout, mode)
                points += [dict(p, launch=mode) for p in got_c]
                for p in got_c if not args.quiet else []:
                    print(f"  [{ranks} ranks] {p['op']:<14} {format_size(p['bytes']):>9}  mpi-c "
                          f"{p['median_us']:10.2f} us", flush=True)
                print(f"MPI world of {ranks} ranks: {time.monotonic() - t0:.1f} s", flush=True)
                if error:
                    failures.append(error.splitlines()[0])
                    print(f"ERROR: {error}", file=sys.stderr, flush=True)
        measured = [p for p in points if p["launch"] == mode]
        points += [dict(p, launch=mode) for p in
                   floor_model.floor_points(measured, floors[mode], CORES, raw["tag_lat_us"].get(8))]

    evaluated = []
    for mode in modes:
        mine = [p for p in points if p["launch"] == mode]
        print()
        if len(modes) > 1:
            print(f"== launch mode: {mode} ==")
        for ranks, seen in sorted(pinning[mode].items()):
            print(f"{ranks} ranks: {report.describe_pinning(seen['affinity'])}")
        print(report.format_table(mine))
        print()
        got = targets.evaluate(mine, floors[mode], raw, cpp_p2p if args.mpi else None)
        print(targets.format_targets(got))
        evaluated += [(mode, t) for t in got]
    if len(modes) > 1:
        print()
        print(report.format_launch_comparison(points, modes))
    print()

    report.write_results_csv(os.path.join(out, "results.csv"), points)
    report.write_raw_csv(os.path.join(out, "raw_ucx.csv"), raw["rows"])
    report.write_json(os.path.join(out, "summary.json"), dict(
        command=sys.argv, cores=CORES, seconds=round(time.monotonic() - t_start, 1),
        worlds=worlds, skipped=skipped, size_convention=SIZE_CONVENTION,
        raw_ucx={k: v for k, v in raw.items() if k != "rows"},
        floor={str(k): v for k, v in floors[modes[0]].items()},
        floor_by_launch={mode: {str(k): v for k, v in f.items()} for mode, f in floors.items()},
        pinning={mode: {str(k): v for k, v in seen.items()} for mode, seen in pinning.items()},
        commux_cpp_p2p=cpp_p2p,
        allreduce_bound="3*(p-1)/p*N / memcpy rate (64 MiB copy_): each rank receives "
                        "2(p-1)/p*N and reduces (p-1)/p*N",
        floor_column="max(1, ranks/cores) * (fake-backend call + least bytes copied per rank / "
                     "memcpy rate); p2p: fake send + recv + tag_lat + bytes / memcpy rate "
                     "(commux.bench.floor_model)",
        targets=[dict(t.__dict__, launch=mode) for mode, t in evaluated],
    ))
    written = ["results.csv", "raw_ucx.csv", "summary.json"]
    for mode in modes:
        suffix = "" if len(modes) == 1 else f"-{mode}"
        why = "--no-plot" if args.no_plot else report.plot(
            os.path.join(out, f"results{suffix}.png"), [p for p in points if p["launch"] == mode], suffix)
        if why:
            print(f"plot skipped: {why}")
            break
        written.append(f"results{suffix}.png, <op>{suffix}.png")
    print(f"wrote {', '.join(written)} to {out}; total {time.monotonic() - t_start:.1f} s")
    for error in failures:
        print(f"ERROR (details above): {error}", file=sys.stderr)
    return 1 if failures else 0
