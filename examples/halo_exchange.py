"""Distributed 2-D diffusion stencil with tagged halo exchange, checked against a serial solve.

Two fields live on an N x M float64 grid with fixed (Dirichlet) boundaries:

* ``T`` -- temperature, explicit heat equation  T += ALPHA * lap(T);
* ``C`` -- a passive scalar, diffused and carried by a constant wind with a first-order
  upwind scheme  C += DIFF_C * lap(C) - CX * dC/drow - CY * dC/dcol.

The rows are split into contiguous blocks, one per rank (uneven splits allowed, so any
world size up to N works).  Before every step each rank swaps its edge rows of *both*
fields with its neighbours.  By default ``commux.halo.HaloExchange`` does it: built once
over both fields, one message per neighbour and step (on a commux group one C++ call
each for start and wait; on gloo tagged p2p calls from Python).  ``--exchange hand`` runs
what such codes write by hand instead, ``dist.isend``/``dist.irecv`` per row and field,
where the tags are what keep the messages apart, written so that only correct
``(sender, tag)`` matching gives the right answer:

* a rank receives two rows (T and C) from the same neighbour every step, distinguished
  only by the tag;
* the receives are posted in the opposite order of the matching sends (the sender sends
  T then C, the receiver posts C then T), so a backend that matches in arrival order or
  ignores tags swaps the two fields.  T and C look nothing alike, so the swap shows up as
  an O(1) error instead of passing silently.

Rank 0 then gathers both fields with tagged point-to-point messages (blocks of uneven
size, which ``dist.gather`` cannot take) and compares them with a single-process solve
that runs the same update function, so a correct backend reproduces it to round-off
(in practice bit for bit); the check allows 1e-12.

Run standalone (any number of ranks)::

    torchrun --standalone --nproc-per-node=3 examples/halo_exchange.py --backend ucx
    torchrun --standalone --nproc-per-node=3 examples/halo_exchange.py --backend gloo --exchange hand
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import torch
import torch.distributed as dist

ALPHA = 0.20  # diffusion number of T (dt * kappa / h^2); explicit Euler is stable for <= 0.25
DIFF_C = 0.05  # diffusion number of C
CX, CY = 0.30, 0.15  # Courant numbers of the wind (towards +row, +col); 4*DIFF_C + CX + CY <= 1
TOLERANCE = 1e-12

FIELDS = ("T", "C")
UP, DOWN = 1, 2  # direction of travel of a halo row: UP = towards rank - 1, DOWN = rank + 1


def halo_tag(field: int, direction: int) -> int:
    """Tag of a halo row: T going up = 1, T going down = 2, C going up = 3, C going down = 4."""
    return 2 * field + direction


def gather_tag(field: int) -> int:
    """Tag of a block sent to rank 0 for the final check (T = 5, C = 6), disjoint from halo tags."""
    return 2 * len(FIELDS) + 1 + field


def initial_fields(n: int, m: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Full-grid initial condition, boundary values included.

    T: cold domain with an off-centre Gaussian hot spot and a hot top wall (T = 1 on row 0).
    C: a square blob plus a smooth wave, zero on all walls.  Neither field is symmetric,
    so a misplaced row or a T/C swap changes the answer.
    """
    y = torch.linspace(0.0, 1.0, n, dtype=torch.float64)[:, None]
    x = torch.linspace(0.0, 1.0, m, dtype=torch.float64)[None, :]
    t = torch.exp(-((y - 0.35) ** 2 + (x - 0.6) ** 2) / 0.01)
    c = 0.5 * torch.sin(math.pi * y) * torch.sin(3 * math.pi * x)
    c = c + ((y - 0.25).abs() < 0.1).double() * ((x - 0.3).abs() < 0.1).double()
    for f in (t, c):
        f[0], f[-1], f[:, 0], f[:, -1] = 0.0, 0.0, 0.0, 0.0
    t[0] = 1.0
    return t, c


def _laplacian(a: torch.Tensor, lo: int, hi: int) -> torch.Tensor:
    """5-point Laplacian of rows lo..hi-1 (interior columns); reads rows lo-1..hi."""
    return (
        a[lo - 1 : hi - 1, 1:-1]
        + a[lo + 1 : hi + 1, 1:-1]
        + a[lo:hi, :-2]
        + a[lo:hi, 2:]
        - 4.0 * a[lo:hi, 1:-1]
    )


def advance(
    t: torch.Tensor, c: torch.Tensor, t_out: torch.Tensor, c_out: torch.Tensor, lo: int, hi: int
) -> None:
    """One time step of rows lo..hi-1 (interior columns) of both fields, written to the *_out arrays.

    Both the serial and the distributed solver call this, on the full grid and on a
    halo-padded block respectively, so every cell goes through the same floating-point
    operations and any difference comes from the communication.
    """
    tc = t[lo:hi, 1:-1]
    t_out[lo:hi, 1:-1] = tc + ALPHA * _laplacian(t, lo, hi)
    cc = c[lo:hi, 1:-1]
    c_out[lo:hi, 1:-1] = (
        cc
        + DIFF_C * _laplacian(c, lo, hi)
        - CX * (cc - c[lo - 1 : hi - 1, 1:-1])
        - CY * (cc - c[lo:hi, :-2])
    )


def solve_serial(n: int, m: int, steps: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reference single-process solve; boundary rows and columns are never written."""
    t, c = initial_fields(n, m)
    t_next, c_next = t.clone(), c.clone()
    for _ in range(steps):
        advance(t, c, t_next, c_next, 1, n - 1)
        t, t_next, c, c_next = t_next, t, c_next, c
    return t, c


def row_blocks(n: int, size: int) -> list[tuple[int, int]]:
    """Split rows 0..n-1 into `size` contiguous [start, stop) blocks differing by at most one row."""
    if not 1 <= size <= n:
        raise ValueError(f"cannot split {n} rows over {size} ranks")
    base, extra = divmod(n, size)
    blocks, start = [], 0
    for r in range(size):
        stop = start + base + (r < extra)
        blocks.append((start, stop))
        start = stop
    return blocks


def exchange_halos(
    fields: list[torch.Tensor], up: int | None, down: int | None, group: dist.ProcessGroup | None
) -> None:
    """Fill the ghost rows (index 0 and -1) of every padded field from the neighbouring ranks.

    `up`/`down` are the group ranks owning the rows above/below, or None at the domain edge.
    Receives are posted first, and in reverse field order relative to the sends, so that
    only tag matching pairs each row with the right buffer (see the module docstring).
    """
    requests = []
    for f in reversed(range(len(fields))):
        if down is not None:
            requests.append(dist.irecv(fields[f][-1], group=group, group_src=down, tag=halo_tag(f, UP)))
        if up is not None:
            requests.append(dist.irecv(fields[f][0], group=group, group_src=up, tag=halo_tag(f, DOWN)))
    for f, field in enumerate(fields):
        if up is not None:
            requests.append(dist.isend(field[1], group=group, group_dst=up, tag=halo_tag(f, UP)))
        if down is not None:
            requests.append(dist.isend(field[-2], group=group, group_dst=down, tag=halo_tag(f, DOWN)))
    for request in requests:
        request.wait()


def gather_to_rank0(
    fields: list[torch.Tensor], blocks: list[tuple[int, int]], m: int, group: dist.ProcessGroup | None
) -> list[torch.Tensor] | None:
    """Assemble the owned rows of each padded field into full grids on group rank 0 (None elsewhere).

    Uses tagged p2p rather than ``dist.gather`` because the blocks differ in size; rank 0
    again posts the receives in reverse field order, so the tags must do the matching.
    """
    rank = dist.get_rank(group)
    if rank != 0:
        requests = [
            dist.isend(field[1:-1], group=group, group_dst=0, tag=gather_tag(f))
            for f, field in enumerate(fields)
        ]
        for request in requests:
            request.wait()
        return None
    n = blocks[-1][1]
    full = [torch.empty(n, m, dtype=torch.float64) for _ in fields]
    start, stop = blocks[0]
    for f, field in enumerate(fields):
        full[f][start:stop] = field[1:-1]
    requests = [
        dist.irecv(full[f][start:stop], group=group, group_src=src, tag=gather_tag(f))
        for src, (start, stop) in enumerate(blocks)
        if src != 0
        for f in reversed(range(len(fields)))
    ]
    for request in requests:
        request.wait()
    return full


def halo_exchanges(buffers: list[list[torch.Tensor]], group: dist.ProcessGroup | None):
    """One persistent ``commux.halo.HaloExchange`` per set of padded fields (the solver
    swaps two sets every step): a grid of one column of ranks, walls at both ends, one
    ghost row on each side and none across the columns."""
    import commux.halo as halo

    grid = halo.CartGrid(dims=[dist.get_world_size(group), 1], periodic=False, group=group)
    return [halo.HaloExchange(fields, widths=[1, 0], grid=grid) for fields in buffers]


def run(backend_group: dist.ProcessGroup | None = None, n: int = 256, m: int = 256, steps: int = 200,
        exchange: str = "halo") -> dict:
    """Solve on all ranks of `backend_group` (default: the world group) and check against serial.

    Collective: every rank of the group must call it.  Returns the same dict on every rank:
    ``ok``, ``max_error`` (per field and overall, computed on rank 0 and broadcast so that
    all ranks agree on pass/fail), ``ms_per_step`` (slowest rank's wall time of the
    distributed loop, exchange included), ``serial_ms_per_step`` (the reference solve on
    rank 0) and the problem shape.
    """
    group = backend_group
    if exchange not in ("halo", "hand"):
        raise ValueError(f"exchange must be 'halo' or 'hand', not {exchange!r}")
    rank, size = dist.get_rank(group), dist.get_world_size(group)
    blocks = row_blocks(n, size)
    start, stop = blocks[rank]
    up = rank - 1 if rank > 0 else None
    down = rank + 1 if rank < size - 1 else None

    # Padded local blocks: row 0 and row -1 are ghost rows; local row i + 1 is global row start + i.
    fields = []
    for full in initial_fields(n, m):
        local = torch.zeros(stop - start + 2, m, dtype=torch.float64)
        local[1:-1] = full[start:stop]
        fields.append(local)
    spare = [f.clone() for f in fields]
    # Global rows 0 and n - 1 are boundary values and are never updated.
    lo = max(start, 1) - start + 1
    hi = min(stop, n - 1) - start + 1

    exchanges = halo_exchanges([fields, spare], group) if exchange == "halo" else None

    dist.barrier(group=group)
    t0 = time.perf_counter()
    for step in range(steps):
        if exchanges:
            exchanges[step % 2].exchange()  # the set `fields` names this step
        else:
            exchange_halos(fields, up, down, group)
        advance(*fields, *spare, lo, hi)
        fields, spare = spare, fields
    elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX, group=group)

    full = gather_to_rank0(fields, blocks, m, group)
    # [error of T, error of C, serial seconds]; filled on rank 0, then shared.
    result = torch.zeros(len(FIELDS) + 1, dtype=torch.float64)
    if rank == 0:
        t0 = time.perf_counter()
        reference = solve_serial(n, m, steps)
        result[-1] = time.perf_counter() - t0
        for f, (got, want) in enumerate(zip(full, reference)):
            result[f] = (got - want).abs().max()
    dist.broadcast(result, group=group, group_src=0)

    errors = {name: result[f].item() for f, name in enumerate(FIELDS)}
    max_error = max(errors.values())
    return {
        "ok": all(e <= TOLERANCE for e in errors.values()),  # False for NaN, too
        "max_error": max_error,
        "field_errors": errors,
        "tolerance": TOLERANCE,
        "ms_per_step": 1e3 * elapsed.item() / steps,
        "serial_ms_per_step": 1e3 * result[-1].item() / steps,
        "grid": (n, m),
        "steps": steps,
        "rows_per_rank": [b - a for a, b in blocks],
        "exchange": exchange,
    }


def format_stats(stats: dict) -> str:
    """One-paragraph human summary of a `run` result."""
    n, m = stats["grid"]
    rows = "+".join(map(str, stats["rows_per_rank"]))
    errors = ", ".join(f"{k} {v:.1e}" for k, v in stats["field_errors"].items())
    verdict = "PASS" if stats["ok"] else "FAIL"
    return (
        f"halo exchange ({'commux.halo' if stats['exchange'] == 'halo' else 'by hand'}): {n}x{m} grid, "
        f"{stats['steps']} steps, {len(stats['rows_per_rank'])} ranks (rows {rows})\n"
        f"  max |distributed - serial|: {errors} (tolerance {stats['tolerance']:.0e}) -> {verdict}\n"
        f"  {stats['ms_per_step']:.3f} ms/step distributed, {stats['serial_ms_per_step']:.3f} ms/step serial"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="gloo", choices=("gloo", "ucx", "commux"))
    # Not --n/--m: torchrun would read those as abbreviations of its own options (--nnodes, ...).
    parser.add_argument("--rows", type=int, default=256, help="grid rows (N)")
    parser.add_argument("--cols", type=int, default=256, help="grid columns (M)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--exchange", default="halo", choices=("halo", "hand"),
                        help="commux.halo.HaloExchange, or isend/irecv written by hand")
    args = parser.parse_args()
    if args.backend != "gloo":
        import commux  # the "ucx" backend only exists once registered

        commux.register()
    dist.init_process_group(backend=args.backend)
    stats = run(n=args.rows, m=args.cols, steps=args.steps, exchange=args.exchange)
    if dist.get_rank() == 0:
        print(format_stats(stats), flush=True)
    dist.destroy_process_group()
    return 0 if stats["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
