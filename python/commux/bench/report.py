"""What a run leaves behind: the printed table, results.csv, raw_ucx.csv, summary.json,
results.png and one <op>.png per op.

GB/s is decimal (10**9 B/s) and "algorithm bandwidth": bytes / time, with bytes as
defined per op in sizes.py and, for p2p, the one-way time. It is a speed per size, not
a link rate; only the p2p figure is comparable to ucx_perftest's tag_bw.
"""

from __future__ import annotations

import csv
import json
import os

from .sizes import OPS, SIZE_CONVENTION, format_size

RESULT_FIELDS = ["op", "ranks", "bytes", "backend", "median_us", "min_us", "iterations",
                 "warmup", "blocks", "gbps", "requested_bytes", "size_convention", "launch"]
RAW_FIELDS = ["test", "bytes", "repeat", "iterations", "lat_p50_us", "lat_avg_us",
              "lat_overall_us", "bw_avg_MiBps", "bw_overall_MiBps", "msgrate_avg",
              "msgrate_overall", "gbps", "gbps_from_latency"]


def _sorted(points: list[dict]) -> list[dict]:
    return sorted(points, key=lambda p: (OPS.index(p["op"]), p["ranks"], p["bytes"], p["backend"],
                                         p.get("launch") or ""))


def gbps(point: dict) -> float:
    return point["bytes"] / (point["median_us"] * 1e3) if point["median_us"] > 0 else 0.0


BACKENDS = ("ucx", "gloo", "mpi-c", "mpi4py-torch", "mpi4py-numpy", "floor")
_SHORT = {"ucx": "ucx", "gloo": "gloo", "mpi-c": "mpiC", "mpi4py-torch": "m4py-t", "mpi4py-numpy": "m4py-np",
          "floor": "floor"}


def format_table(points: list[dict]) -> str:
    """One line per (op, ranks, bytes): every backend's median side by side, and each
    other backend's time over ucx's (above 1: ucx is faster)."""
    rows: dict = {}
    for p in _sorted(points):
        rows.setdefault((p["op"], p["ranks"], p["bytes"]), {})[p["backend"]] = p
    present = [b for b in BACKENDS if any(p["backend"] == b for p in points)]
    others = [b for b in present if b != "ucx"]
    lines = [
        "median time per operation over interleaved blocks (max over ranks per block);",
        "p2p = one way (half a blocking send/recv round trip between ranks 0 and 1);",
        "bytes = each rank's INPUT tensor (float32): allgather output = ranks*bytes,",
        "reduce_scatter output = bytes/ranks; GB/s = bytes / ucx time (10^9 B/s);",
        "X/ucx = X's time / ucx's (above 1: ucx faster).",
    ]
    if "floor" in present:
        lines.append("floor = torch.distributed's own cost of the call (fake backend) + the least copying "
                     "at the memcpy rate (+ UCX tag_lat for p2p), x ranks/cores when oversubscribed "
                     "(floor_model.py).")
    if any(b.startswith("mpi") for b in present):
        lines.append("m4py-t/-np = mpi4py on torch tensors / numpy, in blocks interleaved with ucx and gloo "
                     "in the same ranks; mpiC = Open MPI's C API, a separate mpirun world of the same run.")
    lines.append("")
    lines.append(f"{'op':<15}{'ranks':>5}{'bytes':>11}"
                 + "".join(f"{_SHORT[b] + '_us':>12}" for b in present)
                 + "".join(f"{_SHORT[b] + '/ucx':>11}" for b in others) + f"{'ucx GB/s':>10}")
    if not rows:
        lines.append("(no results)")
    last_op = None
    for (op, ranks, nbytes), by in rows.items():
        if last_op is not None and op != last_op:
            lines.append("")
        last_op = op
        u = by.get("ucx")
        line = f"{op:<15}{ranks:>5}{format_size(nbytes):>11}"
        for b in present:
            line += f"{by[b]['median_us']:>12.1f}" if b in by else f"{'-':>12}"
        for b in others:
            line += (f"{by[b]['median_us'] / u['median_us']:>10.2f}x" if u and b in by and u["median_us"] > 0
                     else f"{'-':>11}")
        line += f"{gbps(u):>10.3f}" if u else f"{'-':>10}"
        lines.append(line)
    return "\n".join(lines)


def _cpu_text(cpus: list[int]) -> str:
    """0-3,6 for [0, 1, 2, 3, 6]."""
    runs, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            runs.append(str(c) if c == start else f"{start}-{c}")
            start = None
    return ",".join(runs) or "none"


def pinning_kind(affinity: list[list[int]]) -> str:
    """"unpinned" (every rank may run on every CPU any rank may use), "pinned" (every rank
    bound to fewer: one CPU, or a core's hyperthreads) or "mixed", from each rank's CPUs
    (sched_getaffinity)."""
    every = sorted({c for cpus in affinity for c in cpus})
    if affinity and all(sorted(cpus) == every for cpus in affinity):
        return "unpinned"
    if affinity and all(len(cpus) < len(every) for cpus in affinity):
        return "pinned"
    return "mixed"


def describe_pinning(affinity: list[list[int]]) -> str:
    """One line: the kind, and where each rank may run."""
    kind = pinning_kind(affinity)
    if kind == "unpinned":
        return f"unpinned: every rank may run on CPUs {_cpu_text(sorted(affinity[0]))}"
    return f"{kind}: " + ", ".join(f"rank {r} on CPU {_cpu_text(sorted(cpus))}"
                                    for r, cpus in enumerate(affinity))


def format_launch_comparison(points: list[dict], modes: list[str]) -> str:
    """ucx (and mpi4py on torch, after --mpi) in each launch mode side by side, per point:
    what pinning the ranks changes."""
    a, b = modes[0], modes[1]
    by: dict = {}
    for p in _sorted(points):
        by.setdefault((p["op"], p["ranks"], p["bytes"]), {})[(p["backend"], p.get("launch"))] = p
    shown = [x for x in ("ucx", "mpi4py-torch", "floor")
             if any(p["backend"] == x for p in points)]
    lines = [f"launch modes side by side: {a} vs {b} (median us; {b}/{a} above 1: {b} slower; "
             f"ucx/m4py-t above 1: commux slower than mpi4py on torch in that mode)", ""]
    head = f"{'op':<15}{'ranks':>5}{'bytes':>11}"
    for x in shown:
        head += f"{_SHORT[x] + ' ' + a[:3]:>13}{_SHORT[x] + ' ' + b[:3]:>13}{b[:3] + '/' + a[:3]:>9}"
    if "mpi4py-torch" in shown:
        head += f"{'ucx/m4py-t ' + a[:3]:>17}{'ucx/m4py-t ' + b[:3]:>17}"
    lines.append(head)
    last_op = None
    for (op, ranks, nbytes), got in by.items():
        if last_op is not None and op != last_op:
            lines.append("")
        last_op = op
        line = f"{op:<15}{ranks:>5}{format_size(nbytes):>11}"
        for x in shown:
            pa, pb = got.get((x, a)), got.get((x, b))
            line += f"{pa['median_us']:>13.1f}" if pa else f"{'-':>13}"
            line += f"{pb['median_us']:>13.1f}" if pb else f"{'-':>13}"
            line += (f"{pb['median_us'] / pa['median_us']:>8.2f}x" if pa and pb and pa["median_us"] > 0
                     else f"{'-':>9}")
        if "mpi4py-torch" in shown:
            for mode in (a, b):
                u, m = got.get(("ucx", mode)), got.get(("mpi4py-torch", mode))
                line += (f"{u['median_us'] / m['median_us']:>16.2f}x" if u and m and m["median_us"] > 0
                         else f"{'-':>17}")
        lines.append(line)
    return "\n".join(lines)


def write_results_csv(path: str, points: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RESULT_FIELDS, extrasaction="ignore")
        w.writeheader()
        for p in _sorted(points):
            w.writerow(dict(p, gbps=f"{gbps(p):.6g}", median_us=f"{p['median_us']:.4f}",
                            min_us=f"{p['min_us']:.4f}", size_convention=SIZE_CONVENTION[p["op"]]))


def write_raw_csv(path: str, rows: list[dict]) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=RAW_FIELDS, extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)


def write_json(path: str, data: dict) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=1, sort_keys=True)


# Every column of the table, in the order it is read: commux first, then what it is held
# against. The MPI ones are there after a --mpi run.
PLOT_BACKENDS = [("ucx", "commux"), ("gloo", "gloo"), ("mpi-c", "Open MPI C"),
                 ("mpi4py-torch", "mpi4py, torch"), ("mpi4py-numpy", "mpi4py, numpy"),
                 ("floor", "floor (torch call + copies)")]
_RANK_STYLES = ["-o", "--s", ":^", "-.v", "-x", "--d"]


def _draw(ax, op: str, points: list[dict], colors: list[str]) -> None:
    all_ranks = sorted({p["ranks"] for p in points if p["op"] == op})
    for b, (backend, label) in enumerate(PLOT_BACKENDS):
        for i, ranks in enumerate(all_ranks):
            sel = sorted((p["bytes"], p["median_us"]) for p in points
                         if p["op"] == op and p["ranks"] == ranks and p["backend"] == backend)
            if sel:
                ax.loglog(*zip(*sel), _RANK_STYLES[i % len(_RANK_STYLES)],
                          color="black" if backend == "floor" else colors[b % len(colors)],
                          markersize=3, linewidth=2.2 if backend == "ucx" else 1.0,
                          label=f"{label}, {ranks} ranks")
    ax.set_title(f"{op} ({SIZE_CONVENTION[op]})", fontsize=9)
    ax.set_xlabel("bytes")
    ax.set_ylabel("us (one way)" if op == "p2p" else "us")
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=6)


def plot(path: str, points: list[dict], suffix: str = "") -> str | None:
    """results.png (one subplot per op) and, next to it, <op>.png for each op: time vs
    bytes (log-log), a line per backend (commux, gloo, and Open MPI C and mpi4py on torch
    tensors and numpy after --mpi, and the floor) and world size; ``suffix`` ends the
    per-op files' names (one set per launch mode). Returns why it was skipped, or None."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "matplotlib is not installed (pip install matplotlib)"
    ops = [op for op in OPS if any(p["op"] == op for p in points)]
    if not ops:
        return "no results to plot"
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    title = "median time per operation (lower is better)"
    cols = min(3, len(ops))
    rows = -(-len(ops) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 4 * rows), squeeze=False)
    for ax, op in zip(axes.flat, ops):
        _draw(ax, op, points, colors)
    for ax in list(axes.flat)[len(ops):]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    folder = os.path.dirname(path)
    for op in ops:
        fig, ax = plt.subplots(figsize=(7, 5))
        _draw(ax, op, points, colors)
        fig.suptitle(f"{op}: {title}", fontsize=10)
        fig.tight_layout()
        fig.savefig(os.path.join(folder, f"{op}{suffix}.png"), dpi=110)
        plt.close(fig)
    return None
