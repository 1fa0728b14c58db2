"""Randomized differential stress test: a seeded sequence of operations that every rank
derives on its own, each result checked exactly against a reference computed locally.

``build_plan(seed, world_size, n_ops)`` turns a seed into steps of operations: tagged
point-to-point with receives posted in another order than the sends, any-source receives,
every collective, coalesced forms and ``batch_isend_irecv``, on the world group or on one
subgroup, some ``async_op=True`` with several in flight and waited in a shuffled order, and
every few operations a receive nobody answers, waited with a short timeout. Every rank
draws the same plan from the same ``random.Random``; the data each rank contributes comes
from a ``torch.Generator`` seeded by (seed, op index, rank, slot), so every rank can
compute every other rank's input, hence every expected output. Values stay small where a
floating-point reduction would otherwise depend on the order of the folds.

``run_rank`` executes a plan inside one rank (``harness.run_ranks`` calls it; see
test_stress.py). It writes the operation it is in to ``progress_dir/op.<rank>`` at every
stage, so that a parent can say where each rank hung, and raises an error naming the
seed, world size, operation and a replay command at the first wrong result.

Run as a script it is its own launcher (no pytest, no multiprocessing), for replays and
long runs (scripts/stress.sh):

    python3 tests/python/stress_job.py --seed 7 --ranks 3 --ops 400 --shm 0
    python3 tests/python/stress_job.py --minutes 60 --ranks 2,3,4 --hog

On a hang (no rank's progress file changed for ``--stall`` seconds, or the run passed
``--timeout``) it takes every rank's Python stacks (faulthandler) and native stacks of all
threads (gdb, else py-spy) BEFORE killing anything, writes them to a file and prints its
path, with the operation each rank was in.
"""

from __future__ import annotations

import argparse
import datetime
import faulthandler
import itertools
import json
import os
import random
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# Byte sizes where the implementation changes path: UCX eager -> rendezvous (~8 KiB ..
# 64 KiB), the one-step shared-memory allreduce (COMMUX_SHM_SMALL_BYTES), one
# shared-memory slot per rank (8 MiB / ranks within [256 KiB, 1 MiB]; 16 MiB / ranks when
# crowded), where a chunked allreduce takes a second chunk, the ring
# allreduce (256 KiB) and the pipelined chains (512 KiB).
ANCHOR_BYTES = [8 << 10, 16 << 10, 64 << 10, 256 << 10, 512 << 10, 1 << 20]
ANCHOR_WEIGHTS = [5, 5, 4, 3, 1, 1]

KIND_WEIGHTS = {
    "p2p": 8,
    "p2p_sub": 3,
    "any_source": 4,
    "all_reduce": 10,
    "reduce": 4,
    "broadcast": 8,
    "all_gather": 5,
    "all_gather_into": 5,
    "reduce_scatter": 3,
    "reduce_scatter_tensor": 4,
    "gather": 3,
    "scatter": 3,
    "all_to_all_single": 4,
    "all_to_all": 3,
    "barrier": 3,
    "all_reduce_coalesced": 2,
    "coalescing_window": 3,
    "batch_p2p": 4,
}
# Collectives (and their coalesced forms) may run on the subgroup; p2p_sub always does.
SUBGROUP_KINDS = {
    "all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into", "reduce_scatter",
    "reduce_scatter_tensor", "gather", "scatter", "all_to_all_single", "all_to_all",
    "barrier", "all_reduce_coalesced", "coalescing_window", "batch_p2p",
}
# What gloo lacks, so that the job itself can be checked under COMMUX_TEST_BACKEND=gloo:
# gloo closes the pair after a timed-out wait, refuses non-contiguous collective inputs,
# has no list all_to_all, needs every rank's buffer of a reduce as scratch, and fails
# empty messages and (ws, n) outputs of all_gather_into_tensor.
GLOO_MISSING = {"all_to_all"}

DTYPE_NAMES = ["float32", "float64", "int64", "bfloat16", "int32", "uint8"]
FLOAT_NAMES = {"float32", "float64", "bfloat16"}
INT_NAMES = {"int64", "int32", "uint8"}
ITEMSIZE = {"float32": 4, "float64": 8, "int64": 8, "bfloat16": 2, "int32": 4, "uint8": 1}
REDUCE_OPS = ["SUM", "MAX", "MIN", "PRODUCT", "AVG", "BAND", "BOR", "BXOR"]

TAG_STRIDE = 64  # tags of op i: 1 + i * TAG_STRIDE + k, k < TAG_STRIDE: unique per op
PROBE_WAIT = datetime.timedelta(milliseconds=50)


class StressFailure(AssertionError):
    pass


# --------------------------------------------------------------------------
# The plan: identical on every rank
# --------------------------------------------------------------------------


class Op:
    __slots__ = ("index", "kind", "group", "async_", "p")

    def __init__(self, index, kind, group, async_, p):
        self.index, self.kind, self.group, self.async_, self.p = index, kind, group, async_, p

    def describe(self):
        args = ", ".join(f"{k}={v}" for k, v in self.p.items() if not k.startswith("_"))
        flags = self.group + (", async" if self.async_ else "")
        return f"op {self.index} {self.kind}[{flags}]({args})"


class Plan:
    def __init__(self, seed, world_size, members, steps):
        self.seed, self.world_size, self.members, self.steps = seed, world_size, members, steps

    @property
    def n_ops(self):
        return sum(len(s[0]) for s in self.steps)


def _count(rng, itemsize, allow_zero=True):
    """An element count whose byte size sits on either side of a path threshold, or is
    tiny, or empty."""
    r = rng.random()
    if allow_zero and r < 0.03:
        return 0
    if r < 0.33:
        return rng.randint(1, 8)
    if r < 0.45:
        return rng.randint(9, 3000)
    anchor = rng.choices(ANCHOR_BYTES, ANCHOR_WEIGHTS)[0]
    return max(1, anchor // itemsize + rng.randint(-2, 2))


def _reduce_choice(rng):
    dtype = rng.choice(DTYPE_NAMES)
    ops = ["SUM", "MAX", "MIN", "PRODUCT"]
    if dtype in FLOAT_NAMES:
        ops.append("AVG")
    else:
        ops += ["BAND", "BOR", "BXOR"]
    return dtype, rng.choice(ops)


def _perm_unlike(rng, n):
    """A random order of range(n) that differs from issue order whenever it can."""
    order = list(range(n))
    rng.shuffle(order)
    if n > 1 and order == sorted(order):
        order.reverse()
    return order


def _splits(rng, gs, itemsize):
    """gs x gs element counts for an uneven all-to-all: zeros, tiny and threshold sizes."""
    def one():
        r = rng.random()
        if r < 0.15:
            return 0
        if r < 0.6:
            return rng.randint(1, 40)
        return max(1, rng.choice(ANCHOR_BYTES[:3]) // itemsize + rng.randint(-2, 2))
    return [[one() for _ in range(gs)] for _ in range(gs)]


def _op_params(rng, kind, gs, ws, caps):
    def cnt(itemsize):
        return _count(rng, itemsize, caps["zero"])
    p = {}
    if kind in ("p2p", "p2p_sub", "batch_p2p"):
        m = rng.randint(1, 4)
        p["m"] = m
        # Messages to the next rank (k < m) and to the previous one (k >= m), each its own
        # dtype and size; receives are posted in the order `recv_order`.
        p["dtypes"] = [rng.choice(DTYPE_NAMES) for _ in range(2 * m)]
        p["counts"] = [cnt(ITEMSIZE[d]) for d in p["dtypes"]]
        p["recv_order"] = _perm_unlike(rng, 2 * m)
        p["recv_first"] = rng.random() < 0.5
        p["noncontig"] = caps["noncontig"] and rng.random() < 0.2
        p["_wait_order"] = _perm_unlike(rng, 4 * m)
    elif kind == "any_source":
        p["root"] = rng.randrange(ws)
        p["dtype"] = rng.choice(DTYPE_NAMES)
        p["n"] = cnt(ITEMSIZE[p["dtype"]])
        # Each sender also sends a same-sized decoy on the next tag to the root, received
        # with its source named: an any-source receive must not take it.
        p["decoy"] = rng.random() < 0.5
        p["recv_first"] = rng.random() < 0.5
    elif kind in ("all_reduce", "reduce", "reduce_scatter", "reduce_scatter_tensor"):
        p["dtype"], p["op"] = _reduce_choice(rng)
        p["n"] = cnt(ITEMSIZE[p["dtype"]])
        if kind == "reduce":
            p["root"] = rng.randrange(gs)
        if kind in ("all_reduce",):
            p["noncontig"] = caps["noncontig"] and rng.random() < 0.15
        if kind == "reduce_scatter_tensor":
            p["stacked"] = caps["stacked"] and rng.random() < 0.3
    elif kind in ("broadcast", "all_gather", "all_gather_into", "gather", "scatter"):
        p["dtype"] = rng.choice(DTYPE_NAMES)
        p["n"] = cnt(ITEMSIZE[p["dtype"]])
        if kind in ("broadcast", "gather", "scatter"):
            p["root"] = rng.randrange(gs)
        if kind == "broadcast":
            p["noncontig"] = caps["noncontig"] and rng.random() < 0.15
        if kind == "all_gather_into":
            p["stacked"] = caps["stacked"] and rng.random() < 0.3
    elif kind in ("all_to_all_single", "all_to_all"):
        p["dtype"] = rng.choice(DTYPE_NAMES)
        if kind == "all_to_all_single" and rng.random() < 0.4:
            p["n"] = cnt(ITEMSIZE[p["dtype"]])
        else:
            p["splits"] = _splits(rng, gs, ITEMSIZE[p["dtype"]])
    elif kind == "all_reduce_coalesced":
        p["dtype"], p["op"] = _reduce_choice(rng)
        p["counts"] = [cnt(ITEMSIZE[p["dtype"]]) for _ in range(rng.randint(1, 4))]
    elif kind == "coalescing_window":
        p["what"] = rng.choice(["all_reduce", "all_gather_into", "reduce_scatter_tensor"])
        if p["what"] == "all_gather_into":
            p["dtype"], p["op"] = rng.choice(DTYPE_NAMES), None
        else:
            p["dtype"], p["op"] = _reduce_choice(rng)
        p["counts"] = [cnt(ITEMSIZE[p["dtype"]]) for _ in range(rng.randint(1, 4))]
    elif kind == "barrier":
        pass
    else:
        raise AssertionError(kind)
    return p


def default_caps(backend="ucx"):
    ucx = backend in ("ucx", "commux")
    return {"probe": ucx, "noncontig": ucx, "reduce_keeps_input": ucx, "zero": ucx,
            "stacked": ucx,
            "missing": set() if ucx else set(GLOO_MISSING)}


def build_plan(seed, world_size, n_ops, probe_every=40, caps=None):
    """The steps of the run: a list of (ops, wait_order). Depends only on the arguments
    (a shorter n_ops gives a prefix), so every rank builds the same one."""
    caps = caps or default_caps()
    rng = random.Random(f"commux-stress/{seed}/{world_size}")
    ws = world_size
    k = rng.randint(2, ws) if ws > 2 else ws
    members = sorted(rng.sample(range(ws), k))
    kinds = [kd for kd in KIND_WEIGHTS if kd not in caps["missing"]]
    weights = [KIND_WEIGHTS[kd] for kd in kinds]
    steps, index = [], 0
    next_probe = probe_every if caps["probe"] and probe_every else None
    while index < n_ops:
        if next_probe is not None and index >= next_probe:
            next_probe += probe_every
            steps.append(([Op(index, "timeout_probe", "world", False, {})], [0]))
            index += 1
            continue
        ops = []
        for _ in range(min(rng.choice([1, 1, 2, 3, 4, 5, 6]), n_ops - index)):
            kind = rng.choices(kinds, weights)[0]
            group = "sub" if kind == "p2p_sub" or (kind in SUBGROUP_KINDS and rng.random() < 0.3) else "world"
            gs = len(members) if group == "sub" else ws
            async_ = rng.random() < (0.3 if kind == "barrier" else 0.6)
            ops.append(Op(index, kind, group, async_, _op_params(rng, kind, gs, ws, caps)))
            index += 1
        steps.append((ops, _perm_unlike(rng, len(ops))))
    return Plan(seed, world_size, members, steps)


# --------------------------------------------------------------------------
# Data: any rank can compute any rank's contribution
# --------------------------------------------------------------------------

_MASK = (1 << 64) - 1


def _mix(*parts):
    h = 0x9E3779B97F4A7C15
    for x in parts:
        h = ((h ^ (x & _MASK)) * 0xBF58476D1CE4E5B9) & _MASK
        h ^= h >> 31
        h = (h * 0x94D049BB133111EB) & _MASK
        h ^= h >> 29
    return h & ((1 << 63) - 1)


def _dt(name):
    import torch

    return getattr(torch, name)


def values(seed, index, rank, slot, n, dtype, flavor):
    """Rank ``rank``'s ``slot``-th tensor of op ``index``. Sums and products of these stay
    exactly representable (halves within +-8, factors +-1, +-2) at any fold order."""
    import torch

    g = torch.Generator().manual_seed(_mix(seed, index, rank, slot))
    dt = _dt(dtype)
    i64 = torch.int64
    if flavor in ("SUM", "AVG"):
        if dtype == "uint8":
            return torch.randint(0, 16, (n,), generator=g, dtype=i64).to(dt)
        v = torch.randint(-16, 17, (n,), generator=g, dtype=i64)
        return (v.double() * 0.5).to(dt) if dtype in FLOAT_NAMES else (v // 2).to(dt)
    if flavor == "PRODUCT":
        table = torch.tensor([1, 2, 3] if dtype == "uint8" else [-2, -1, 1, 2], dtype=i64)
        return table[torch.randint(0, len(table), (n,), generator=g)].to(dt)
    if flavor in ("MIN", "MAX"):
        if dtype in FLOAT_NAMES:
            return (torch.randint(-1000, 1000, (n,), generator=g, dtype=i64).double() * 0.25).to(dt)
    if dtype in FLOAT_NAMES:
        return torch.randn(n, generator=g, dtype=torch.float64).to(dt)
    lo, hi = {"uint8": (0, 256), "int32": (-2**31, 2**31 - 1), "int64": (-2**62, 2**62)}[dtype]
    return torch.randint(lo, hi, (n,), generator=g, dtype=i64).to(dt)


def reduce_ref(tensors, op):
    """The reduction in the tensors' own dtype: exact for these values whatever the order,
    and AVG divides the exact sum once, as the backend's finisher does."""
    import torch

    fold = {"SUM": torch.add, "AVG": torch.add, "PRODUCT": torch.mul, "MIN": torch.minimum,
            "MAX": torch.maximum, "BAND": torch.bitwise_and, "BOR": torch.bitwise_or,
            "BXOR": torch.bitwise_xor}[op]
    acc = tensors[0].clone()
    for t in tensors[1:]:
        acc = fold(acc, t)
    if op == "AVG":
        acc.div_(len(tensors))
    return acc


def _reduce_op(name):
    import torch.distributed as dist

    return getattr(dist.ReduceOp, name)


def _sentinel(dtype):
    import torch

    return torch.tensor(77).to(_dt(dtype))


def _buffer(n, dtype, noncontig, fill=None):
    """A tensor of n elements, optionally every other element of a larger one whose other
    elements hold a sentinel (an operation that writes outside its view shows up)."""
    import torch

    dt = _dt(dtype)
    if noncontig:
        base = torch.full((2 * n,), 77, dtype=dt) if n else torch.empty(0, dtype=dt)
        view = base[::2]
    else:
        base = None
        view = torch.full((n,), 55, dtype=dt)
    if fill is not None:
        view.copy_(fill)
    return view, base


def _same(got, want, what):
    import torch

    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError(f"{what}: got {got.dtype}{tuple(got.shape)}, "
                             f"want {want.dtype}{tuple(want.shape)}")
    if torch.equal(got, want):
        return
    g, w = got.reshape(-1), want.reshape(-1)
    bad = (g != w).nonzero().reshape(-1)
    i = int(bad[0])
    raise AssertionError(f"{what}: {bad.numel()} of {w.numel()} elements differ; first at "
                         f"{i}: got {g[i].item()!r}, want {w[i].item()!r}")


def _untouched(base, what):
    if base is not None and base.numel():
        _same(base[1::2], _sentinel(str(base.dtype).split(".")[-1]).expand(base.numel() // 2),
              f"{what} (elements between a non-contiguous view's)")


# --------------------------------------------------------------------------
# Issuing and checking each kind of operation
# --------------------------------------------------------------------------


class Ctx:
    def __init__(self, seed, rank, ws, groups, caps):
        self.seed, self.rank, self.ws, self.groups, self.caps = seed, rank, ws, groups, caps

    def val(self, op, rank, slot, n, dtype, flavor="copy"):
        return values(self.seed, op.index, rank, slot, n, dtype, flavor)


def _p2p(op, ctx, members, pg):
    import torch.distributed as dist

    p, rank = op.p, ctx.rank
    gi = members.index(rank)
    nxt, prv = members[(gi + 1) % len(members)], members[(gi - 1) % len(members)]
    m, base_tag = p["m"], 1 + op.index * TAG_STRIDE
    sends = []  # (peer, tag, tensor)
    for k in range(2 * m):
        peer = nxt if k < m else prv
        sends.append((peer, base_tag + k, ctx.val(op, rank, k, p["counts"][k], p["dtypes"][k])))
    recvs = []  # (peer, tag, view, base, want)
    for k in p["recv_order"]:
        # Message k of my prev (k < m) or of my next (k >= m), the same k in every rank's plan.
        peer = prv if k < m else nxt
        want = ctx.val(op, peer, k, p["counts"][k], p["dtypes"][k])
        view, base = _buffer(p["counts"][k], p["dtypes"][k], p["noncontig"])
        recvs.append((peer, base_tag + k, view, base, want, k))
    if op.kind == "batch_p2p":
        ops = [dist.P2POp(dist.isend, t, peer, pg, tag) for peer, tag, t in sends]
        rops = [dist.P2POp(dist.irecv, v, peer, pg, tag) for peer, tag, v, _, _, _ in recvs]
        works = dist.batch_isend_irecv(rops + ops if p["recv_first"] else ops + rops)
    else:
        def post_sends():
            return [dist.isend(t, peer, group=pg, tag=tag) for peer, tag, t in sends]

        def post_recvs():
            return [dist.irecv(v, peer, group=pg, tag=tag) for peer, tag, v, _, _, _ in recvs]
        works = post_recvs() + post_sends() if p["recv_first"] else post_sends() + post_recvs()
    order = [i for i in p["_wait_order"] if i < len(works)]
    works = [works[i] for i in order]

    def check():
        for peer, tag, view, base, want, k in recvs:
            what = f"message {k} (tag {tag}) from rank {peer}"
            _same(view, want, what)
            _untouched(base, what)
    return works, check


def _any_source(op, ctx):
    import torch.distributed as dist

    p, rank, ws = op.p, ctx.rank, ctx.ws
    tag = 1 + op.index * TAG_STRIDE
    root = p["root"]
    if rank != root:
        works = [dist.isend(ctx.val(op, rank, 0, p["n"], p["dtype"]), root, tag=tag)]
        if p["decoy"]:
            works.append(dist.isend(ctx.val(op, rank, 1, p["n"], p["dtype"]), root, tag=tag + 1))
        return works, lambda: None
    if not p["recv_first"]:
        # Let the senders' messages arrive first: then matching, not posting, picks them.
        time.sleep(0.002)
    bufs = [_buffer(p["n"], p["dtype"], False)[0] for _ in range(ws - 1)]
    any_works = [dist.irecv(b, src=None, tag=tag) for b in bufs]
    decoys = []
    if p["decoy"]:
        for s in range(ws):
            if s != root:
                b = _buffer(p["n"], p["dtype"], False)[0]
                decoys.append((s, b, dist.irecv(b, s, tag=tag + 1)))

    def check():
        seen = []
        for b, w in zip(bufs, any_works):
            src = w._source_rank() if hasattr(w, "_source_rank") else w.source_rank()
            if not (0 <= src < ws and src != root):
                raise AssertionError(f"irecv(src=None) reported source {src}")
            _same(b, ctx.val(op, src, 0, p["n"], p["dtype"]),
                  f"irecv(src=None, tag={tag}) reported source {src}, data")
            seen.append(src)
        if sorted(seen) != [s for s in range(ws) if s != root]:
            raise AssertionError(f"any-source receives reported sources {seen}")
        for s, b, _ in decoys:
            _same(b, ctx.val(op, s, 1, p["n"], p["dtype"]), f"decoy (tag {tag + 1}) from {s}")
    return any_works + [w for _, _, w in decoys], check


def _collective(op, ctx, members, pg):
    import torch
    import torch.distributed as dist

    p, rank, kind = op.p, ctx.rank, op.kind
    gs, gi = len(members), members.index(rank)
    a = op.async_
    dtype = p.get("dtype")
    flavor = p.get("op") or "copy"
    val = ctx.val
    if kind == "all_reduce":
        view, base = _buffer(p["n"], dtype, p["noncontig"], val(op, rank, 0, p["n"], dtype, flavor))
        w = dist.all_reduce(view, op=_reduce_op(p["op"]), group=pg, async_op=a)
        want = reduce_ref([val(op, r, 0, p["n"], dtype, flavor) for r in members], p["op"])

        def check():
            _same(view, want, "all_reduce result")
            _untouched(base, "all_reduce")
    elif kind == "reduce":
        root = members[p["root"]]
        mine = val(op, rank, 0, p["n"], dtype, flavor)
        t = mine.clone()
        w = dist.reduce(t, dst=root, op=_reduce_op(p["op"]), group=pg, async_op=a)

        def check():
            if rank == root:
                _same(t, reduce_ref([val(op, r, 0, p["n"], dtype, flavor) for r in members],
                                    p["op"]), "reduce result at the root")
            elif ctx.caps["reduce_keeps_input"]:
                _same(t, mine, "reduce: a non-root rank's input")
    elif kind == "broadcast":
        root = members[p["root"]]
        src = val(op, root, 0, p["n"], dtype)
        view, base = _buffer(p["n"], dtype, p["noncontig"], src if rank == root else None)
        w = dist.broadcast(view, src=root, group=pg, async_op=a)

        def check():
            _same(view, src, f"broadcast from {root}")
            _untouched(base, "broadcast")
    elif kind == "all_gather":
        outs = [_buffer(p["n"], dtype, False)[0] for _ in members]
        w = dist.all_gather(outs, val(op, rank, 0, p["n"], dtype), group=pg, async_op=a)

        def check():
            for j, r in enumerate(members):
                _same(outs[j], val(op, r, 0, p["n"], dtype), f"all_gather block of rank {r}")
    elif kind == "all_gather_into":
        out = _buffer(gs * p["n"], dtype, False)[0]
        if p["stacked"]:
            out = out.view(gs, p["n"])
        w = dist.all_gather_into_tensor(out, val(op, rank, 0, p["n"], dtype), group=pg, async_op=a)

        def check():
            want = torch.cat([val(op, r, 0, p["n"], dtype) for r in members])
            _same(out.reshape(-1), want, "all_gather_into_tensor output")
    elif kind in ("reduce_scatter", "reduce_scatter_tensor"):
        n, rop = p["n"], p["op"]
        ins = [val(op, rank, j, n, dtype, flavor) for j in range(gs)]
        out = _buffer(n, dtype, False)[0]
        if kind == "reduce_scatter":
            w = dist.reduce_scatter(out, ins, op=_reduce_op(rop), group=pg, async_op=a)
        else:
            inp = torch.cat(ins)
            if p["stacked"]:
                inp = inp.view(gs, n)
            w = dist.reduce_scatter_tensor(out, inp, op=_reduce_op(rop), group=pg, async_op=a)

        def check():
            want = reduce_ref([val(op, r, gi, n, dtype, flavor) for r in members], rop)
            _same(out, want, f"{kind} block {gi}")
    elif kind == "gather":
        root = members[p["root"]]
        outs = [_buffer(p["n"], dtype, False)[0] for _ in members] if rank == root else None
        w = dist.gather(val(op, rank, 0, p["n"], dtype), outs, dst=root, group=pg, async_op=a)

        def check():
            if rank == root:
                for j, r in enumerate(members):
                    _same(outs[j], val(op, r, 0, p["n"], dtype), f"gather block of rank {r}")
    elif kind == "scatter":
        root = members[p["root"]]
        ins = [val(op, root, j, p["n"], dtype) for j in range(gs)] if rank == root else None
        out = _buffer(p["n"], dtype, False)[0]
        w = dist.scatter(out, ins, src=root, group=pg, async_op=a)

        def check():
            _same(out, val(op, root, gi, p["n"], dtype), f"scatter block from {root}")
    elif kind in ("all_to_all_single", "all_to_all"):
        if "splits" in p:
            S = p["splits"]
        else:
            S = [[p["n"]] * gs for _ in range(gs)]
        # S[i][j]: elements group rank i sends to group rank j; slot j of the sender.
        ins = [val(op, rank, j, S[gi][j], dtype) for j in range(gs)]
        wants = [val(op, members[i], gi, S[i][gi], dtype) for i in range(gs)]
        if kind == "all_to_all":
            outs = [_buffer(S[i][gi], dtype, False)[0] for i in range(gs)]
            w = dist.all_to_all(outs, ins, group=pg, async_op=a)

            def check():
                for i in range(gs):
                    _same(outs[i], wants[i], f"all_to_all block from rank {members[i]}")
        else:
            out = _buffer(sum(S[i][gi] for i in range(gs)), dtype, False)[0]
            if "splits" in p:
                w = dist.all_to_all_single(out, torch.cat(ins), [S[i][gi] for i in range(gs)],
                                           list(S[gi]), group=pg, async_op=a)
            else:
                w = dist.all_to_all_single(out, torch.cat(ins), group=pg, async_op=a)

            def check():
                _same(out, torch.cat(wants), "all_to_all_single output")
    elif kind == "barrier":
        w = dist.barrier(group=pg, async_op=a)

        def check():
            pass
    elif kind == "all_reduce_coalesced":
        ts = [val(op, rank, j, n, dtype, flavor) for j, n in enumerate(p["counts"])]
        w = dist.all_reduce_coalesced(ts, op=_reduce_op(p["op"]), group=pg, async_op=a)

        def check():
            for j, n in enumerate(p["counts"]):
                _same(ts[j], reduce_ref([val(op, r, j, n, dtype, flavor) for r in members],
                                        p["op"]), f"all_reduce_coalesced tensor {j}")
    elif kind == "coalescing_window":
        what, counts = p["what"], p["counts"]
        outs, wants = [], []
        with dist._coalescing_manager(group=pg, async_ops=a) as cm:
            for j, n in enumerate(counts):
                mine = val(op, rank, j, n, dtype, flavor)
                if what == "all_reduce":
                    dist.all_reduce(mine, op=_reduce_op(p["op"]), group=pg)
                    outs.append(mine)
                    wants.append(lambda j=j, n=n: reduce_ref(
                        [val(op, r, j, n, dtype, flavor) for r in members], p["op"]))
                elif what == "all_gather_into":
                    out = _buffer(gs * n, dtype, False)[0]
                    dist.all_gather_into_tensor(out, mine, group=pg)
                    outs.append(out)
                    wants.append(lambda j=j, n=n: torch.cat(
                        [val(op, r, j, n, dtype) for r in members]))
                else:
                    out = _buffer(n, dtype, False)[0]
                    inp = torch.cat([val(op, rank, 100 * j + q, n, dtype, flavor) for q in range(gs)])
                    dist.reduce_scatter_tensor(out, inp, op=_reduce_op(p["op"]), group=pg)
                    outs.append(out)
                    wants.append(lambda j=j, n=n: reduce_ref(
                        [val(op, r, 100 * j + gi, n, dtype, flavor) for r in members], p["op"]))
        w = cm if a else None

        def check():
            for j, (o, want) in enumerate(zip(outs, wants)):
                _same(o, want(), f"coalesced {what} tensor {j}")
    else:
        raise AssertionError(kind)
    return ([w] if w is not None else []), check


def _timeout_probe(op, ctx):
    """A receive nobody sends must time out after PROBE_WAIT and leave the group working:
    the same (peer, tag) then matches a new receive, and the cancelled one's buffer stays
    untouched."""
    import torch.distributed as dist

    from harness import side_barrier

    rank, ws = ctx.rank, ctx.ws
    prv, nxt = (rank - 1) % ws, (rank + 1) % ws
    tag = 1 + op.index * TAG_STRIDE
    stale = _buffer(5, "float32", False)[0]
    w = dist.irecv(stale, prv, tag=tag)
    t0 = time.monotonic()
    try:
        w.wait(timeout=PROBE_WAIT)
    except RuntimeError as e:
        if "timed out" not in str(e).lower():
            raise AssertionError(f"the unmatched irecv's wait raised without 'timed out': {e!r}")
    else:
        raise AssertionError("wait(timeout=50 ms) on an irecv nobody sends returned")
    took = time.monotonic() - t0
    if took > 20:
        raise AssertionError(f"wait(timeout=50 ms) raised only after {took:.1f} s")
    # Only once every rank's receive is cancelled may the message with that tag travel.
    side_barrier(f"stress-probe-{op.index}")
    fresh = _buffer(5, "float32", False)[0]
    works = [dist.irecv(fresh, prv, tag=tag), dist.isend(ctx.val(op, rank, 0, 5, "float32"), nxt, tag=tag)]

    def check():
        _same(fresh, ctx.val(op, prv, 0, 5, "float32"), "a receive after the timed-out one")
        _same(stale, _buffer(5, "float32", False)[0], "the timed-out receive's buffer")
    return works, check


def _issue(op, ctx):
    if op.kind == "timeout_probe":
        return _timeout_probe(op, ctx)
    if op.kind == "any_source":
        return _any_source(op, ctx)
    pg, members = ctx.groups[op.group]
    if op.kind in ("p2p", "p2p_sub", "batch_p2p"):
        return _p2p(op, ctx, members, pg)
    return _collective(op, ctx, members, pg)


# --------------------------------------------------------------------------
# One rank
# --------------------------------------------------------------------------


class _Progress:
    """The rank's current operation and stage, rewritten in place in a small file, so the
    parent can read where each rank was when it hung (the page cache survives SIGKILL)."""

    def __init__(self, progress_dir, rank):
        self.f = None
        if progress_dir:
            self.f = open(os.path.join(progress_dir, f"op.{rank}"), "w")

    def __call__(self, text):
        if self.f:
            self.f.seek(0)
            self.f.write(f"{time.time():.3f} {text}\n")
            self.f.truncate()
            self.f.flush()


def replay_command(seed, world_size, n_ops, env=None, hog=False, backend="ucx"):
    env = env or {}
    parts = ["python3", "tests/python/stress_job.py", "--seed", str(seed), "--ranks",
             str(world_size), "--ops", str(n_ops)]
    if "COMMUX_SHM" in env:
        parts += ["--shm", str(env["COMMUX_SHM"])]
    hosts = env.get("COMMUX_HOST")
    if hosts:
        parts += ["--hosts", ",".join(hosts) if isinstance(hosts, (list, tuple)) else hosts]
    if hog:
        parts.append("--hog")
    jitter = env.get("COMMUX_STRESS_JITTER_MS") or os.environ.get("COMMUX_STRESS_JITTER_MS")
    if jitter:
        parts += ["--jitter-ms", str(jitter)]
    if backend not in ("ucx", "commux"):
        parts += ["--backend", backend]
    return " ".join(shlex.quote(x) for x in parts)


def run_rank(rank, world_size, seed, n_ops, progress_dir=None, replay="", probe_every=40,
             progress_every=100, backend=None, inject_hang=None):
    """Runs the plan of (seed, world_size, n_ops) in this rank of an initialized default
    group. Returns {"ops": ..., "seconds": ..., "shm_threads": ...}."""
    import torch.distributed as dist

    from harness import BACKEND, shm_threads

    backend = backend or BACKEND
    caps = default_caps(backend)
    plan = build_plan(seed, world_size, n_ops, probe_every, caps)
    progress = _Progress(progress_dir, rank)
    # Timing variety: each rank sleeps now and then (its own seeded draws) before issuing or
    # waiting, so the ranks reach each operation in other orders than the machine's habit.
    jitter_ms = float(os.environ.get("COMMUX_STRESS_JITTER_MS", "0") or 0)
    jitter_rng = random.Random(f"commux-stress-jitter/{seed}/{rank}")

    def jitter():
        if jitter_ms > 0 and jitter_rng.random() < 0.3:
            time.sleep(jitter_rng.random() * jitter_ms / 1000)
    where = f"seed={seed} world_size={world_size} rank={rank} n_ops={n_ops}"
    progress("new_group")
    sub = dist.new_group(plan.members)
    groups = {"world": (None, list(range(world_size))), "sub": (sub, plan.members)}
    ctx = Ctx(seed, rank, world_size, groups, caps)
    t0 = time.monotonic()
    done = 0
    for ops, wait_order in plan.steps:
        mine = [op for op in ops if rank in groups[op.group][1]]
        pending, checks = {}, []
        stage, cur = "issue", None
        try:
            for op in mine:
                cur = op
                if inject_hang is not None and op.index >= inject_hang and rank == 0:
                    progress(f"inject-hang {op.describe()}")
                    time.sleep(10**6)
                jitter()
                progress(f"issue {op.describe()}")
                works, check = _issue(op, ctx)
                checks.append((op, check))
                if op.async_:
                    pending[op.index] = works
                else:
                    progress(f"wait {op.describe()}")
                    for w in works:
                        w.wait()
            stage = "wait"
            for j in wait_order:
                cur = ops[j]
                if cur.index in pending:
                    jitter()
                    progress(f"wait {cur.describe()}")
                    for w in pending.pop(cur.index):
                        w.wait()
            stage = "check"
            for cur, check in checks:
                progress(f"check {cur.describe()}")
                check()
        except Exception as e:
            desc = cur.describe() if cur else "(before the first op)"
            raise StressFailure(
                f"commux stress FAILED at {where}, during {stage} of {desc}: "
                f"{type(e).__name__}: {e}\n  replay: {replay}") from e
        for op in ops:
            done += 1
            if progress_every and (op.index + 1) % progress_every == 0:
                print(f"stress rank {rank}: {op.index + 1}/{plan.n_ops} ops, "
                      f"{time.monotonic() - t0:.1f} s ({where})", flush=True)
    progress("finished; tearing down")
    # Which path the run took: a case meant for UCX that ran on shared memory tests less.
    return {"ops": done, "seconds": time.monotonic() - t0, "shm_threads": shm_threads()}


# --------------------------------------------------------------------------
# The launcher: one run, and the long run over many seeds
# --------------------------------------------------------------------------


def _worker_main(args):
    stack_file = open(os.path.join(args.progress_dir, f"stack.{args.rank}"), "w")
    faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)
    sys.path.insert(0, HERE)
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    if args.backend in ("ucx", "commux"):
        import commux

        commux.register()
    dist.init_process_group(args.backend, init_method=f"tcp://127.0.0.1:{args.port}",
                            rank=args.rank, world_size=args.world,
                            timeout=datetime.timedelta(seconds=args.pg_timeout))
    try:
        res = run_rank(args.rank, args.world, args.seed, args.ops, args.progress_dir,
                       args.replay, args.probe_every, args.progress_every, args.backend,
                       args.inject_hang)
    except BaseException:
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)  # no teardown: the peers may be blocked on this rank
    dist.destroy_process_group()
    print("STRESS-RESULT " + json.dumps(res), flush=True)


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def host_labels(hosts, ws):
    """--hosts: a count (contiguous blocks of ranks) or one label per rank."""
    if not hosts or hosts == "1":
        return None
    if "," in hosts:
        labels = hosts.split(",")
        if len(labels) != ws:
            raise SystemExit(f"--hosts names {len(labels)} labels for {ws} ranks")
        return labels
    h = int(hosts)
    return [f"h{r * h // ws}" for r in range(ws)]


def native_stacks(pid):
    """Every thread's native stack of a live process: gdb, else py-spy --native."""
    if shutil.which("gdb"):
        cmd = ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "set pagination off",
               "-ex", "thread apply all bt"]
        # A shared-memory lane asleep beside a non-empty queue is the hang's signature: print
        # the lane's state from whichever frame has it (-s skips frames without the member;
        # busy_/kicked_ before the lane got one holder_ field, holder_ after).
        for member in ("queue_", "holder_", "busy_", "kicked_", "stopping_"):
            cmd += ["-ex", f"thread apply all -s -- frame apply all -s -- p this->{member}"]
    elif shutil.which("py-spy"):
        cmd = ["py-spy", "dump", "--native", "--pid", str(pid)]
    else:
        return "(neither gdb nor py-spy is installed: no native stacks)"
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=90)
        return r.stdout + (("\n[stderr]\n" + r.stderr[-2000:]) if r.returncode else "")
    except (subprocess.TimeoutExpired, OSError) as e:
        return f"({cmd[0]} failed: {e})"


def _threads_digest(gdb_text, frames=6):
    """Every thread's name and its first frames in commux (or in torch's c10d, where the
    main thread entered), for the console; libc's wait internals say nothing. The full
    dump is in the file."""
    out, shown, raw = [], 0, []

    def flush():
        if not shown and raw:
            out.extend("      " + f for f in raw[:2])

    for line in gdb_text.splitlines():
        if line.startswith("Thread "):
            flush()
            out.append("  " + line.strip()[:160])
            shown, raw = 0, []
        elif line.startswith("#"):
            text = line.strip()[:220]
            raw.append(text)
            if shown < frames and ("commux::" in text or "c10d::" in text):
                out.append("      " + text)
                shown += 1
    flush()
    return "\n".join(out)


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return ""


def run_once(seed, ws, ops, shm=None, hosts=None, hog=False, timeout=600, stall=60,
             out_dir=None, backend="ucx", probe_every=40, progress_every=100,
             inject_hang=None, quiet=False):
    """One job of ws rank processes. Returns a dict: ok, reason, ops, seconds, report."""
    labels = host_labels(hosts, ws)
    env_desc = {}
    if shm is not None:
        env_desc["COMMUX_SHM"] = str(shm)
    if labels:
        env_desc["COMMUX_HOST"] = labels
    replay = replay_command(seed, ws, ops, env_desc, hog, backend)
    out_dir = out_dir or tempfile.mkdtemp(prefix="commux_stress_")
    run_dir = tempfile.mkdtemp(prefix=f"seed{seed}-ws{ws}-", dir=out_dir)
    port = _free_port()
    procs, logs = [], []
    hog_proc = None
    t0 = time.monotonic()
    try:
        if hog:
            hog_proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for r in range(ws):
            env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1",
                       PYTHONUNBUFFERED="1")
            env.pop("COMMUX_HOST", None)
            if shm is not None:
                env["COMMUX_SHM"] = str(shm)
            if labels:
                env["COMMUX_HOST"] = labels[r]
            cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--rank", str(r),
                   "--world", str(ws), "--seed", str(seed), "--ops", str(ops),
                   "--port", str(port), "--progress-dir", run_dir, "--replay", replay,
                   "--backend", backend, "--probe-every", str(probe_every),
                   "--progress-every", str(progress_every), "--pg-timeout", str(max(timeout, 60))]
            if inject_hang is not None:
                cmd += ["--inject-hang", str(inject_hang)]
            log = open(os.path.join(run_dir, f"log.{r}"), "w")
            logs.append(log)
            procs.append(subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, cwd=REPO,
                                          env=env))

        last_change, last_seen = time.monotonic(), ()
        failed_at = None
        reason = None
        while True:
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if all(c is not None for c in codes):
                break
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if failed_at is not None and now - failed_at > 5:
                reason = "failure"
                break
            seen = tuple(_read(os.path.join(run_dir, f"op.{r}")) for r in range(ws))
            if seen != last_seen:
                last_seen, last_change = seen, now
            # Start-up (import, rendezvous) writes no progress: it gets two minutes more.
            if failed_at is None and now - last_change > stall + (0 if any(seen) else 120):
                reason = f"hang: no rank moved on for {now - last_change:.0f} s"
                break
            if now - t0 > timeout:
                reason = f"hang: the run passed its {timeout} s limit"
                break
            time.sleep(0.2)
        codes = [p.poll() for p in procs]
        report = []
        dump_path = None
        if reason is None and any(codes):
            reason = "failure"
        if reason:
            alive = [r for r, c in enumerate(codes) if c is None]
            # Stacks first, while the hang is still there; killing comes after.
            for r in alive:
                try:
                    os.kill(procs[r].pid, signal.SIGUSR1)
                except ProcessLookupError:
                    pass
            time.sleep(1.0)
            natives = {r: native_stacks(procs[r].pid) for r in alive}
            report.append(f"stress {reason.upper()}: seed={seed} world_size={ws} ops={ops} "
                          f"env={env_desc} hog={hog}")
            report.append(f"  replay: {replay}")
            for r in range(ws):
                state = "running" if codes[r] is None else f"exit {codes[r]}"
                report.append(f"  rank {r} ({state}): {_read(os.path.join(run_dir, f'op.{r}'))}")
            dump_path = os.path.join(out_dir, f"stacks-seed{seed}-ws{ws}.txt")
            with open(dump_path, "w") as f:
                f.write("\n".join(report) + "\n")
                for r in range(ws):
                    f.write(f"\n==================== rank {r} pid {procs[r].pid} ====================\n")
                    f.write("---- log (tail) ----\n" + _read(os.path.join(run_dir, f"log.{r}"))[-6000:] + "\n")
                    if r in alive:
                        f.write("---- Python stacks (faulthandler) ----\n"
                                + _read(os.path.join(run_dir, f"stack.{r}")) + "\n")
                        f.write("---- native stacks, all threads ----\n" + natives[r] + "\n")
            for r in range(ws):
                if codes[r] not in (None, 0):
                    tail = _read(os.path.join(run_dir, f"log.{r}"))
                    lines = [l for l in tail.splitlines() if "FAILED at" in l or "replay:" in l]
                    report.append(f"  rank {r} said: " + (" | ".join(lines[-2:]) or tail[-800:]))
            for r in alive:
                report.append(f"  rank {r} native threads (first frames; full dump in the file):")
                report.append(_threads_digest(natives[r]))
            report.append(f"  stacks and logs: {dump_path}")
        results = []
        for r in range(ws):
            for line in _read(os.path.join(run_dir, f"log.{r}")).splitlines():
                if line.startswith("STRESS-RESULT "):
                    results.append(json.loads(line[len("STRESS-RESULT "):]))
        ok = reason is None and len(results) == ws
        if reason is None and not ok:
            reason = "a rank exited 0 without its result"
        return {"ok": ok, "reason": reason, "ops": results[0]["ops"] if ok else 0,
                "seconds": time.monotonic() - t0, "report": "\n".join(report),
                "replay": replay, "dump": dump_path, "run_dir": run_dir}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        for p in procs:
            p.wait()
        if hog_proc is not None:
            hog_proc.kill()
            hog_proc.wait()
        for log in logs:
            log.close()


def _list(s, conv=int):
    return [conv(x) for x in str(s).split(",") if x != ""]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, help="one run of this seed (else: cycle seeds)")
    ap.add_argument("--first-seed", type=int, default=None,
                    help="long run: first seed (default: from the clock, printed)")
    ap.add_argument("--ranks", default="2", help="world size(s), comma-separated, cycled")
    ap.add_argument("--ops", type=int, default=400, help="operations per run")
    ap.add_argument("--shm", default=None, help="COMMUX_SHM value(s) to cycle, e.g. 1,0")
    ap.add_argument("--hosts", default=None,
                    help="fake hosts: a count (contiguous blocks) or one COMMUX_HOST label "
                         "per rank (a,a,b,b); long runs cycle 1 and 2 with --hosts cycle")
    ap.add_argument("--hog", action="store_true",
                    help="one run: a busy-looping process beside the ranks; long run: "
                         "alternate runs with and without it")
    ap.add_argument("--minutes", type=float, default=None, help="long run for this long")
    ap.add_argument("--timeout", type=float, default=600, help="hard limit of one run, s")
    ap.add_argument("--stall", type=float, default=60,
                    help="a run in which no rank moved on for this many seconds hangs")
    ap.add_argument("--out", default=None, help="folder for logs and stack dumps")
    ap.add_argument("--backend", default=os.environ.get("COMMUX_TEST_BACKEND", "ucx"))
    ap.add_argument("--probe-every", type=int, default=40)
    ap.add_argument("--progress-every", type=int, default=100)
    ap.add_argument("--jitter-ms", type=float, default=None,
                    help="each rank sleeps up to this long before some issues and waits "
                         "(COMMUX_STRESS_JITTER_MS; seeded per rank, so it replays)")
    ap.add_argument("--inject-hang", type=int, default=None,
                    help="rank 0 sleeps at this op: checks the hang reporting itself")
    # Internal: one rank, started by run_once.
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--world", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--port", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--progress-dir", help=argparse.SUPPRESS)
    ap.add_argument("--replay", default="", help=argparse.SUPPRESS)
    ap.add_argument("--pg-timeout", type=float, default=600, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        return _worker_main(args)
    if args.jitter_ms is not None:
        os.environ["COMMUX_STRESS_JITTER_MS"] = str(args.jitter_ms)  # the ranks inherit it

    ranks = _list(args.ranks)
    if min(ranks) < 2:
        raise SystemExit("--ranks: at least 2 (the plan has point-to-point between ranks)")
    out = args.out or tempfile.mkdtemp(prefix="commux_stress_")
    os.makedirs(out, exist_ok=True)
    common = dict(timeout=args.timeout, stall=args.stall, out_dir=out, backend=args.backend,
                  probe_every=args.probe_every, progress_every=args.progress_every,
                  inject_hang=args.inject_hang)

    if args.seed is not None and args.minutes is None:
        shm = _list(args.shm, str)[0] if args.shm else None
        res = run_once(args.seed, ranks[0], args.ops, shm, args.hosts, args.hog, **common)
        print(f"stress: seed {args.seed} ws={ranks[0]}: "
              f"{'ok' if res['ok'] else res['reason']} in {res['seconds']:.1f} s", flush=True)
        if not res["ok"]:
            print(res["report"], flush=True)
        return 0 if res["ok"] else 1

    minutes = args.minutes if args.minutes is not None else 10
    first = args.first_seed if args.first_seed is not None else (
        args.seed if args.seed is not None else int(time.time()) % 1_000_000)
    shms = _list(args.shm, str) if args.shm else ["1", "0"]
    hogs = [False, True] if args.hog else [False]
    host_opts = ["1", "2"] if args.hosts == "cycle" else [args.hosts or "1"]
    configs = list(itertools.product(ranks, shms, hogs, host_opts))
    print(f"stress: {minutes} min from seed {first}, configs (ranks, COMMUX_SHM, hog, hosts) "
          f"{configs}; logs in {out}", flush=True)
    t0, runs, fails, total_ops = time.monotonic(), 0, 0, 0
    seed = first
    while time.monotonic() - t0 < minutes * 60:
        ws, shm, hog, hosts = configs[runs % len(configs)]
        res = run_once(seed, ws, args.ops, shm, hosts, hog, **common)
        runs += 1
        total_ops += res["ops"]
        print(f"stress: run {runs} seed {seed} ws={ws} shm={shm} hog={int(hog)} hosts={hosts}: "
              f"{'ok' if res['ok'] else res['reason']} ({res['seconds']:.1f} s)", flush=True)
        if not res["ok"]:
            fails += 1
            print(res["report"], flush=True)
            break
        shutil.rmtree(res["run_dir"], ignore_errors=True)
        seed += 1
    print(f"stress: {runs} runs, {fails} failures, {total_ops} ops in "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
