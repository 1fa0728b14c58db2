"""Byte sizes: parsing ``64K``/``16M`` on the command line, printing them back, the list
of message sizes a run walks through, and what "bytes" means for each operation.

All suffixes are binary (K = KiB = 2**10), because message sizes in this field are powers
of two and ``--max-bytes 256M`` should mean the 256 MiB everyone expects. Bandwidths, by
contrast, are reported in decimal GB/s (10**9 B/s), like ucx_perftest's and NCCL's tools
after conversion, so a GB/s figure never needs a footnote.
"""

from __future__ import annotations

import re

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]?)(I?B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """``"8"``, ``"64K"``, ``"16MiB"``, ``"256M"`` -> bytes (binary multiples)."""
    m = _SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"not a byte size: {text!r} (examples: 8, 64K, 16M, 1G)")
    return int(m.group(1)) * _SUFFIX[m.group(2).upper()]


def format_size(nbytes: int) -> str:
    """Shortest exact binary form: 8 B, 64 KiB, 256 MiB (3000 B stays 3000 B)."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale and nbytes % scale == 0:
            return f"{nbytes // scale} {unit}"
    return f"{nbytes} B"


def size_list(min_bytes: int, max_bytes: int, step: int) -> list[int]:
    """Sizes from ``max_bytes`` down by factors of ``step``, plus ``min_bytes``.

    Anchoring the ladder at the top (not at the bottom) keeps the round sizes the
    targets talk about (64 KiB, 16 MiB, 64 MiB, 256 MiB) in a x4 run that starts at 8 B.
    """
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError(f"need 1 <= min-bytes <= max-bytes (got {min_bytes}, {max_bytes})")
    if step < 2:
        raise ValueError(f"--step must be >= 2 (got {step})")
    sizes = []
    s = max_bytes
    while s >= min_bytes:
        sizes.append(s)
        s //= step
    if min_bytes not in sizes:
        sizes.append(min_bytes)
    return sorted(set(sizes))


OPS = ("p2p", "allreduce", "allgather", "reduce_scatter", "broadcast", "alltoall")
ELEMENT_BYTES = 4  # float32

# What the ``bytes`` column means per op (table header, CSV column ``size_convention``).
# One rule for all: the size of the tensor each rank passes IN. For reduce_scatter this
# is the same N as an allreduce of N, so those two rows compare directly.
SIZE_CONVENTION = {
    "p2p": "message (ranks 0<->1)",
    "allreduce": "tensor per rank",
    "allgather": "input per rank; output ranks*bytes",
    "reduce_scatter": "input per rank; output bytes/ranks",
    "broadcast": "tensor (root 0)",
    "alltoall": "input per rank = output",
}


def element_count(op: str, nbytes: int, world_size: int) -> int:
    """float32 elements of each rank's input: ``nbytes`` rounded up to whole elements
    and, where the op splits the input over the ranks, to a multiple of the world size."""
    n = max(1, -(-nbytes // ELEMENT_BYTES))
    if op in ("reduce_scatter", "alltoall"):
        n = -(-n // world_size) * world_size
    return n


def input_bytes(op: str, nbytes: int, world_size: int) -> int:
    """The size actually measured and reported, in place of the requested one."""
    return element_count(op, nbytes, world_size) * ELEMENT_BYTES


def footprint_bytes(op: str, nbytes: int, world_size: int) -> int:
    """Bytes of tensors one rank allocates for a point (the parent's memory check)."""
    n = input_bytes(op, nbytes, world_size)
    if op == "allgather":
        return n + n * world_size
    if op == "reduce_scatter":
        return n + n // world_size
    if op == "alltoall":
        return 2 * n
    return n
