"""The performance targets, evaluated on one run's numbers: each is PASS or MISS with the
numbers that decided it (or N/A when the run did not measure what it needs).

Every ratio compares numbers taken in the same run, most of them in the same processes
block by block, because absolute times on this shared machine drift by 2x.

* p2p 8 B, 2 ranks: one-way ucx time / floor <= 1.25, where the floor is
  ucx_perftest tag_lat (one way) + fake-backend send + fake-backend recv (floor.py): raw
  UCX plus the torch.distributed layer, the least a c10d backend could take. And
  ucx / gloo <= 1/3.
* p2p 64 MiB, 2 ranks: ucx bandwidth / ucx_perftest tag_bw (64 MiB) >= 0.85, and ucx
  faster than gloo.
* allreduce, per world size: ucx / gloo <= 0.2 up to 64 KiB and <= 1 at every size;
  from 16 MiB up, ucx time / bound <= 1.5 with
      bound = 3 (p-1)/p N bytes / memcpy rate (64 MiB copy_, one thread),
  since in a ring allreduce each rank receives 2 (p-1)/p N bytes and reduces (p-1)/p N.
* allgather, reduce_scatter, broadcast, alltoall, per world size: ucx / gloo <= 1.
"""

from __future__ import annotations

from dataclasses import dataclass

from .sizes import OPS, format_size

MEMCPY_BOUND_BYTES = 64 << 20


@dataclass
class Target:
    name: str
    status: str  # PASS, MISS or N/A
    detail: str


def _pairs(points: list[dict]) -> dict:
    """(op, ranks, bytes) -> {backend: point}."""
    table: dict = {}
    for p in points:
        table.setdefault((p["op"], p["ranks"], p["bytes"]), {})[p["backend"]] = p
    return table


def allreduce_bound_us(nbytes: int, ranks: int, memcpy_gbps: float) -> float:
    """3 (p-1)/p N / memcpy rate, in microseconds (see the module docstring)."""
    return 3 * (ranks - 1) / ranks * nbytes / (memcpy_gbps * 1e9) * 1e6


def _ratio_target(name, pairs, limit, other="gloo", what="sizes") -> Target:
    """Worst ucx/other over ``pairs`` [(label, ucx_us, other_us)] against ``limit``."""
    if not pairs:
        return Target(name, "N/A", "not measured")
    ratios = [(u / g, label, u, g) for label, u, g in pairs]
    worst = max(ratios)
    misses = [r for r in ratios if r[0] > limit]
    detail = (f"worst {worst[1]}: ucx {worst[2]:.1f} us / {other} {worst[3]:.1f} us = {worst[0]:.3f}"
              f" (limit {limit:.3g}); {len(ratios) - len(misses)}/{len(ratios)} {what} within")
    if misses:
        detail += "; misses: " + ", ".join(f"{label} {r:.2f}" for r, label, _, _ in sorted(misses, reverse=True))
    return Target(name, "MISS" if misses else "PASS", detail)


def evaluate(points: list[dict], floors: dict, raw: dict, cpp_p2p: dict | None = None) -> list[Target]:
    """``floors``: world size -> that world's floor dict; ``raw``: raw_ucx.measure();
    ``cpp_p2p``: commux_bench's 8 B latency when the MPI peer ran (mpi_peer)."""
    table = _pairs(points)
    ranks_measured = sorted({p["ranks"] for p in points})
    out: list[Target] = []

    def get(op, ranks, nbytes, backend):
        return table.get((op, ranks, nbytes), {}).get(backend)

    # p2p is judged at 2 ranks (no idle peers competing for the 2 cores).
    p2p_ranks = 2
    floor = floors.get(p2p_ranks, {})
    lat = raw.get("tag_lat_us", {}).get(8)
    u8, g8 = get("p2p", p2p_ranks, 8, "ucx"), get("p2p", p2p_ranks, 8, "gloo")
    name = "p2p 8 B, 2 ranks: ucx / (tag_lat + fake send + fake recv) <= 1.25"
    if u8 and lat is not None and "fake_send_us" in floor:
        f = lat + floor["fake_send_us"] + floor["fake_recv_us"]
        r = u8["median_us"] / f
        out.append(Target(name, "PASS" if r <= 1.25 else "MISS",
                          f"ucx {u8['median_us']:.1f} us / floor {f:.1f} us (tag_lat {lat:.2f} + send "
                          f"{floor['fake_send_us']:.2f} + recv {floor['fake_recv_us']:.2f}) = {r:.2f}"))
    else:
        out.append(Target(name, "N/A", "needs p2p 8 B at 2 ranks, ucx_perftest and the fake floor"))
    out.append(_ratio_target("p2p 8 B, 2 ranks: ucx / gloo <= 1/3",
                             [("8 B", u8["median_us"], g8["median_us"])] if u8 and g8 else [], 1 / 3))

    big = 64 << 20
    ub, gb = get("p2p", p2p_ranks, big, "ucx"), get("p2p", p2p_ranks, big, "gloo")
    bw = raw.get("tag_bw_gbps", {}).get(big)
    name = "p2p 64 MiB, 2 ranks: ucx GB/s / tag_bw GB/s >= 0.85"
    if ub and bw:
        ucx_gbps = big / (ub["median_us"] * 1e3)
        r = ucx_gbps / bw
        out.append(Target(name, "PASS" if r >= 0.85 else "MISS",
                          f"ucx {ucx_gbps:.2f} GB/s / tag_bw {bw:.2f} GB/s = {r:.2f}"))
    else:
        out.append(Target(name, "N/A", "needs p2p 64 MiB at 2 ranks and ucx_perftest tag_bw 64 MiB"))
    out.append(_ratio_target("p2p 64 MiB, 2 ranks: ucx faster than gloo (ucx / gloo < 1)",
                             [("64 MiB", ub["median_us"], gb["median_us"])] if ub and gb else [], 1.0))

    def pairs(op, ranks, keep=lambda n: True):
        rows = []
        for (o, r, n), by in sorted(table.items()):
            if o == op and r == ranks and keep(n) and "ucx" in by and "gloo" in by:
                rows.append((format_size(n), by["ucx"]["median_us"], by["gloo"]["median_us"]))
        return rows

    for ranks in ranks_measured:
        out.append(_ratio_target(f"allreduce <= 64 KiB, {ranks} ranks: ucx / gloo <= 0.2",
                                 pairs("allreduce", ranks, lambda n: n <= 64 << 10), 0.2))
        out.append(_ratio_target(f"allreduce all sizes, {ranks} ranks: ucx / gloo <= 1",
                                 pairs("allreduce", ranks), 1.0))
        memcpy = floors.get(ranks, {}).get(f"memcpy_gbps_{MEMCPY_BOUND_BYTES}")
        name = f"allreduce >= 16 MiB, {ranks} ranks: ucx / bound <= 1.5"
        rows = [(n, by["ucx"]["median_us"]) for (o, r, n), by in sorted(table.items())
                if o == "allreduce" and r == ranks and n >= 16 << 20 and "ucx" in by]
        if rows and memcpy:
            checks = [(t / allreduce_bound_us(n, ranks, memcpy), n, t) for n, t in rows]
            worst = max(checks)
            ok = all(c[0] <= 1.5 for c in checks)
            out.append(Target(name, "PASS" if ok else "MISS", "; ".join(
                f"{format_size(n)}: {t / 1e3:.1f} ms / bound {allreduce_bound_us(n, ranks, memcpy) / 1e3:.1f} ms"
                f" = {c:.2f}" for c, n, t in checks) + f" (memcpy {memcpy:.2f} GB/s; worst {worst[0]:.2f})"))
        else:
            out.append(Target(name, "N/A", "needs allreduce >= 16 MiB and the memcpy rate"))
        for op in OPS:
            if op in ("p2p", "allreduce"):
                continue
            rows = pairs(op, ranks)
            if rows:
                out.append(_ratio_target(f"{op}, {ranks} ranks: ucx / gloo <= 1", rows, 1.0))
    out += _mpi_targets(table, ranks_measured, cpp_p2p)
    return out


def _mpi_targets(table: dict, ranks_measured: list[int], cpp_p2p: dict | None) -> list[Target]:
    """Against Open MPI, when the run had the MPI peer (--mpi)."""
    if not any("mpi4py-torch" in by or "mpi-c" in by for by in table.values()):
        return []
    out = []

    def pairs(other, ranks, keep):
        return [(f"{o} {format_size(n)}", by["ucx"]["median_us"], by[other]["median_us"])
                for (o, r, n), by in sorted(table.items())
                if r == ranks and keep(o, n) and "ucx" in by and other in by]

    for ranks in ranks_measured:
        out.append(_ratio_target(f"every op and size, {ranks} ranks: ucx <= mpi4py on torch tensors",
                                 pairs("mpi4py-torch", ranks, lambda o, n: True), 1.0,
                                 "mpi4py-torch", "points"))
        out.append(_ratio_target(f"every collective >= 1 MiB, {ranks} ranks: ucx <= Open MPI C",
                                 pairs("mpi-c", ranks, lambda o, n: o != "p2p" and n >= 1 << 20), 1.0,
                                 "mpi-c", "points"))
        out.append(_ratio_target(f"allreduce >= 16 MiB, {ranks} ranks: ucx at least 1.5x faster than Open MPI C",
                                 pairs("mpi-c", ranks, lambda o, n: o == "allreduce" and n >= 16 << 20),
                                 1 / 1.5, "mpi-c", "sizes"))
    mpi8 = table.get(("p2p", 2, 8), {}).get("mpi-c")
    name = "C++ p2p 8 B, 2 ranks: commux_bench --blocking / Open MPI C <= 1.5"
    if cpp_p2p and mpi8:
        # Median against median: Open MPI C's column is a median of blocks too.
        r = cpp_p2p["lat_median_us"] / mpi8["median_us"]
        out.append(Target(name, "PASS" if r <= 1.5 else "MISS",
                          f"commux_bench --blocking {cpp_p2p['lat_median_us']:.2f} us (median one "
                          f"way; mean {cpp_p2p['lat_us']:.2f}) / mpi-c {mpi8['median_us']:.2f} us = {r:.2f}"))
    else:
        out.append(Target(name, "N/A", "needs commux_bench and mpi-c p2p 8 B at 2 ranks"))
    return out


def format_targets(targets: list[Target]) -> str:
    lines = ["targets (same-run ratios; bound = 3(p-1)/p*N / memcpy rate, see commux.bench.targets):"]
    for t in targets:
        lines.append(f"  [{t.status:<4}] {t.name}\n         {t.detail}")
    return "\n".join(lines)
