"""The table's "floor" column: the least one call could take through torch.distributed on
this machine, from the floors floor.py measures inside the ranks (the fake backend's cost
per call, the memcpy rate) and UCX's own tag latency. No torch here: the parent process
that prints the table stays light.
"""

from __future__ import annotations


def copy_bytes(op: str, nbytes: int, ranks: int) -> float:
    """The least each rank must copy (or fold, counted as a copy) for one call, with
    ``nbytes`` as sizes.py defines it (each rank's input): a receiver of a p2p message or
    a broadcast copies it once; allgather brings in the other ranks' inputs; all_to_all
    the other ranks' blocks, (p-1)/p of the input; reduce_scatter receives and folds
    (p-1)/p of the input; allreduce is a reduce_scatter plus an allgather of the result,
    3(p-1)/p (the bound of targets.py)."""
    p = ranks
    return {
        "p2p": nbytes,
        "broadcast": nbytes,
        "allgather": (p - 1) * nbytes,
        "alltoall": (p - 1) / p * nbytes,
        "reduce_scatter": 2 * (p - 1) / p * nbytes,
        "allreduce": 3 * (p - 1) / p * nbytes,
    }[op]


def memcpy_rate(floor: dict, nbytes: int) -> float | None:
    """GB/s of the largest memcpy size measured at or below ``nbytes`` (else the smallest)."""
    measured = sorted((int(k[len("memcpy_gbps_"):]), v) for k, v in floor.items()
                      if k.startswith("memcpy_gbps_"))
    if not measured:
        return None
    below = [v for size, v in measured if size <= nbytes]
    return below[-1] if below else measured[0][1]


def floor_us(op: str, nbytes: int, ranks: int, floor: dict, cores: int,
             tag_lat_us: float | None = None) -> float | None:
    """The least time one call could take through torch.distributed on this machine:
    the fake backend's cost of the call (what torch itself spends in Python and dispatch)
    plus ``copy_bytes`` at the memcpy rate measured nearest below the point's size (a
    1 MiB copy runs from cache, a 64 MiB one does not), on every rank; when the ranks
    outnumber the cores, every rank still has to spend that CPU, so it takes ranks/cores
    times as long. p2p involves two ranks whatever the world: a round trip costs rank 0
    one send and one recv, so one way is at least half of the fake send + recv, plus
    UCX's own one-way tag latency when known. None when the floors needed were not
    measured.

    Beyond the cache (16 MiB and up here) the copy term is one memcpy of the whole size
    from memory to memory, which a copy in cache-sized pieces through a staging slot can
    beat: there commux can come out below this "floor" (broadcast and allreduce of 64 MiB
    did on 2026-12-04). The column is exact about what it adds up, not a proof; it is
    meant for the sizes where torch's own cost of the call dominates."""
    rate = memcpy_rate(floor, nbytes)
    if op == "p2p":
        if "fake_send_us" not in floor or "fake_recv_us" not in floor or not rate:
            return None
        return ((floor["fake_send_us"] + floor["fake_recv_us"]) / 2 + (tag_lat_us or 0.0)
                + copy_bytes(op, nbytes, ranks) / (rate * 1e3))
    call = floor.get(f"fake_{op}_us")
    if call is None or not rate:
        return None
    return max(1.0, ranks / cores) * (call + copy_bytes(op, nbytes, ranks) / (rate * 1e3))


def floor_points(points: list[dict], floors: dict, cores: int,
                 tag_lat_us: float | None = None) -> list[dict]:
    """A "floor" point beside every (op, ranks, bytes) that ``points`` has; ``floors``
    maps a world size to that world's floor dict."""
    keys = sorted({(p["op"], p["ranks"], p["bytes"]) for p in points if p["backend"] != "floor"})
    out = []
    for op, ranks, nbytes in keys:
        us = floor_us(op, nbytes, ranks, floors.get(ranks, {}), cores, tag_lat_us)
        if us is not None:
            out.append({"op": op, "ranks": ranks, "bytes": nbytes, "requested_bytes": nbytes,
                        "backend": "floor", "median_us": us, "min_us": us,
                        "iterations": 0, "warmup": 0, "blocks": 0})
    return out
