"""A seeded bad-input fuzzer for commux at the torch.distributed Python boundary.

``make_cases(seed, world, count)`` turns a seed into a list of cases, the same list on every
rank: each case is one call of torch.distributed (a collective, a send/recv pair, a barrier) on
CPU tensors, with the arguments of every rank spelled out, and what each rank may do with them.
Kinds of case:

* ``valid``: a correct call (uneven splits, non-contiguous and zero-size tensors, in-place
  forms, 0-dim tensors, tags up to 2^31-1 ...). Every rank must finish with the right result,
  computed here from seeded per-rank data.
* ``all_bad``: every rank that takes part makes the same local mistake (splits that do not
  add up, negative or huge splits, a dtype that differs between input and output, a wrong
  numel, a root/src/dst or tag out of range, an unsupported op). Every rank must raise a
  ValueError/RuntimeError whose message says what is wrong, before a byte moves (the call's
  tensors are untouched), and the group must still work afterwards.
* ``some_bad``: the same mistakes on some ranks only. Those ranks must raise a clear error
  and touch nothing; the others must raise or finish within a short timeout (a finished rank
  must hold the right result where one exists without the wrong ranks, and must raise where
  none does). A fresh group is used afterwards (docs/semantics.md: a failed collective ends the group's
  collectives); after point-to-point cases the group must keep working.
* ``mismatch``: every rank's call is consistent on its own, but the ranks disagree (sizes,
  dtypes, split sizes, tags). No rank may hang past the short timeout or finish with a wrong
  result, and some rank must say what is wrong unless the mismatch cannot be seen (a tag
  mismatch, where the receive times out).

Rules checked on every rank for every case: each tensor handed to the call is a view into a
larger buffer whose other elements (before, after, and between the elements of a strided
view) hold a sentinel; none of them may change, ever (checked after the case and once more at
the end of the run, for late writes). Inputs must be unchanged unless the op writes them.

``Runner`` executes cases inside a rank (see test_bad_inputs.py); ``main()`` runs the fuzzer
for a while across seeds (scripts/fuzz_bad_inputs.sh).
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import random
import re
import sys
import time
import traceback
import zlib

MAX_TAG = 2**31 - 1
# A one-sided case's call (post + wait) must be over within its op timeout plus this.
HANG_SLACK_S = 8.0
HUGE = 2**62
I64_MAX = 2**63 - 1

FLOATS = ("float32", "float64", "bfloat16")
INTS = ("int32", "int64")
DTYPES = FLOATS + INTS
# Drawn one time in five: the other dtypes commux moves (bool only where nothing is reduced).
RARE = ("float16", "uint8", "int8", "int16", "complex128")
INT_LIKE = INTS + ("uint8", "int8", "int16")
SAME_BYTES = {"float32": "int32", "int32": "float32", "float64": "int64", "int64": "float64",
              "bfloat16": "float16", "float16": "bfloat16", "uint8": "int8", "int8": "uint8",
              "int16": "float16", "bool": "uint8", "complex128": "complex64"}
OTHER_BYTES = {"float32": "float64", "float64": "float32", "int32": "int64", "int64": "int32",
               "bfloat16": "float32", "float16": "float32", "uint8": "int32", "int8": "int16",
               "int16": "int32", "bool": "int32", "complex128": "complex64"}
REDOPS_FLOAT = ("SUM", "PRODUCT", "MIN", "MAX", "AVG")
REDOPS_INT = ("SUM", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR")
# (dtype, op) pairs docs/semantics.md says are unsupported (NotImplementedError before anything is sent).
UNSUPPORTED = (("float32", "BAND"), ("float64", "BXOR"), ("bfloat16", "BOR"),
               ("int64", "AVG"), ("int32", "AVG"), ("complex64", "MIN"), ("complex64", "MAX"))

KW_SIZE = ("size", "element", "numel", "hold", "shape", "match", "rows", "differ")
KW_DTYPE = ("dtype", "type")
KW_RANK = ("rank", "root", "src", "dst", "group", "destination", "source")
KW_TAG = ("tag",)
KW_SPLIT = ("split",)
KW_LIST = ("list", "world size", "tensors", "size")
KW_OP = ("dtype", "type", "support", "undefined", "avg", "band", "bor", "bxor", "min", "max",
         "complex", "integer", "float")
KW_EXPANDED = ("overlap", "memory location", "expand", "stride", "contiguous", "written",
               "single", "internal", "dense")
KW_MISMATCH = KW_SIZE + KW_DTYPE + KW_SPLIT + ("mismatch", "bytes", "step", "call", "truncated")

P2P_OPS = ("send/recv", "isend/irecv")
OPS = ("all_reduce", "reduce", "broadcast", "all_gather", "all_gather_into_tensor",
       "reduce_scatter", "reduce_scatter_tensor", "gather", "scatter", "all_to_all",
       "all_to_all_single", "send/recv", "isend/irecv", "barrier")


# --------------------------------------------------------------------------------------------
# Case description
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class T:
    """A tensor to hand to a call: shape, dtype, layout (c: contiguous; g: every other element
    of its buffer, the gaps are guards; t: a transposed 2-D view), guard elements before and
    after it."""

    shape: tuple
    dtype: str
    layout: str = "c"
    pre: int = 2
    post: int = 2

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __str__(self) -> str:
        lay = {"c": "", "g": ",strided", "t": ",transposed", "x": ",expanded"}[self.layout]
        return f"{self.dtype}{list(self.shape)}{lay}"


@dataclasses.dataclass
class Case:
    index: int
    op: str
    kind: str  # valid | all_bad | some_bad | mismatch
    variant: str
    args: list  # per rank: dict of this rank's arguments ({} = the rank does not take part)
    bad: tuple = ()  # ranks whose own call is wrong (must raise a clear error, touch nothing)
    keywords: tuple = ()  # one of them must be in a wrong rank's error message
    exc: tuple = ("ValueError", "RuntimeError")
    note: str = ""
    # "same-bytes": ranks disagree on a dtype of the same element size. Over UCX (COMMUX_SHM=0)
    # messages carry bytes only, so such a collective cannot be told from a valid one there
    # (as with gloo and NCCL); shared memory compares dtypes. Relaxed on UCX: any outcome but
    # a hang or a guard overwrite. "no-bytes": only the dtypes of empty tensors differ;
    # relaxed everywhere.
    flags: tuple = ()

    def relaxed(self) -> bool:
        return "no-bytes" in self.flags or (
            "same-bytes" in self.flags and os.environ.get("COMMUX_SHM", "1") == "0")

    @property
    def one_sided(self) -> bool:
        return self.kind in ("some_bad", "mismatch")

    def describe(self) -> str:
        parts = [f"case {self.index}: {self.op} [{self.kind}: {self.variant}]"]
        if self.bad:
            parts.append(f"wrong ranks {list(self.bad)}")
        for r, a in enumerate(self.args):
            if not a:
                parts.append(f"r{r}: -")
                continue
            items = []
            for k, v in a.items():
                if k in ("blocking",) and not v:
                    continue
                if isinstance(v, list) and v and isinstance(v[0], T):
                    v = "[" + ", ".join(str(x) for x in v) + "]"
                items.append(f"{k}={v}")
            parts.append(f"r{r}: " + " ".join(items))
        if self.note:
            parts.append(self.note)
        if self.flags:
            parts.append(f"flags {list(self.flags)}")
        return "; ".join(parts)


# --------------------------------------------------------------------------------------------
# Generator
# --------------------------------------------------------------------------------------------


class Gen:
    """Draws the cases of one seed; everything comes from ``self.rng``, so every rank that
    calls it with the same seed and world gets the same list."""

    def __init__(self, seed, world):
        self.rng = random.Random(f"commux-bad-inputs/{seed}/{world}")
        self.ws = world
        self.index = 0

    # ---- small draws

    def numel(self, small=False, allow_zero=True):
        r = self.rng.random()
        if allow_zero and r < 0.1:
            return 0
        if r < 0.5 or small:
            return self.rng.randint(1, 8)
        if r < 0.8:
            return self.rng.randint(9, 64)
        if r < 0.95:
            return self.rng.randint(65, 2000)
        return self.rng.choice((70001, 140000, 300003))  # past the slot and chunk sizes

    def dtype(self, reducing=False):
        if self.rng.random() < 0.2:
            return self.rng.choice(RARE + (() if reducing else ("bool",)))
        return self.rng.choice(DTYPES)

    def layout(self, shape):
        r = self.rng.random()
        if r < 0.7:
            return "c"
        if len(shape) == 2 and r < 0.85:
            return "t"
        return "g"

    def guards(self):
        return self.rng.randint(1, 5), self.rng.randint(1, 5)

    def shape(self, numel, cols=None):
        """A shape of ``numel`` elements: 1-D, 2-D, or 0-dim for one element."""
        if cols:
            return (numel // cols, cols)
        if numel == 1 and self.rng.random() < 0.3:
            return ()
        if numel > 1 and numel % 2 == 0 and self.rng.random() < 0.3:
            return (2, numel // 2)
        return (numel,)

    def t(self, numel, dtype, cols=None, layout=None, shape=None):
        shape = shape if shape is not None else self.shape(numel, cols)
        pre, post = self.guards()
        return T(tuple(shape), dtype, layout if layout is not None else self.layout(shape), pre,
                 post)

    def tin(self, numel, dtype, cols=None, layout=None, shape=None):
        """A tensor the call only reads: sometimes expanded (stride 0 in dim 0)."""
        t = self.t(numel, dtype, cols, layout, shape)
        if layout is None and t.shape and t.shape[0] >= 2 and self.rng.random() < 0.12:
            t.layout = "x"
        return t

    def subset(self, ranks=None):
        """1..len-1 ranks out of ``ranks`` (default: all)."""
        ranks = list(range(self.ws)) if ranks is None else list(ranks)
        k = self.rng.randint(1, max(1, len(ranks) - 1))
        return tuple(sorted(self.rng.sample(ranks, k)))

    def bad_root(self):
        return self.rng.choice((self.ws, self.ws + 3, -1, 2**31 - 1))

    def redop(self, dtype):
        if dtype.startswith("complex"):
            return "SUM"
        return self.rng.choice(REDOPS_INT if dtype in INT_LIKE else REDOPS_FLOAT)

    def tag(self):
        # Unique per case in its low bits: a message left unreceived by an earlier case can
        # never match a later receive.
        return (self.rng.randrange(2**20) << 10) | (self.index & 1023)

    # ---- cases

    def cases(self, count):
        ops = list(OPS)
        order = []
        out = []
        while len(out) < count:
            if not order:
                order = ops[:]
                self.rng.shuffle(order)
            op = order.pop()
            kind = self.rng.choices(("valid", "all_bad", "some_bad", "mismatch"),
                                    (40, 25, 15, 20))[0]
            if self.ws == 1 and kind in ("some_bad", "mismatch"):
                kind = "all_bad"
            if op == "barrier":
                kind = "valid"
            case = getattr(self, "gen_" + op.replace("/", "_"))(kind)
            if case is None:
                continue
            if case.kind == "all_bad" and self.rng.random() < 0.3:
                # between two all_reduces in flight: a refused call must not disturb them
                case.flags = case.flags + ("sandwich",)
            out.append(case)
            self.index += 1
        return out

    def case(self, op, kind, variant, args, bad=(), keywords=(), exc=("ValueError", "RuntimeError"),
             note=""):
        flags = ()
        if kind == "mismatch" and op not in P2P_OPS and not keywords:
            keywords = KW_MISMATCH
        if kind == "mismatch":
            dts = {json.dumps(sorted({t.dtype for t in tensors_of(a)})) for a in args if a}
            sizes = {BYTES[d] for a in args if a for d in (t.dtype for t in tensors_of(a))}
            if len(dts) > 1 and len(sizes) == 1:
                flags = ("same-bytes",)
            if len(dts) > 1 and all(t.numel == 0 for a in args if a for t in tensors_of(a)):
                flags = ("no-bytes",)  # only dtypes differ, of empty tensors: nothing to see
        return Case(self.index, op, kind, variant, args, tuple(bad), tuple(keywords), tuple(exc),
                    note, flags)

    def blocking(self, kind):
        return kind in ("valid", "all_bad") and self.rng.random() < 0.3

    # all_reduce ------------------------------------------------------------------------------

    def gen_all_reduce(self, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype(reducing=True)
        shape = self.shape(n)
        op = self.redop(d)
        blocking = self.blocking(kind)

        def arg(n=n, d=d, op=op, shape=shape):
            return {"t": self.t(n, d, shape=shape), "op": op, "blocking": blocking}

        if kind == "valid":
            if rng.random() < 0.1:
                d = "complex64"
                op = "SUM"
            return self.case("all_reduce", kind, "ok", [arg(d=d, op=op) for _ in range(ws)])
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            if n >= 2 and rng.random() < 0.25:
                args = [arg(shape=(n,)) for r in range(ws)]
                for r in bad:
                    args[r]["t"].layout = "x"
                return self.case("all_reduce", kind, "an expanded tensor (stride 0: its "
                                 "elements share memory)", args, bad, KW_EXPANDED)
            bd, bop = rng.choice(UNSUPPORTED)
            args = [arg(d=bd, op=bop) if r in bad else arg() for r in range(ws)]
            return self.case("all_reduce", kind, f"{bop} on {bd}", args, bad, KW_OP,
                             ("NotImplementedError", "ValueError"))
        who = self.subset()
        if rng.random() < 0.5:
            n2 = n + rng.randint(1, 5) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
            args = [arg(n=n2, shape=(n2,)) if r in who else arg() for r in range(ws)]
            return self.case("all_reduce", kind, f"ranks {list(who)} pass {n2} elements, the "
                             f"others {n}", args)
        d2 = (SAME_BYTES if rng.random() < 0.3 else OTHER_BYTES)[d]
        op2 = op if op in ("SUM", "MIN", "MAX", "PRODUCT") else "SUM"
        args = [arg(d=d2, op=op2) if r in who else arg(op=op2) for r in range(ws)]
        return self.case("all_reduce", kind, f"ranks {list(who)} pass {d2}, the others {d}", args)

    # reduce / broadcast ----------------------------------------------------------------------

    def gen_reduce(self, kind):
        return self._rooted("reduce", kind)

    def gen_broadcast(self, kind):
        return self._rooted("broadcast", kind)

    def _rooted(self, name, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype(reducing=name == "reduce")
        shape = self.shape(n)
        root = rng.randrange(ws)
        op = self.redop(d) if name == "reduce" else None
        blocking = self.blocking(kind)

        def arg(n=n, d=d, root=root, op=op, shape=shape):
            a = {"t": self.t(n, d, shape=shape), "root": root, "blocking": blocking}
            if name == "reduce":
                a["op"] = op
            return a

        if kind == "valid":
            return self.case(name, kind, "ok", [arg() for _ in range(ws)])
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            if name == "reduce" and rng.random() < 0.3:
                bd, bop = rng.choice(UNSUPPORTED)
                args = [arg(d=bd, op=bop) if r in bad else arg() for r in range(ws)]
                return self.case(name, kind, f"{bop} on {bd}", args, bad, KW_OP,
                                 ("NotImplementedError", "ValueError"))
            broot = self.bad_root()
            args = [arg(root=broot) if r in bad else arg() for r in range(ws)]
            return self.case(name, kind, f"root {broot} out of range", args, bad, KW_RANK)
        who = self.subset()
        if rng.random() < 0.6:
            n2 = n + rng.randint(1, 5) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
            args = [arg(n=n2, shape=(n2,)) if r in who else arg() for r in range(ws)]
            return self.case(name, kind, f"ranks {list(who)} pass {n2} elements, the others {n}",
                             args)
        d2 = (SAME_BYTES if rng.random() < 0.3 else OTHER_BYTES)[d]
        op2 = op if op in (None, "SUM", "MIN", "MAX", "PRODUCT") else "SUM"
        args = [arg(d=d2, op=op2) if r in who else arg(op=op2) for r in range(ws)]
        return self.case(name, kind, f"ranks {list(who)} pass {d2}, the others {d}", args)

    # all_gather (list) -----------------------------------------------------------------------

    def gen_all_gather(self, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype()
        shape = self.shape(n)
        oshape = shape if rng.random() < 0.7 else (n,)
        blocking = self.blocking(kind)

        def arg(n=n, d=d, outs=None, od=None, shape=shape, oshape=oshape):
            if outs is None:
                outs = [oshape] * ws
            return {"in": self.tin(n, d, shape=shape),
                    "out": [self.t(0, od or d, shape=s) for s in outs], "blocking": blocking}

        if kind == "valid":
            if rng.random() < 0.25:
                # the common idiom all_gather(outs, outs[rank])
                args = [arg(oshape=shape) for _ in range(ws)]
                for a in args:
                    a["alias"] = True
                return self.case("all_gather", kind, "input is output[rank]", args)
            return self.case("all_gather", kind, "ok", [arg() for _ in range(ws)])
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            v = rng.choice(("length", "one-numel", "all-numel", "dtype"))
            if v == "length":
                k = rng.choice([x for x in (ws - 1, ws + 1) if x >= 0])
                b = lambda: arg(outs=[oshape] * k)  # noqa: E731
                what, kw = f"output list of {k} tensors", KW_LIST
            elif v == "one-numel":
                j = rng.randrange(ws)
                outs = [(n + 1,) if i == j else (n,) for i in range(ws)]
                b = lambda: arg(outs=outs, oshape=(n,))  # noqa: E731
                what, kw = f"output {j} has {n + 1} elements, the others {n}", KW_SIZE
            elif v == "all-numel":
                m = n + 1 if n == 0 or rng.random() < 0.5 else n - 1
                b = lambda: arg(outs=[(m,)] * ws)  # noqa: E731
                what, kw = f"outputs of {m} elements for an input of {n}", KW_SIZE
            else:
                od = OTHER_BYTES[d] if rng.random() < 0.5 else SAME_BYTES[d]
                b = lambda: arg(od=od)  # noqa: E731
                what, kw = f"{d} input, {od} outputs", KW_DTYPE
            args = [b() if r in bad else arg() for r in range(ws)]
            return self.case("all_gather", kind, what, args, bad, kw)
        who = self.subset()
        n2 = n + rng.randint(1, 4) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
        args = [arg(n=n2, shape=(n2,), oshape=(n2,)) if r in who else arg() for r in range(ws)]
        return self.case("all_gather", kind, f"ranks {list(who)} pass {n2} elements, the "
                         f"others {n}", args)

    # all_gather_into_tensor ------------------------------------------------------------------

    def gen_all_gather_into_tensor(self, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype()
        cols = 2 if n % 2 == 0 and n and rng.random() < 0.3 else None
        blocking = self.blocking(kind)

        def arg(n=n, d=d, on=None, od=None, inplace=False):
            on = ws * n if on is None else on
            if cols and on % cols == 0 and n % cols == 0:
                ishape, oshape = (n // cols, cols), (on // cols, cols)
            else:
                ishape, oshape = (n,), (on,)
            a = {"in": self.tin(n, d, shape=ishape), "out": self.t(on, od or d, shape=oshape),
                 "blocking": blocking}
            if inplace:
                a["inplace"] = True
                a["out"].layout = "c"
            return a

        if kind == "valid":
            inplace = rng.random() < 0.3
            return self.case("all_gather_into_tensor", kind, "in place" if inplace else "ok",
                             [arg(inplace=inplace) for _ in range(ws)])
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            if ws * n >= 2 and rng.random() < 0.2:
                args = [arg() for r in range(ws)]
                for r in bad:
                    args[r]["out"].layout = "x"
                return self.case("all_gather_into_tensor", kind, "an expanded output (stride 0)",
                                 args, bad, KW_EXPANDED)
            if rng.random() < 0.65:
                on = rng.choice([x for x in (ws * n + 1, ws * n - 1, (ws - 1) * n, (ws + 1) * n,
                                             n, 2**20) if x >= 0 and x != ws * n])
                b = lambda: arg(on=on)  # noqa: E731
                what, kw = f"output of {on} elements for {ws} x {n}", KW_SIZE
            else:
                od = OTHER_BYTES[d] if rng.random() < 0.5 else SAME_BYTES[d]
                b = lambda: arg(od=od)  # noqa: E731
                what, kw = f"{d} input, {od} output", KW_DTYPE
            args = [b() if r in bad else arg() for r in range(ws)]
            return self.case("all_gather_into_tensor", kind, what, args, bad, kw)
        who = self.subset()
        if rng.random() < 0.7:
            n2 = n + rng.randint(1, 4) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
            args = [arg(n=n2) if r in who else arg() for r in range(ws)]
            return self.case("all_gather_into_tensor", kind, f"ranks {list(who)} pass {n2} "
                             f"elements, the others {n}", args)
        d2 = OTHER_BYTES[d]
        args = [arg(d=d2) if r in who else arg() for r in range(ws)]
        return self.case("all_gather_into_tensor", kind, f"ranks {list(who)} pass {d2}, the "
                         f"others {d}", args)

    # reduce_scatter (list) -------------------------------------------------------------------

    def gen_reduce_scatter(self, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype(reducing=True)
        shape = self.shape(n)
        op = self.redop(d)
        blocking = self.blocking(kind)

        def arg(n=n, d=d, op=op, ins=None, od=None, on=None):
            ins = [shape] * ws if ins is None else ins
            oshape = shape if on is None else (on,)
            return {"out": self.t(0, od or d, shape=oshape), "in": [self.tin(0, d, shape=s) for s in ins],
                    "op": op, "blocking": blocking}

        if kind == "valid":
            if rng.random() < 0.25:
                # reduce_scatter(ins[rank], ins)
                args = [arg() for _ in range(ws)]
                for r, a in enumerate(args):
                    a["alias"] = True
                    if a["in"][r].layout == "x":  # written: never expanded
                        a["in"][r].layout = "c"
                return self.case("reduce_scatter", kind, "output is input[rank]", args)
            return self.case("reduce_scatter", kind, "ok", [arg() for _ in range(ws)])
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            v = rng.choice(("length", "one-numel", "out-numel", "dtype", "op"))
            exc = ("ValueError", "RuntimeError")
            if v == "length":
                k = rng.choice([x for x in (ws - 1, ws + 1) if x >= 0])
                b = lambda: arg(ins=[shape] * k)  # noqa: E731
                what, kw = f"input list of {k} tensors", KW_LIST
            elif v == "one-numel":
                j = rng.randrange(ws)
                b = lambda: arg(ins=[(n + 1,) if i == j else (n,) for i in range(ws)], on=n)  # noqa: E731
                what, kw = f"input {j} has {n + 1} elements, the others {n}", KW_SIZE
            elif v == "out-numel":
                m = n + 1 if n == 0 or rng.random() < 0.5 else n - 1
                b = lambda: arg(on=m)  # noqa: E731
                what, kw = f"output of {m} elements for inputs of {n}", KW_SIZE
            elif v == "dtype":
                od = OTHER_BYTES[d] if rng.random() < 0.5 else SAME_BYTES[d]
                b = lambda: arg(od=od)  # noqa: E731
                what, kw = f"{d} inputs, {od} output", KW_DTYPE
            else:
                bd, bop = rng.choice(UNSUPPORTED[:5])
                b = lambda: arg(d=bd, op=bop)  # noqa: E731
                what, kw, exc = f"{bop} on {bd}", KW_OP, ("NotImplementedError", "ValueError")
            args = [b() if r in bad else arg() for r in range(ws)]
            return self.case("reduce_scatter", kind, what, args, bad, kw, exc)
        who = self.subset()
        n2 = n + rng.randint(1, 4) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
        args = [arg(ins=[(n2,)] * ws, on=n2) if r in who else arg() for r in range(ws)]
        return self.case("reduce_scatter", kind, f"ranks {list(who)} pass {n2} elements per "
                         f"block, the others {n}", args)

    # reduce_scatter_tensor -------------------------------------------------------------------

    def gen_reduce_scatter_tensor(self, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype(reducing=True)
        op = self.redop(d)
        blocking = self.blocking(kind)

        def arg(n=n, d=d, op=op, inn=None, od=None, inplace=False):
            inn = ws * n if inn is None else inn
            a = {"out": self.t(n, od or d, shape=(n,)), "in": self.tin(inn, d, shape=(inn,)),
                 "op": op, "blocking": blocking}
            if inplace:
                a["inplace"] = True
                a["in"].layout = "c"
            return a

        if kind == "valid":
            inplace = rng.random() < 0.3
            return self.case("reduce_scatter_tensor", kind, "in place" if inplace else "ok",
                             [arg(inplace=inplace) for _ in range(ws)])
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            v = rng.random()
            exc = ("ValueError", "RuntimeError")
            if v < 0.5:
                inn = rng.choice([x for x in (ws * n + 1, ws * n - 1, (ws - 1) * n, n, 2**20)
                                  if x >= 0 and x != ws * n])
                b = lambda: arg(inn=inn)  # noqa: E731
                what, kw = f"input of {inn} elements for {ws} x {n}", KW_SIZE
            elif v < 0.8:
                od = OTHER_BYTES[d] if rng.random() < 0.5 else SAME_BYTES[d]
                b = lambda: arg(od=od)  # noqa: E731
                what, kw = f"{d} input, {od} output", KW_DTYPE
            else:
                bd, bop = rng.choice(UNSUPPORTED[:5])
                b = lambda: arg(d=bd, op=bop)  # noqa: E731
                what, kw, exc = f"{bop} on {bd}", KW_OP, ("NotImplementedError", "ValueError")
            args = [b() if r in bad else arg() for r in range(ws)]
            return self.case("reduce_scatter_tensor", kind, what, args, bad, kw, exc)
        who = self.subset()
        n2 = n + rng.randint(1, 4) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
        args = [arg(n=n2) if r in who else arg() for r in range(ws)]
        return self.case("reduce_scatter_tensor", kind, f"ranks {list(who)} pass {n2} "
                         f"elements per block, the others {n}", args)

    # gather / scatter ------------------------------------------------------------------------

    def gen_gather(self, kind):
        return self._gather_scatter("gather", kind)

    def gen_scatter(self, kind):
        return self._gather_scatter("scatter", kind)

    def _gather_scatter(self, name, kind):
        """gather: "in" on every rank, "list" on the root. scatter: "out" on every rank,
        "list" on the root."""
        ws, rng = self.ws, self.rng
        n, d = self.numel(), self.dtype()
        shape = self.shape(n)
        root = rng.randrange(ws)
        blocking = self.blocking(kind)
        one = "in" if name == "gather" else "out"

        def arg(r, n=n, d=d, root=root, lshapes=None, ld=None, extra_list=False):
            a = {one: (self.tin if one == "in" else self.t)(n, d, shape=shape if n == shape_numel(shape) else (n,)),
                 "root": root, "blocking": blocking}
            if r == root or extra_list:
                lshapes = [shape] * ws if lshapes is None else lshapes
                a["list"] = [(self.tin if one == "out" else self.t)(0, ld or d, shape=s) for s in lshapes]
            return a

        if kind == "valid":
            return self.case(name, kind, "ok", [arg(r) for r in range(ws)])
        if kind == "all_bad":
            broot = self.bad_root()
            return self.case(name, kind, f"root {broot} out of range",
                             [arg(r, root=broot) for r in range(ws)], range(ws), KW_RANK)
        if kind == "some_bad":
            v = rng.choice(("root-range", "length", "numel", "dtype", "list-on-non-root"))
            if v == "root-range" or (v == "list-on-non-root" and ws == 1):
                bad = self.subset()
                broot = self.bad_root()
                args = [arg(r, root=broot) if r in bad else arg(r) for r in range(ws)]
                return self.case(name, kind, f"root {broot} out of range", args, bad, KW_RANK)
            if v == "list-on-non-root":
                bad = self.subset([r for r in range(ws) if r != root])
                args = [arg(r, extra_list=r in bad) for r in range(ws)]
                return self.case(name, kind, f"a {name} list on non-root ranks", args, bad,
                                 ("list", "root", "destination", "source", "specified"))
            bad = (root,)
            if v == "length":
                k = rng.choice([x for x in (ws - 1, ws + 1) if x >= 0])
                lshapes, ld, what, kw = [shape] * k, None, f"root's list of {k} tensors", KW_LIST
            elif v == "numel":
                j = rng.randrange(ws)
                lshapes = [(n + 1,) if i == j else (n,) for i in range(ws)]
                if rng.random() < 0.4:
                    m = n + 1 if n == 0 or rng.random() < 0.5 else n - 1
                    lshapes = [(m,)] * ws
                ld, what, kw = None, f"root's list {lshapes} for {n} elements", KW_SIZE
            else:
                ld = OTHER_BYTES[d]
                lshapes, what, kw = None, f"root's list of {ld} for {d}", KW_DTYPE
            args = [arg(r, lshapes=lshapes, ld=ld) for r in range(ws)]
            return self.case(name, kind, what, args, bad, kw)
        who = self.subset()
        n2 = n + rng.randint(1, 4) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
        args = []
        for r in range(ws):
            if r in who:
                a = arg(r, n=n2, lshapes=[(n2,)] * ws)
            else:
                a = arg(r)
            args.append(a)
        return self.case(name, kind, f"ranks {list(who)} pass {n2} elements, the others {n}",
                         args)

    # all_to_all (lists) ----------------------------------------------------------------------

    def counts(self, lo=0, hi=3):
        return [[self.rng.randint(lo, hi) for _ in range(self.ws)] for _ in range(self.ws)]

    def gen_all_to_all(self, kind):
        ws, rng = self.ws, self.rng
        d = self.dtype()
        cols = rng.choice((1, 1, 3))
        m = self.counts(0, 4 if rng.random() < 0.8 else 300)  # m[s][d]: rows s sends d
        blocking = self.blocking(kind)

        def arg(r, m=m, d=d, od=None, k=None, ind=None):
            ins = [self.tin(0, d, shape=(m[r][j], cols)) for j in range(ws if k is None else k)]
            outs = [self.t(0, od or d, shape=(m[s][r], cols)) for s in range(ws if k is None else k)]
            return {"in": ins, "out": outs, "blocking": blocking}

        if kind == "valid":
            return self.case("all_to_all", kind, "ok", [arg(r) for r in range(ws)],
                             note=f"rows[s][d]={m}")
        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            v = rng.choice(("length", "dtype", "self-block"))
            if v == "length":
                k = rng.choice([x for x in (ws - 1, ws + 1) if x >= 0])
                what, kw = f"lists of {k} tensors", KW_LIST
                args = []
                for r in range(ws):
                    if r in bad:
                        a = arg(r) if k > ws else arg(r, k=k)
                        if k > ws:
                            a["in"].append(self.t(0, d, shape=(1, cols)))
                            a["out"].append(self.t(0, d, shape=(1, cols)))
                        args.append(a)
                    else:
                        args.append(arg(r))
                return self.case("all_to_all", kind, what, args, bad, kw, note=f"rows[s][d]={m}")
            if v == "dtype":
                od = OTHER_BYTES[d] if rng.random() < 0.5 else SAME_BYTES[d]
                args = [arg(r, od=od) if r in bad else arg(r) for r in range(ws)]
                return self.case("all_to_all", kind, f"{d} inputs, {od} outputs", args, bad,
                                 KW_DTYPE, note=f"rows[s][d]={m}")
            # this rank keeps a block for itself that differs from the one it expects
            args = []
            for r in range(ws):
                a = arg(r)
                if r in bad:
                    extra = rng.randint(1, 6)
                    a["in"][r] = self.t(0, d, shape=(m[r][r] + extra, cols))
                    a["note"] = f"keeps {m[r][r] + extra} rows for itself, expects {m[r][r]}"
                args.append(a)
            return self.case("all_to_all", kind, "self block sizes differ", args, bad,
                             KW_SIZE + ("itself", "self"), note=f"rows[s][d]={m}")
        # mismatch: rank t expects from s another count than s sends
        pairs = [(s, t) for s in range(ws) for t in range(ws) if s != t]
        s, t = rng.choice(pairs)
        m2 = [row[:] for row in m]
        m2[s][t] = m[s][t] + rng.randint(1, 5) if m[s][t] == 0 or rng.random() < 0.5 else rng.randint(0, m[s][t] - 1)
        args = [arg(r, m=m2) if r == t else arg(r) for r in range(ws)]
        return self.case("all_to_all", kind, f"rank {t} expects {m2[s][t]} rows from rank {s}, "
                         f"which sends {m[s][t]}", args, note=f"rows[s][d]={m}")

    # all_to_all_single -----------------------------------------------------------------------

    def gen_all_to_all_single(self, kind):
        ws, rng = self.ws, self.rng
        d = self.dtype()
        cols = rng.choice((1, 1, 2, 5))
        equal = rng.random() < 0.35
        big = rng.random() < 0.15
        if equal:
            k = rng.choice((0, 1, 2, 3)) if not big else 20000 // cols
            m = [[k] * ws for _ in range(ws)]
        else:
            m = self.counts(0, 4 if not big else 30000 // cols)
        blocking = self.blocking(kind)

        def arg(r, m=m, d=d, od=None, isplit=None, osplit=None, irows=None, orows=None,
                layout=None):
            sends = [m[r][j] for j in range(ws)]
            recvs = [m[s][r] for s in range(ws)]
            irows = sum(sends) if irows is None else irows
            orows = sum(recvs) if orows is None else orows
            a = {"in": self.tin(0, d, shape=(irows, cols), layout=layout),
                 "out": self.t(0, od or d, shape=(orows, cols), layout=layout),
                 "blocking": blocking}
            if not equal:
                a["isplit"] = sends if isplit is None else isplit
                a["osplit"] = recvs if osplit is None else osplit
            else:
                if isplit is not None:
                    a["isplit"] = isplit
                if osplit is not None:
                    a["osplit"] = osplit
            return a

        note = f"rows[s][d]={m}" if not equal else f"{m[0][0]} rows per block"
        if kind == "valid":
            v = rng.random()
            args = [arg(r) for r in range(ws)]
            variant = "equal splits (none passed)" if equal else "uneven splits"
            if v < 0.15 and all(a["in"].shape == a["out"].shape for a in args):
                for a in args:
                    a["overlap"] = "same"
                    a["in"].layout = a["out"].layout = "c"
                variant += ", output is the input (in place)"
            elif v < 0.25 and equal:
                for a in args:
                    a["overlap"] = rng.randint(1, 3) * cols
                    a["in"].layout = a["out"].layout = "c"
                variant += ", output overlaps the input (shifted)"
            elif v < 0.35 and not equal and rng.random() < 0.5:
                # equal counts passed explicitly
                pass
            return self.case("all_to_all_single", kind, variant, args, note=note)

        if kind in ("all_bad", "some_bad"):
            bad = tuple(range(ws)) if kind == "all_bad" else self.subset()
            v = rng.choice(("in-sum", "out-sum", "negative", "huge", "count", "dtype",
                            "self-block", "self-block", "wrap", "indivisible", "expanded"))
            if v == "expanded" and any(sum(m[s][r] for s in range(ws)) < 2 for r in bad):
                v = "self-block"
            if v == "wrap" and ws < 3:
                v = "huge"
            if v == "indivisible" and ws == 1:
                v = "in-sum"
            exc = ("ValueError", "RuntimeError")
            sends = {r: [m[r][j] for j in range(ws)] for r in range(ws)}
            recvs = {r: [m[s][r] for s in range(ws)] for r in range(ws)}
            args = []
            what = kw = None
            for r in range(ws):
                if r not in bad:
                    args.append(arg(r))
                    continue
                S, R = sends[r][:], recvs[r][:]
                j = rng.randrange(ws)
                if v == "in-sum":
                    S[j] += rng.randint(1, 3)
                    a = arg(r, isplit=S, osplit=R)
                    what, kw = "input split sizes add up to more rows than the input has", KW_SPLIT
                elif v == "out-sum":
                    R[j] += rng.randint(1, 3)
                    a = arg(r, isplit=S, osplit=R)
                    what, kw = "output split sizes add up to more rows than the output has", KW_SPLIT
                elif v == "negative":
                    # the sum stays right: only the sign is wrong
                    j2 = (j + 1) % ws
                    if ws == 1:
                        S[j] = -1
                    else:
                        S[j] -= S[j] + 1
                        S[j2] += m[r][j] + 1
                    a = arg(r, isplit=S, osplit=R)
                    what, kw = "a negative input split size", KW_SPLIT + ("negative",)
                elif v == "huge":
                    if rng.random() < 0.5:
                        S[j] = HUGE
                        a = arg(r, isplit=S, osplit=R)
                        what = "an input split size of 2**62"
                    else:
                        R[j] = HUGE
                        a = arg(r, isplit=S, osplit=R)
                        what = "an output split size of 2**62"
                    kw = KW_SPLIT
                elif v == "wrap":
                    # int64 sums that wrap around to the tensor's row count
                    rows = sum(S)
                    W = [0] * ws
                    W[0] = W[1] = I64_MAX
                    W[2] = rows + 2
                    if rng.random() < 0.5:
                        a = arg(r, isplit=W, osplit=R)
                        what = f"input split sizes {W} whose int64 sum wraps to the rows"
                    else:
                        orows = sum(R)
                        W[2] = orows + 2
                        a = arg(r, isplit=S, osplit=W)
                        what = f"output split sizes {W} whose int64 sum wraps to the rows"
                    kw = KW_SPLIT
                elif v == "count":
                    k = rng.choice([x for x in (ws - 1, ws + 1) if x >= 1] or [2])
                    S = (S + [0])[:k] if k > ws else S[:k]
                    a = arg(r, isplit=S, osplit=R, irows=sum(S))
                    what, kw = f"{k} input split sizes", KW_SPLIT + ("entries", "world size")
                elif v == "dtype":
                    od = OTHER_BYTES[d] if rng.random() < 0.5 else SAME_BYTES[d]
                    a = arg(r, od=od)
                    what, kw = f"{d} input, {od} output", KW_DTYPE
                elif v == "expanded":
                    a = arg(r)
                    a["out"].layout = "x"
                    what, kw = "an expanded output (stride 0)", KW_EXPANDED
                elif v == "indivisible":
                    rows = ws * rng.randint(0, 3) + rng.randint(1, ws - 1)
                    a = arg(r, irows=rows, orows=rows)
                    a.pop("isplit", None)
                    a.pop("osplit", None)
                    what, kw = f"{rows} rows, no split sizes, world size {ws}", KW_SIZE + (
                        "divisible", "split")
                else:  # self-block: sums right, but the rank keeps another count than it expects
                    extra = rng.randint(1, 6)
                    if rng.random() < 0.6:
                        S[r] += extra
                    else:
                        R[r] += extra
                    a = arg(r, isplit=S, osplit=R, irows=sum(S), orows=sum(R))
                    a["note"] = f"keeps {S[r]} rows for itself, expects {R[r]}"
                    what, kw = "self block: sends itself another count than it expects", (
                        KW_SIZE + KW_SPLIT + ("itself", "self"))
                args.append(a)
            return self.case("all_to_all_single", kind, what, args, bad, kw, exc, note=note)

        # mismatch: consistent on every rank, but rank t expects another count from s
        if ws == 1:
            return None
        if equal:
            # one rank passes equal blocks of another size
            who = self.subset()
            k2 = m[0][0] + rng.randint(1, 3)
            m2 = [[k2] * ws for _ in range(ws)]
            args = [arg(r, m=m2) if r in who else arg(r) for r in range(ws)]
            return self.case("all_to_all_single", kind, f"ranks {list(who)} pass {k2} rows per "
                             f"block, the others {m[0][0]}", args, note=note)
        s, t = rng.choice([(s, t) for s in range(ws) for t in range(ws) if s != t])
        m2 = [row[:] for row in m]
        m2[s][t] = m[s][t] + rng.randint(1, 5) if m[s][t] == 0 or rng.random() < 0.5 else rng.randint(0, m[s][t] - 1)
        args = [arg(r, m=m2) if r == t else arg(r) for r in range(ws)]
        return self.case("all_to_all_single", kind, f"rank {t} expects {m2[s][t]} rows from rank "
                         f"{s}, which sends {m[s][t]}", args, note=note)

    # send/recv -------------------------------------------------------------------------------

    def gen_send_recv(self, kind):
        return self._p2p("send/recv", kind)

    def gen_isend_irecv(self, kind):
        return self._p2p("isend/irecv", kind)

    def _p2p(self, name, kind):
        ws, rng = self.ws, self.rng
        n, d = self.numel(small=kind != "valid"), self.dtype()
        shape = self.shape(n)
        if ws == 1 or (name == "isend/irecv" and kind == "valid" and rng.random() < 0.15):
            a = b = rng.randrange(ws)  # isend/irecv to itself (torch allows it)
            if name == "send/recv" or kind != "valid":
                return None
        else:
            a, b = rng.sample(range(ws), 2)
        tag = self.tag()
        blocking = name == "send/recv" and kind in ("valid", "all_bad")

        def snd(tag=tag, peer=b, n=n, d=d, shape=shape):
            return {"role": "send", "peer": peer, "tag": tag, "t": self.tin(n, d, shape=shape),
                    "blocking": blocking}

        def rcv(tag=tag, peer=a, n=n, d=d, shape=shape, any_source=False):
            r = {"role": "recv", "peer": peer, "tag": tag, "t": self.t(n, d, shape=shape),
                 "blocking": blocking}
            if any_source:
                r["any_source"] = True
            return r

        def place(x, y):
            args = [{} for _ in range(ws)]
            if a == b:
                args[a] = {"role": "self", "send": x, "recv": y}
            else:
                args[a], args[b] = x, y
            return args

        if kind == "valid":
            tag = rng.choice((tag, tag, tag, 0, MAX_TAG)) if a != b else tag
            anys = a != b and rng.random() < 0.25
            return self.case(name, kind, ("to itself" if a == b else "ok") +
                             (" (recv from any source)" if anys else ""),
                             place(snd(tag=tag), rcv(tag=tag, any_source=anys)))
        if kind == "all_bad":
            v = rng.choice(("negative-tag", "peer-range", "tag-overflow", "self-send"))
            if v == "negative-tag":
                t = rng.choice((-1, -7, -(2**31)))
                return self.case(name, kind, f"tag {t} on both sides",
                                 place(snd(tag=t), rcv(tag=t)), (a, b), KW_TAG, ("ValueError",))
            if v == "tag-overflow":
                t = rng.choice((2**31, 2**40))
                return self.case(name, kind, f"tag {t} on both sides (past int32)",
                                 place(snd(tag=t), rcv(tag=t)), (a, b),
                                 KW_TAG + ("incompatible", "int", "overflow", "argument"),
                                 ("ValueError", "RuntimeError", "TypeError", "OverflowError"))
            if v == "self-send" and name == "send/recv":
                # a blocking send refuses its own rank (torch: "should not be the same"); a
                # receive from itself is legal (it would wait for a send), so none is posted
                args = [{} for _ in range(ws)]
                args[a] = snd(peer=a)
                return self.case(name, kind, "blocking send to itself", args, (a,),
                                 KW_RANK + ("same",))
            p, q = rng.choice((ws, ws + 5, 2**31 - 1)), rng.choice((ws, -1, -2))
            return self.case(name, kind, f"send to rank {p}, recv from rank {q}",
                             place(snd(peer=p), rcv(peer=q)), (a, b), KW_RANK)
        if a == b:
            return None
        if kind == "some_bad":
            v = rng.choice(("send-tag", "send-peer", "recv-tag", "recv-peer", "recv-expanded"))
            if v == "recv-expanded" and n >= 2:
                r_ = rcv(shape=(n,))
                r_["t"].layout = "x"
                return self.case(name, kind, "receive into an expanded tensor (stride 0)",
                                 place(snd(shape=(n,)), r_), (b,), KW_EXPANDED)
            if v == "recv-expanded":
                v = "recv-tag"
            if v == "send-tag":
                return self.case(name, kind, "sender passes tag -1, the receiver waits",
                                 place(snd(tag=-1), rcv()), (a,), KW_TAG, ("ValueError",))
            if v == "send-peer":
                p = rng.choice((ws, ws + 1))
                return self.case(name, kind, f"sender sends to rank {p}, the receiver waits",
                                 place(snd(peer=p), rcv()), (a,), KW_RANK)
            if v == "recv-tag":
                return self.case(name, kind, "receiver passes tag -3",
                                 place(snd(), rcv(tag=-3)), (b,), KW_TAG, ("ValueError",))
            q = rng.choice((ws, -1))
            return self.case(name, kind, f"receiver receives from rank {q}",
                             place(snd(), rcv(peer=q)), (b,), KW_RANK)
        v = rng.choice(("numel", "numel", "tag", "dtype-bytes", "dtype-same-bytes"))
        if v == "numel":
            n2 = n + rng.randint(1, 5) if n == 0 or rng.random() < 0.5 else rng.randint(0, n - 1)
            return self.case(name, kind, f"sends {n} elements into a receive of {n2}",
                             place(snd(), rcv(n=n2, shape=(n2,))),
                             keywords=("message size mismatch",))
        if v == "tag":
            t2 = self.tag() ^ (1 << 30)
            return self.case(name, kind, f"sent with tag {tag}, received with tag {t2}",
                             place(snd(), rcv(tag=t2)), note="the receive can only time out")
        d2 = (OTHER_BYTES if v == "dtype-bytes" else SAME_BYTES)[d]
        return self.case(name, kind, f"sends {d}, receives {d2}", place(snd(), rcv(d=d2)),
                         keywords=("message size mismatch",) if v == "dtype-bytes" else ())

    # barrier ---------------------------------------------------------------------------------

    def gen_barrier(self, kind):
        blocking = self.rng.random() < 0.5
        return self.case("barrier", "valid", "ok", [{"blocking": blocking} for _ in range(self.ws)])


BYTES = {"float32": 4, "int32": 4, "float64": 8, "int64": 8, "bfloat16": 2, "float16": 2,
         "complex64": 8, "complex128": 16, "uint8": 1, "int8": 1, "int16": 2, "bool": 1}


def tensors_of(a):
    out = []
    for v in a.values():
        if isinstance(v, T):
            out.append(v)
        elif isinstance(v, list) and v and isinstance(v[0], T):
            out += v
    return out


def shape_numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def make_cases(seed, world, count):
    return Gen(seed, world).cases(count)


# --------------------------------------------------------------------------------------------
# Running cases inside a rank
# --------------------------------------------------------------------------------------------


class Unattainable(Exception):
    """No right result exists for this rank (it must raise)."""


def _torch():
    import torch
    import torch.distributed as dist

    return torch, dist


def dt(name):
    torch, _ = _torch()
    return getattr(torch, name)


def bits_dtype(t):
    torch, _ = _torch()
    return {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: None}[t.element_size()]


def strides_for(spec):
    shape = spec.shape
    st = []
    acc = 1
    for s in reversed(shape):
        st.append(acc)
        acc *= max(s, 1)
    st = list(reversed(st))
    if spec.layout == "g":
        st = [2 * x for x in st]
    elif spec.layout == "t" and len(shape) == 2:
        st = [1, max(shape[0], 1)]
    elif spec.layout == "x" and shape:
        st[0] = 0  # expanded: every index of dim 0 is the same memory
    span = 0
    if spec.numel:
        span = 1 + sum((s - 1) * x for s, x in zip(shape, st))
    return tuple(st), span


def is_timeout(msg):
    return re.search(r"timed? ?out|timeout", msg, re.I) is not None


class Buffer:
    def __init__(self, name, buf, views, role):
        torch, _ = _torch()
        self.name, self.buf, self.views, self.role = name, buf, views, role
        self.snap = buf.clone()
        mask = torch.zeros(buf.numel(), dtype=torch.bool)
        idx = torch.arange(buf.numel())
        for v in views:
            mask[idx.as_strided(v.size(), v.stride(), v.storage_offset()).reshape(-1)] = True
        self.mask = mask

    def changed(self):
        torch, _ = _torch()
        bd = bits_dtype(self.buf)
        if bd is None:
            a, b = self.buf.view(torch.int64), self.snap.view(torch.int64)
            return (a != b).view(-1, 2).any(1)
        return self.buf.view(bd) != self.snap.view(bd)

    def check(self, may_write_views):
        """Problems: guards changed (always), view contents changed where they may not be."""
        torch, _ = _torch()
        ch = self.changed()
        out = []
        outside = ch & ~self.mask
        if outside.any():
            idx = outside.nonzero().flatten().tolist()
            vals = self.buf[idx[:6]].tolist()
            spans = []
            for v in self.views:
                st, span = v.storage_offset(), None
                spans.append(st)
            out.append(f"GUARD OVERWRITTEN in {self.name} (buffer of {self.buf.numel()} "
                       f"{str(self.buf.dtype)[6:]}, tensor views start at {spans}): "
                       f"{len(idx)} guard elements changed, at {idx[:12]}, now {vals}")
        if not may_write_views:
            inside = ch & self.mask
            if inside.any():
                idx = inside.nonzero().flatten().tolist()
                out.append(f"{self.name} was written ({len(idx)} elements, at {idx[:12]}) "
                           f"though {'it is an input' if self.role == 'in' else 'the call was rejected'}")
        return out


class CaseCtx:
    def __init__(self, runner, case, rank):
        self.runner, self.case, self.rank = runner, case, rank
        self.buffers = []

    def data(self, r, slot, spec, small=False):
        torch, _ = _torch()
        g = torch.Generator()
        g.manual_seed(zlib.crc32(f"{self.runner.seed}:{self.case.index}:{r}:{slot}".encode()))
        lo, hi = (-2, 3) if small else (-20, 21)
        if spec.layout == "x" and spec.shape:
            # an expanded tensor holds one row, repeated
            row = spec.shape[1:]
            v = torch.randint(lo, hi, (shape_numel(row),), generator=g, dtype=torch.int64)
            return v.to(dt(spec.dtype)).reshape(row).expand(spec.shape)
        v = torch.randint(lo, hi, (max(spec.numel, 0),), generator=g, dtype=torch.int64)
        return v.to(dt(spec.dtype)).reshape(spec.shape)

    def alloc(self, name, specs, fills, role):
        """One guarded buffer holding ``specs`` one after another (guard gaps between them);
        returns the views, filled with ``fills`` (None: left as sentinel)."""
        torch, _ = _torch()
        dtype = dt(specs[0].dtype) if specs else torch.float32
        layout_spans = [strides_for(s) for s in specs]
        total = specs[0].pre if specs else 1
        offsets = []
        for s, (_, span) in zip(specs, layout_spans):
            offsets.append(total)
            total += span + s.post
        # every spec may have its own dtype (a bad case): one buffer per dtype group
        if len({s.dtype for s in specs}) > 1:
            views = []
            for i, (s, f) in enumerate(zip(specs, fills)):
                views += self.alloc(f"{name}[{i}]", [s], [f], role)
            return views
        buf = torch.empty(max(total, 1), dtype=dtype)
        sentinel(buf)
        views = []
        for s, (st, _), off, f in zip(specs, layout_spans, offsets, fills):
            v = buf.as_strided(s.shape, st, off)
            if f is not None:
                if s.layout == "x" and s.shape:
                    if s.shape[0]:
                        v[0].copy_(f[0])
                else:
                    v.copy_(f)
            views.append(v)
        self.buffers.append(Buffer(name, buf, views, role))
        return views

    def one(self, name, spec, fill, role):
        return self.alloc(name, [spec], [fill], role)[0]


def sentinel(buf):
    torch, _ = _torch()
    if buf.dtype == torch.bool:
        buf.fill_(False)  # data is mostly True
    elif buf.is_complex():
        buf.fill_(complex(-12345.0, 54321.0))
    elif buf.is_floating_point():
        buf.fill_(-12345.0)
    elif buf.dtype == torch.uint8:
        buf.fill_(201)  # data: -20..20, wrapped
    elif buf.dtype == torch.int8:
        buf.fill_(-123)
    else:
        buf.fill_(-12345)


REDUCE_NAMES = {"SUM", "PRODUCT", "MIN", "MAX", "AVG", "BAND", "BOR", "BXOR"}


def reduce_values(vals, op):
    torch, _ = _torch()
    if op == "AVG":
        acc = sum(v.to(torch.float64) for v in vals) / len(vals)
        return acc.to(vals[0].dtype)
    acc = vals[0].clone()
    for v in vals[1:]:
        if op == "SUM":
            acc = acc + v
        elif op == "PRODUCT":
            acc = acc * v
        elif op == "MIN":
            acc = torch.minimum(acc, v)
        elif op == "MAX":
            acc = torch.maximum(acc, v)
        elif op == "BAND":
            acc = acc & v
        elif op == "BOR":
            acc = acc | v
        elif op == "BXOR":
            acc = acc ^ v
    return acc


def same_kind(a, b):
    return a.numel == b.numel and a.dtype == b.dtype


class Runner:
    """Runs cases inside one rank: ``run(cases)`` returns this rank's problems (a list of
    dicts) and counts."""

    def __init__(self, rank, world, seed, short_s=2.0, long_s=30.0, progress=None, label="",
                 warm=False):
        self.rank, self.ws, self.seed = rank, world, seed
        self.warm = warm  # warm up every group (the default one too) before its first case
        self.short_s, self.long_s = short_s, long_s
        self.progress = progress
        self.label = label
        self.kept = []  # every buffer of every case, rechecked at the end
        self.groups = 0

    # ---- helpers

    def log(self, msg):
        sys.stderr.write(f"[fuzz {self.label} rank {self.rank}] {msg}\n")
        sys.stderr.flush()

    def new_group(self):
        """A fresh group; every other one is warmed up by an all_reduce, so that the first
        collective of a group (which also sets up its shared memory) meets bad inputs half
        of the time. (Before 9152049 a rank refusing that first call left the others
        blocked in the set-up for the store's timeout: test_bad_inputs.py's
        test_first_collective_of_a_group_with_one_rank_wrong.)"""
        _, dist = _torch()
        self.groups += 1
        g = dist.new_group(ranks=list(range(self.ws)),
                           timeout=datetime.timedelta(seconds=max(self.long_s, 10)))
        if self.groups % 2 == 0 or self.warm:
            self.group_works(g)
        return g

    def wait(self, work, seconds):
        if work is not None:
            work.wait(timeout=datetime.timedelta(seconds=seconds))

    def group_works(self, group):
        torch, dist = _torch()
        t = torch.ones(3)
        w = dist.all_reduce(t, group=group, async_op=True)
        self.wait(w, self.long_s)
        assert t.eq(self.ws).all(), f"all_reduce gave {t.tolist()}"

    # ---- the ops

    def call(self, ctx, case, me, group, timeout):
        """Builds this rank's tensors, runs the call, returns a list of (name, view,
        expected_fn) to check when it succeeds."""
        torch, dist = _torch()
        op, ws, rank = case.op, self.ws, self.rank
        A = case.args
        blocking = me.get("blocking", False)
        bad = set(case.bad)

        def run(fn_blocking, fn_async):
            if blocking:
                fn_blocking()
            else:
                self.wait(fn_async(), timeout)

        def red(name):
            return getattr(dist.ReduceOp, name)

        small = lambda a: a.get("op") == "PRODUCT"  # noqa: E731

        if op == "all_reduce":
            t = ctx.one("tensor", me["t"], ctx.data(rank, "t", me["t"], small(me)), "inout")

            def exp():
                if bad or any(not same_kind(A[r]["t"], me["t"]) or A[r]["op"] != me["op"]
                              for r in range(ws)):
                    raise Unattainable
                return reduce_values([ctx.data(r, "t", A[r]["t"], small(A[r])).reshape(-1)
                                      for r in range(ws)], me["op"]).reshape(me["t"].shape)

            kw = dict(op=red(me["op"]), group=group)
            run(lambda: dist.all_reduce(t, **kw), lambda: dist.all_reduce(t, async_op=True, **kw))
            return [("tensor", t, exp)]

        if op in ("reduce", "broadcast"):
            t = ctx.one("tensor", me["t"], ctx.data(rank, "t", me["t"], small(me)), "inout")
            root = me["root"]

            def exp():
                mine = ctx.data(rank, "t", me["t"], small(me))
                if op == "reduce":
                    # docs/semantics.md: reduce leaves non-root tensors unchanged, and its non-roots
                    # return once their data is in place, whatever the root does
                    if rank != root:
                        return mine
                    if bad or any(not same_kind(A[r]["t"], me["t"]) or A[r]["op"] != me["op"]
                                  or A[r]["root"] != root for r in range(ws)):
                        raise Unattainable
                    return reduce_values([ctx.data(r, "t", A[r]["t"], small(A[r])).reshape(-1)
                                          for r in range(ws)], me["op"]).reshape(me["t"].shape)
                if rank == root:
                    return mine
                if root in bad or not same_kind(A[root]["t"], me["t"]) or A[root]["root"] != root:
                    raise Unattainable
                return ctx.data(root, "t", A[root]["t"]).reshape(me["t"].shape)

            if op == "reduce":
                kw = dict(group_dst=root, op=red(me["op"]), group=group)
                run(lambda: dist.reduce(t, **kw), lambda: dist.reduce(t, async_op=True, **kw))
            else:
                kw = dict(group_src=root, group=group)
                run(lambda: dist.broadcast(t, **kw),
                    lambda: dist.broadcast(t, async_op=True, **kw))
            return [("tensor", t, exp)]

        if op == "all_gather":
            if me.get("alias"):
                fills = [ctx.data(rank, "in", me["in"]) if i == rank else None
                         for i in range(len(me["out"]))]
                outs = ctx.alloc("outputs", me["out"], fills, "out")
                inp = outs[rank]
            else:
                inp = ctx.one("input", me["in"], ctx.data(rank, "in", me["in"]), "in")
                outs = ctx.alloc("outputs", me["out"], [None] * len(me["out"]), "out")

            def exp_i(i):
                def f():
                    if bad or any(not same_kind(A[r]["in"], me["in"]) for r in range(ws)):
                        raise Unattainable
                    return ctx.data(i, "in", A[i]["in"]).reshape(me["out"][i].shape)
                return f

            run(lambda: dist.all_gather(outs, inp, group=group),
                lambda: dist.all_gather(outs, inp, group=group, async_op=True))
            return [(f"output[{i}]", o, exp_i(i)) for i, o in enumerate(outs)]

        if op == "all_gather_into_tensor":
            n = me["in"].numel
            if me.get("inplace"):
                out = ctx.one("output", me["out"], None, "out")
                flat = out.view(-1)
                flat[rank * n:(rank + 1) * n].copy_(ctx.data(rank, "in", me["in"]).reshape(-1))
                ctx.buffers[-1].snap.copy_(ctx.buffers[-1].buf)
                inp = flat[rank * n:(rank + 1) * n].view(me["in"].shape)
            else:
                inp = ctx.one("input", me["in"], ctx.data(rank, "in", me["in"]), "in")
                out = ctx.one("output", me["out"], None, "out")

            def exp():
                if bad or any(not same_kind(A[r]["in"], me["in"]) for r in range(ws)):
                    raise Unattainable
                return torch.cat([ctx.data(r, "in", A[r]["in"]).reshape(-1)
                                  for r in range(ws)]).reshape(me["out"].shape)

            run(lambda: dist.all_gather_into_tensor(out, inp, group=group),
                lambda: dist.all_gather_into_tensor(out, inp, group=group, async_op=True))
            return [("output", out, exp)]

        if op == "reduce_scatter":
            alias = me.get("alias")
            ins = ctx.alloc("inputs", me["in"], [ctx.data(rank, f"in{i}", s, small(me))
                                                 for i, s in enumerate(me["in"])],
                            "inout" if alias else "in")
            out = ins[rank] if alias else ctx.one("output", me["out"], None, "out")

            def exp():
                if bad or any(len(A[r]["in"]) != ws or any(not same_kind(A[r]["in"][i], me["out"])
                                                           for i in range(ws))
                              or A[r]["op"] != me["op"] for r in range(ws)):
                    raise Unattainable
                return reduce_values([ctx.data(r, f"in{rank}", A[r]["in"][rank], small(A[r])).reshape(-1)
                                      for r in range(ws)], me["op"]).reshape(me["out"].shape)

            kw = dict(op=red(me["op"]), group=group)
            run(lambda: dist.reduce_scatter(out, ins, **kw),
                lambda: dist.reduce_scatter(out, ins, async_op=True, **kw))
            checks = [("output", out, exp)]
            if alias:  # the other inputs stay as they were
                checks += [(f"input[{i}]", x, (lambda i=i: ctx.data(rank, f"in{i}", me["in"][i], small(me))))
                           for i, x in enumerate(ins) if i != rank]
            return checks

        if op == "reduce_scatter_tensor":
            n = me["out"].numel
            data = ctx.data(rank, "in", me["in"], small(me))
            if me.get("inplace"):
                inp = ctx.one("input", me["in"], data, "inout")
                out = inp.view(-1)[rank * n:(rank + 1) * n]
            else:
                inp = ctx.one("input", me["in"], data, "in")
                out = ctx.one("output", me["out"], None, "out")

            def block():
                if bad or any(A[r]["in"].numel != ws * me["out"].numel or
                              A[r]["in"].dtype != me["in"].dtype or A[r]["op"] != me["op"]
                              for r in range(ws)):
                    raise Unattainable
                return reduce_values([ctx.data(r, "in", A[r]["in"], small(A[r])).reshape(-1)[rank * n:(rank + 1) * n]
                                      for r in range(ws)], me["op"])

            kw = dict(op=red(me["op"]), group=group)
            run(lambda: dist.reduce_scatter_tensor(out, inp, **kw),
                lambda: dist.reduce_scatter_tensor(out, inp, async_op=True, **kw))
            checks = [("output", out, lambda: block().reshape(me["out"].shape))]
            if me.get("inplace"):
                def whole():
                    x = data.reshape(-1).clone()
                    x[rank * n:(rank + 1) * n] = block()
                    return x
                checks = [("input (in place)", inp, whole)]
            return checks

        if op in ("gather", "scatter"):
            root = me["root"]
            one_name = "in" if op == "gather" else "out"
            lst = me.get("list")
            if op == "gather":
                t = ctx.one("input", me["in"], ctx.data(rank, "in", me["in"]), "in")
                lt = ctx.alloc("gather_list", lst, [None] * len(lst), "out") if lst is not None else None
            else:
                t = ctx.one("output", me["out"], None, "out")
                lt = (ctx.alloc("scatter_list", lst, [ctx.data(rank, f"l{i}", s) for i, s in enumerate(lst)],
                                "in") if lst is not None else None)

            def root_ok():
                return (root not in bad and 0 <= root < ws and "list" in A[root]
                        and len(A[root]["list"]) == ws)

            checks = []
            if op == "gather":
                if lt is not None:
                    def exp_i(i):
                        def f():
                            if bad or not root_ok() or any(not same_kind(A[r]["in"], A[root]["list"][0])
                                                           or A[r]["root"] != root for r in range(ws)):
                                raise Unattainable
                            return ctx.data(i, "in", A[i]["in"]).reshape(lst[i].shape)
                        return f
                    checks = [(f"gather_list[{i}]", x, exp_i(i)) for i, x in enumerate(lt)]
                kw = dict(gather_list=lt, group_dst=root, group=group)
                run(lambda: dist.gather(t, **kw), lambda: dist.gather(t, async_op=True, **kw))
            else:
                def exp():
                    if rank in bad or not root_ok() or A[root].get("list") is None:
                        raise Unattainable
                    src = A[root]["list"][rank]
                    if not same_kind(src, me["out"]) or any(not same_kind(x, A[root]["list"][0])
                                                            for x in A[root]["list"]):
                        raise Unattainable
                    return ctx.data(root, f"l{rank}", src).reshape(me["out"].shape)
                checks = [("output", t, exp)]
                kw = dict(scatter_list=lt, group_src=root, group=group)
                run(lambda: dist.scatter(t, **kw), lambda: dist.scatter(t, async_op=True, **kw))
            return checks

        if op == "all_to_all":
            ins = ctx.alloc("inputs", me["in"], [ctx.data(rank, f"in{j}", s) for j, s in enumerate(me["in"])], "in")
            outs = ctx.alloc("outputs", me["out"], [None] * len(me["out"]), "out")

            def exp_s(s):
                def f():
                    if rank in bad or s in bad:
                        raise Unattainable
                    src = A[s]["in"][rank]
                    if not same_kind(src, me["out"][s]):
                        raise Unattainable
                    return ctx.data(s, f"in{rank}", src).reshape(me["out"][s].shape)
                return f

            run(lambda: dist.all_to_all(outs, ins, group=group),
                lambda: dist.all_to_all(outs, ins, group=group, async_op=True))
            return [(f"output[{s}]", o, exp_s(s)) for s, o in enumerate(outs)]

        if op == "all_to_all_single":
            data = ctx.data(rank, "in", me["in"])
            ov = me.get("overlap")
            if ov == "same":
                inp = ctx.one("input/output", me["in"], data, "inout")
                out = inp
            elif ov:
                # one buffer: the output starts ``ov`` elements after the input
                torch_ = torch
                spec_in, spec_out = me["in"], me["out"]
                n = spec_in.numel
                buf = torch_.empty(spec_in.pre + n + ov + spec_in.post, dtype=dt(spec_in.dtype))
                sentinel(buf)
                inp = buf[spec_in.pre:spec_in.pre + n].view(spec_in.shape)
                inp.copy_(data)
                out = buf[spec_in.pre + ov:spec_in.pre + ov + spec_out.numel].view(spec_out.shape)
                b = Buffer("input+output (overlapping)", buf, [inp, out], "inout")
                ctx.buffers.append(b)
            else:
                inp = ctx.one("input", me["in"], data, "in")
                out = ctx.one("output", me["out"], None, "out")

            def splits(a, key, rows_key):
                if key in a:
                    return a[key]
                rows = a[rows_key].shape[0]
                return [rows // ws] * ws

            def exp():
                if rank in bad:
                    raise Unattainable
                blocks = []
                for s in range(ws):
                    a = A[s]
                    if s in bad:
                        raise Unattainable
                    isp = splits(a, "isplit", "in")
                    cols_s = a["in"].shape[1]
                    start = sum(isp[:rank])
                    src_rows = isp[rank]
                    want_rows = splits(me, "osplit", "out")[s]
                    if src_rows * cols_s != want_rows * me["out"].shape[1] or a["in"].dtype != me["out"].dtype:
                        raise Unattainable
                    blocks.append(ctx.data(s, "in", a["in"]).reshape(a["in"].shape)[start:start + src_rows].reshape(-1))
                return torch.cat(blocks).reshape(me["out"].shape) if blocks else None

            kw = dict(output_split_sizes=me.get("osplit"), input_split_sizes=me.get("isplit"),
                      group=group)
            run(lambda: dist.all_to_all_single(out, inp, **kw),
                lambda: dist.all_to_all_single(out, inp, async_op=True, **kw))
            checks = [("output", out, exp)]
            if ov and ov != "same":
                pre_part = inp.view(-1)[:ov]
                checks.append(("input's first elements (not in the output)", pre_part,
                               lambda: data.reshape(-1)[:ov]))
            return checks

        if op in ("send/recv", "isend/irecv"):
            role = me["role"]
            if role == "self":
                s, r = me["send"], me["recv"]
                st = ctx.one("send tensor", s["t"], ctx.data(rank, "t", s["t"]), "in")
                rt = ctx.one("recv tensor", r["t"], None, "out")
                ws_ = dist.isend(st, group_dst=rank, group=group, tag=s["tag"])
                wr = dist.irecv(rt, group_src=rank, group=group, tag=r["tag"])
                self.wait(ws_, timeout)
                self.wait(wr, timeout)
                return [("recv tensor", rt, lambda: ctx.data(rank, "t", s["t"]).reshape(r["t"].shape))]
            if role == "send":
                t = ctx.one("send tensor", me["t"], ctx.data(rank, "t", me["t"]), "in")
                kw = dict(group_dst=me["peer"], group=group, tag=me["tag"])
                run(lambda: dist.send(t, **kw), lambda: dist.isend(t, **kw))
                return []
            t = ctx.one("recv tensor", me["t"], None, "out")
            src = me["peer"]
            sender = next((r for r in range(ws) if A[r].get("role") == "send"), None)

            def exp():
                if rank in bad or sender is None or sender in bad:
                    raise Unattainable
                s = A[sender]
                if s["tag"] != me["tag"] or s["peer"] != rank:
                    raise Unattainable
                sent = ctx.data(sender, "t", s["t"])
                nbytes = sent.numel() * sent.element_size()
                mine = torch.empty(me["t"].shape, dtype=dt(me["t"].dtype))
                if nbytes != mine.numel() * mine.element_size():
                    raise Unattainable
                return sent.contiguous().view(-1).view(torch.uint8).view(mine.dtype).reshape(mine.shape)

            got = {}
            if me.get("any_source"):
                kw = dict(group=group, tag=me["tag"])
                got["src"] = dist.recv(t, **kw)  # blocking: it returns the sender
                if got["src"] != src:
                    return [("source rank", torch.tensor([got["src"]]), lambda: torch.tensor([src]))]
            else:
                kw = dict(group_src=src, group=group, tag=me["tag"])
                run(lambda: dist.recv(t, **kw), lambda: dist.irecv(t, **kw))
            return [("recv tensor", t, exp)]

        if op == "barrier":
            run(lambda: dist.barrier(group=group), lambda: dist.barrier(group=group, async_op=True))
            return []
        raise AssertionError(f"unknown op {op}")

    # ---- one case

    def run_case(self, case, group):
        """Runs ``case`` on this rank; returns (summary dict, problems list). A "sandwich"
        case runs between two async all_reduces that are waited for only after it."""
        torch, dist = _torch()
        if "sandwich" not in case.flags:
            return self.run_case_alone(case, group)
        ws = self.ws
        x1 = torch.full((5,), float(self.rank + 1))
        w1 = dist.all_reduce(x1, group=group, async_op=True)
        summary, problems = self.run_case_alone(case, group)
        x2 = torch.full((3,), float(2 * self.rank + 1))
        try:
            w2 = dist.all_reduce(x2, group=group, async_op=True)
            self.wait(w1, self.long_s)
            self.wait(w2, self.long_s)
            want1, want2 = float(ws * (ws + 1) // 2), float(ws * ws)
            if not (x1.eq(want1).all() and x2.eq(want2).all()):
                problems.append(f"the all_reduces in flight around the refused call gave "
                                f"{x1.tolist()} and {x2.tolist()}, expected {want1} and {want2}")
        except Exception as e:  # noqa: BLE001
            problems.append(f"an all_reduce in flight around the refused call failed: "
                            f"{type(e).__name__}: {str(e)[:400]}")
        return summary, problems

    def run_case_alone(self, case, group):
        torch, dist = _torch()
        me = case.args[self.rank]
        summary = {"status": "idle", "msg": "", "type": ""}
        problems = []
        if not me:
            return summary, problems
        timeout = self.short_s if case.one_sided else self.long_s
        relaxed = case.relaxed()
        ctx = CaseCtx(self, case, self.rank)
        checks = []
        err = None
        t0 = time.monotonic()
        try:
            checks = self.call(ctx, case, me, group, timeout)
            summary["status"] = "ok"
        except Exception as e:  # noqa: BLE001 - classified below
            err = e
            summary.update(status="raised", type=type(e).__name__, msg=str(e)[:2000])
        summary["seconds"] = round(time.monotonic() - t0, 3)
        i_am_bad = self.rank in case.bad
        if case.one_sided and summary["seconds"] > timeout + HANG_SLACK_S:
            problems.append(f"HANG: the call took {summary['seconds']:.1f}s with an op timeout "
                            f"of {timeout}s (it blocked past wait(timeout)); "
                            f"{summary['status']} {summary['msg'][:300]}")

        # Buffers: guards always; inputs never change; a rejected call writes nothing.
        for b in ctx.buffers:
            may_write = b.role != "in" and not (err is not None and i_am_bad)
            if b.role == "inout" and err is None:
                may_write = True
            problems += b.check(may_write)
        self.kept += ctx.buffers

        if err is not None:
            msg = str(err)
            names = {c.__name__ for c in type(err).__mro__}
            if i_am_bad:
                if not names & set(case.exc):
                    problems.append(f"wrong rank raised {type(err).__name__} (expected one of "
                                    f"{list(case.exc)}): {msg[:500]}")
                elif case.keywords and not any(k.lower() in msg.lower() for k in case.keywords):
                    problems.append(f"wrong rank's error does not say what is wrong (none of "
                                    f"{list(case.keywords)}): {type(err).__name__}: {msg[:500]}")
            elif case.kind == "valid":
                problems.append(f"valid call raised {type(err).__name__}: {msg[:1500]}")
            elif case.kind == "all_bad":
                problems.append(f"rank not wrong in an all_bad case raised: {msg[:500]}")
            else:
                if not names & {"ValueError", "RuntimeError"}:
                    problems.append(f"raised {type(err).__name__} (expected ValueError or "
                                    f"RuntimeError): {msg[:500]}")
        else:
            if i_am_bad:
                problems.append("the wrong rank's call did not raise")
            elif case.kind == "all_bad":
                pass
            for name, view, expf in checks:
                if relaxed:
                    break
                try:
                    want = expf()
                except Unattainable:
                    if view.numel() == 0:
                        continue  # nothing to receive: finishing at once is right
                    problems.append(f"{name}: the call finished, but no right result exists "
                                    f"for this rank ({case.kind}); it should have raised")
                    continue
                if want is None:
                    continue
                if not self.equal(view, want, me.get("op")):
                    got = view.reshape(-1)[:8].tolist()
                    exp = want.reshape(-1)[:8].tolist()
                    problems.append(f"WRONG RESULT in {name}: got {got}... expected {exp}...")
        return summary, problems

    @staticmethod
    def equal(view, want, op):
        torch, _ = _torch()
        if view.shape != want.shape or view.dtype != want.dtype:
            return False
        if op == "AVG" and view.is_floating_point():
            tol = 0.05 if view.dtype in (torch.bfloat16, torch.float16) else 1e-5
            return torch.allclose(view.double(), want.double(), rtol=tol, atol=tol)
        bd = bits_dtype(view)
        if bd is None or view.numel() == 0:
            return torch.equal(view, want)
        return torch.equal(view.contiguous().view(bd), want.contiguous().view(bd))

    # ---- the whole run

    def run(self, cases):
        torch, dist = _torch()
        store = dist.distributed_c10d._get_default_store()
        group = None  # None: the default group; its first collective is the first case's
        if self.warm:
            self.group_works(group)
        problems = []
        notes = []
        counts = {"cases": 0, "valid": 0, "bad": 0}
        for case in cases:
            if self.progress:
                with open(os.path.join(self.progress, f"rank{self.rank}"), "w") as f:
                    f.write(str(case.index))
            counts["cases"] += 1
            counts["valid" if case.kind == "valid" else "bad"] += 1
            try:
                summary, mine = self.run_case(case, group)
            except Exception:  # a bug of the fuzzer itself: report it as one
                summary, mine = {"status": "crashed"}, ["fuzzer error: " + traceback.format_exc()]
            key = f"fuzz/{case.index}"
            store.set(f"{key}/{self.rank}", json.dumps(summary))
            store.wait([f"{key}/{r}" for r in range(self.ws)],
                       datetime.timedelta(seconds=self.long_s + 60))
            every = [json.loads(store.get(f"{key}/{r}")) for r in range(self.ws)]
            # Case-level, for ranks that disagree: no silent success of every rank (a
            # finished rank's result is checked above). That some rank says what is wrong is
            # not promised (ranks that took different algorithms time out): a note only.
            if case.kind == "mismatch" and self.rank == 0 and case.op not in P2P_OPS:
                relaxed = case.relaxed()
                if all(s["status"] in ("ok", "idle") for s in every) and not relaxed:
                    mine.append("every rank finished a mismatched collective without an error")
                clear = [r for r, s in enumerate(every) if s["status"] == "raised" and
                         not is_timeout(s["msg"]) and
                         any(k.lower() in s["msg"].lower() for k in case.keywords)]
                if not clear and not mine and not relaxed:
                    notes.append({"case": case.index, "note": "no rank said what is wrong: " +
                                  "; ".join(f"r{r}: {s['status']} {s.get('msg', '')[:160]}"
                                            for r, s in enumerate(every))})
            if mine:
                problems.append({"case": case.index, "rank": self.rank, "problems": mine,
                                 "every": every})
                self.log(f"case {case.index}: " + " | ".join(m[:300] for m in mine))
            flags = [json.dumps(bool(mine))]
            store.set(f"{key}/bad/{self.rank}", flags[0])
            store.wait([f"{key}/bad/{r}" for r in range(self.ws)],
                       datetime.timedelta(seconds=self.long_s + 60))
            any_problem = any(json.loads(store.get(f"{key}/bad/{r}")) for r in range(self.ws))
            p2p = case.op in ("send/recv", "isend/irecv")
            fresh = any_problem or (case.one_sided and not p2p)
            if not fresh and case.kind != "valid":
                # every rank rejected the call (or a point-to-point failure): the group works
                try:
                    self.group_works(group)
                except Exception as e:  # noqa: BLE001
                    problems.append({"case": case.index, "rank": self.rank,
                                     "problems": [f"the group no longer works after the case: "
                                                  f"{type(e).__name__}: {str(e)[:500]}"],
                                     "every": every})
                    fresh = True
                ok = json.dumps(not fresh)
                store.set(f"{key}/works/{self.rank}", ok)
                store.wait([f"{key}/works/{r}" for r in range(self.ws)],
                           datetime.timedelta(seconds=self.long_s + 60))
                fresh = not all(json.loads(store.get(f"{key}/works/{r}")) for r in range(self.ws))
            if fresh:
                old = group
                group = self.new_group()
                if old is not None:
                    try:
                        dist.destroy_process_group(old)
                    except Exception:  # noqa: BLE001
                        pass
        # Late writes: every guard once more, after everyone is done.
        time.sleep(0.2)
        store.set(f"fuzz/end/{self.rank}", "1")
        store.wait([f"fuzz/end/{r}" for r in range(self.ws)], datetime.timedelta(seconds=120))
        for b in self.kept:
            for p in b.check(True):
                problems.append({"case": -1, "rank": self.rank, "problems": ["at the end: " + p],
                                 "every": []})
        # Rank 0 holds the store: it leaves only after every rank is past its last wait.
        store.set(f"fuzz/left/{self.rank}", "1")
        if self.rank == 0:
            store.wait([f"fuzz/left/{r}" for r in range(self.ws)], datetime.timedelta(seconds=120))
        counts["groups"] = self.groups
        return {"problems": problems, "counts": counts, "notes": notes}


def rank_main(rank, world, seed, count, only=None, short_s=2.0, long_s=30.0, progress=None,
              label="", cases=None, skip=(), warm=False):
    """Entry point inside a rank (run_ranks); ``cases``: run these instead of the seed's;
    ``skip``: leave out the cases whose description contains one of these strings (a known
    finding, while it is being fixed)."""
    cases = make_cases(seed, world, count) if cases is None else cases
    cases = [c for c in cases if not any(k in c.describe() for k in skip)]
    if only is not None:
        cases = [c for c in cases if c.index in only]
    return Runner(rank, world, seed, short_s, long_s, progress, label, warm).run(cases)


def report(seed, world, count, results, replay, cases=None):
    """A failure message naming the seed, every failing case, its description, and how to
    replay it; "" when every rank is clean."""
    cases = {c.index: c for c in (make_cases(seed, world, count) if cases is None else cases)}
    by_case = {}
    for res in results:
        for p in res["problems"]:
            by_case.setdefault(p["case"], []).append(p)
    if not by_case:
        return ""
    lines = [f"bad-input fuzzer: {len(by_case)} failing case(s), seed {seed}, world {world}, "
             f"{count} cases"]
    for idx in sorted(by_case):
        lines.append("")
        if idx >= 0:
            lines.append(cases[idx].describe())
            lines.append(f"  replay this case: {replay(idx)}")
        for p in by_case[idx]:
            for m in p["problems"]:
                lines.append(f"  rank {p['rank']}: {m}")
        every = by_case[idx][0].get("every")
        if every:
            lines.append("  outcome per rank: " + "; ".join(
                f"r{r}: {s['status']}{(' ' + s.get('type', '') + ': ' + s.get('msg', '')[:160]) if s['status'] == 'raised' else ''}"
                for r, s in enumerate(every)))
    lines.append("")
    lines.append(f"replay the whole run: {replay(None)}")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------------
# Long runs: python3 tests/python/bad_inputs.py --minutes 10
# --------------------------------------------------------------------------------------------


def main(argv=None):
    import argparse

    here = os.path.dirname(os.path.abspath(__file__))
    sys.path.insert(0, here)
    from harness import run_ranks  # noqa: PLC0415

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--cases", type=int, default=40, help="cases per world")
    ap.add_argument("--worlds", default="2,3,4")
    ap.add_argument("--paths", default="shm,ucx", help="shm (COMMUX_SHM=1) and/or ucx (=0)")
    ap.add_argument("--seed", type=int, default=None, help="first seed (default: from time)")
    ap.add_argument("--short", type=float, default=2.0, help="per-op timeout of one-sided cases")
    ap.add_argument("--warm", action="store_true", help="warm up every group before its first "
                    "case (leaves out the first-collective set-up, e.g. while a finding there is "
                    "being fixed)")
    ap.add_argument("--skip", default="", help="comma-separated: leave out cases whose "
                    "description contains one of these (e.g. a known finding: 'an expanded output')")
    args = ap.parse_args(argv)
    worlds = [int(w) for w in args.worlds.split(",")]
    skip = tuple(k for k in args.skip.split(",") if k)
    paths = args.paths.split(",")
    seed = args.seed if args.seed is not None else int(time.time()) % 10**6 * 100
    deadline = time.monotonic() + args.minutes * 60
    tried = {"cases": 0, "valid": 0, "bad": 0, "runs": 0}
    failures = []
    notes = []
    while time.monotonic() < deadline:
        for path in paths:
            for w in worlds:
                if time.monotonic() >= deadline:
                    break
                env = {"COMMUX_SHM": "1" if path == "shm" else "0"}
                label = f"{path}-w{w}"
                replay = lambda idx, s=seed, l=label: (  # noqa: E731
                    f"COMMUX_FUZZ_SEED={s} COMMUX_FUZZ_CASES={args.cases}"
                    + (f" COMMUX_FUZZ_ONLY={idx}" if idx is not None else "")
                    + (f" COMMUX_FUZZ_SKIP='{args.skip}'" if skip else "")
                    + (" COMMUX_FUZZ_WARM=1" if args.warm else "")
                    + f" python3 -m pytest tests/python/test_bad_inputs.py -k '{label}'")
                t0 = time.monotonic()
                try:
                    results = run_ranks(rank_main, w, timeout=90 + 8 * args.cases, env=env,
                                        pg_timeout=datetime.timedelta(seconds=60),
                                        seed=seed, count=args.cases, short_s=args.short,
                                        label=label, skip=skip, warm=args.warm)
                    msg = report(seed, w, args.cases, results, replay)
                    c = results[0]["counts"]
                    for n in results[0]["notes"]:
                        notes.append(f"seed {seed} {label} case {n['case']}: {n['note']}")
                        print(f"  note: case {n['case']}: {n['note'][:300]}", flush=True)
                except BaseException as e:  # noqa: BLE001 - harness failure (hang, crash)
                    if isinstance(e, KeyboardInterrupt):
                        raise
                    msg = f"run failed (crash or hang): {str(e)[:3000]}\nreplay: {replay(None)}"
                    c = {"cases": 0, "valid": 0, "bad": 0}
                tried["runs"] += 1
                for k in ("cases", "valid", "bad"):
                    tried[k] += c[k]
                status = "FAIL" if msg else "ok"
                print(f"seed {seed} {label}: {c['cases']} cases ({c['bad']} bad) "
                      f"{time.monotonic() - t0:.1f}s {status}", flush=True)
                if msg:
                    failures.append(msg)
                    print(msg, flush=True)
        seed += 1
    print(f"bad inputs tried: {tried['cases']} cases ({tried['bad']} bad, {tried['valid']} "
          f"valid) in {tried['runs']} runs, seeds up to {seed - 1}; failing runs: "
          f"{len(failures)}; mismatches no rank named (every rank timed out or finished): "
          f"{len(notes)}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
