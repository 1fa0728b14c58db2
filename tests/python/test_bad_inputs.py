"""Bad-input fuzzer at the Python boundary (issue 37, item 2): every collective and
point-to-point call of torch.distributed on CPU tensors, with seeded argument sets, valid ones
mixed with wrong ones (numel, split sizes, negative and 2**62 splits, int64 sums that wrap,
dtypes between input and output and between ranks, non-contiguous and overlapping tensors,
zero sizes, roots and tags out of range, and calls where only some ranks are wrong).

Every tensor is a view into a buffer with sentinel guards around (and, for strided views,
between) its elements: commux must never write outside the caller's tensors, must leave
inputs alone, must give the right result to a valid call and a clear ValueError/RuntimeError
to the rank that is wrong, must not hang a rank past a short per-op timeout when only some
ranks are wrong, and must leave the group working when every rank made the same mistake.
What each case expects is in bad_inputs.py.

Seeds: COMMUX_FUZZ_SEED (default: a fixed seed per parametrization), COMMUX_FUZZ_CASES (cases
per world, default 30), COMMUX_FUZZ_ONLY (comma-separated case indices: replay just those),
COMMUX_FUZZ_SHORT_S (the per-op timeout of one-sided cases, default 2), COMMUX_FUZZ_SKIP
(comma-separated strings: leave out cases whose description contains one, e.g. a known
finding while it is being fixed), COMMUX_FUZZ_WARM=1 (warm every group up before its first
case; by default the default group and every other fresh group meet their first collective
in a case). A failure names the
seed, each failing case with its exact arguments, and the command that replays it. Longer
runs across seeds: scripts/fuzz_bad_inputs.sh.
"""

import datetime
import os
import shutil
import time
import tempfile

import pytest

import bad_inputs
from harness import is_ucx, run_ranks

CASES = int(os.environ.get("COMMUX_FUZZ_CASES", "30"))
SHORT_S = float(os.environ.get("COMMUX_FUZZ_SHORT_S", "2"))
ONLY = os.environ.get("COMMUX_FUZZ_ONLY")
SKIP = tuple(k for k in os.environ.get("COMMUX_FUZZ_SKIP", "").split(",") if k)
WARM = os.environ.get("COMMUX_FUZZ_WARM", "0") == "1"
# The default group's timeout, and so its store's: bounds whatever waits in the store.
PG_TIMEOUT_S = 60

PARAMS = [pytest.param(path, world, id=f"{path}-w{world}")
          for path in ("shm", "ucx") for world in (2, 3, 4)]


def _seed(path, world):
    env = os.environ.get("COMMUX_FUZZ_SEED")
    if env:
        return int(env)
    return 37_000 + 10 * world + (0 if path == "shm" else 5)


@pytest.mark.skipif(not is_ucx(), reason="commux's promises (docs/semantics.md): not another backend's")
@pytest.mark.timeout(420)
@pytest.mark.parametrize("path, world", PARAMS)
def test_bad_inputs(path, world):
    seed = _seed(path, world)
    label = f"{path}-w{world}"
    only = sorted({int(x) for x in ONLY.split(",")}) if ONLY else None
    print(f"bad-input fuzzer: seed {seed}, {CASES} cases, world {world}, "
          f"COMMUX_SHM={'1' if path == 'shm' else '0'}" + (f", only cases {only}" if only else ""))

    def replay(idx):
        cases = f" COMMUX_FUZZ_ONLY={idx}" if idx is not None else ""
        skip = f" COMMUX_FUZZ_SKIP='{','.join(SKIP)}'" if SKIP else ""
        skip += " COMMUX_FUZZ_WARM=1" if WARM else ""
        return (f"COMMUX_FUZZ_SEED={seed} COMMUX_FUZZ_CASES={CASES}{cases}{skip} python3 -m pytest "
                f"tests/python/test_bad_inputs.py -k '{label}'")

    progress = tempfile.mkdtemp(prefix="commux_fuzz_")
    descriptions = {c.index: c.describe() for c in bad_inputs.make_cases(seed, world, CASES)}
    try:
        try:
            results = run_ranks(bad_inputs.rank_main, world, timeout=90 + 8 * CASES,
                                env={"COMMUX_SHM": "1" if path == "shm" else "0"},
                                pg_timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
                                seed=seed, count=CASES, only=only, short_s=SHORT_S,
                                progress=progress, label=label, skip=SKIP, warm=WARM)
        except BaseException as e:  # the harness failed: a crash, a hang, a rank that died
            where = []
            for r in range(world):
                try:
                    with open(os.path.join(progress, f"rank{r}")) as f:
                        idx = int(f.read().strip())
                    where.append(f"rank {r} was in {descriptions[idx]}\n  replay: {replay(idx)}")
                except (OSError, ValueError):
                    where.append(f"rank {r}: no case started")
            pytest.fail(f"bad-input fuzzer, seed {seed}, world {world}, {label}: the run "
                        f"failed (crash/hang/error) in:\n" + "\n".join(where) +
                        f"\nreplay the run: {replay(None)}\n\n{str(e)[:20000]}", pytrace=False)
    finally:
        shutil.rmtree(progress, ignore_errors=True)
    counts = results[0]["counts"]
    print(f"bad-input fuzzer: {counts['cases']} cases ({counts['bad']} bad, {counts['valid']} "
          f"valid), {counts['groups']} fresh groups")
    for n in results[0]["notes"]:
        print(f"note, case {n['case']}: {n['note']}")
    msg = bad_inputs.report(seed, world, CASES, results, replay)
    if msg:
        pytest.fail(msg, pytrace=False)


# --------------------------------------------------------------------------------------------
# Pinned cases: what the fuzzer found, spelled out, so that they run whatever the generator
# draws. They go through the fuzzer's own runner and checks.


def _pinned_cases():
    T, Case = bad_inputs.T, bad_inputs.Case
    f32 = "float32"
    kw_a2a = bad_inputs.KW_SIZE + bad_inputs.KW_SPLIT + ("itself",)
    kw_x = bad_inputs.KW_EXPANDED
    cases = [
        # The all_to_all_single self block the brief named (fixed in 27a1b52): rank 0 sends
        # 8 rows to itself and expects 2; on shared memory it wrote past the output.
        Case(0, "all_to_all_single", "some_bad", "self block 8 rows sent, 2 expected",
             [{"in": T((10, 1), f32, "c", 2, 3), "out": T((4, 1), f32, "c", 3, 8),
               "isplit": [8, 2], "osplit": [2, 2]},
              {"in": T((4, 1), f32, "c", 1, 1), "out": T((4, 1), f32, "c", 1, 1),
               "isplit": [2, 2], "osplit": [2, 2]}],
             (0,), kw_a2a),
        # Same, every rank wrong (each expects one row less from itself than it sends).
        Case(1, "all_to_all_single", "all_bad", "self blocks differ on every rank",
             [{"in": T((5, 2), f32, "c", 1, 2), "out": T((4, 2), f32, "c", 2, 1),
               "isplit": [3, 2], "osplit": [2, 2]},
              {"in": T((5, 2), f32, "c", 1, 2), "out": T((4, 2), f32, "c", 2, 1),
               "isplit": [2, 3], "osplit": [2, 2]}],
             (0, 1), kw_a2a),
        # Found by the fuzzer (seed 37020 shm-w2 case 5; seeds 200, 201 at 2 and 3 ranks;
        # fixed in e8882db): an expanded (stride-0) output was not refused before the
        # collective ran; it failed in the copy-out, after the data moved, and the group then
        # refused every later collective.
        Case(2, "all_gather_into_tensor", "all_bad", "an expanded output (stride 0)",
             [{"in": T((3,), f32, "c", 1, 1), "out": T((6,), f32, "x", 2, 2)},
              {"in": T((3,), f32, "c", 1, 1), "out": T((6,), f32, "x", 2, 2)}],
             (0, 1), kw_x),
        Case(3, "all_reduce", "all_bad", "an expanded tensor (stride 0)",
             [{"t": T((4,), f32, "x", 1, 1), "op": "SUM"},
              {"t": T((4,), f32, "x", 1, 1), "op": "SUM"}],
             (0, 1), kw_x),
        Case(4, "all_to_all_single", "all_bad", "an expanded output (stride 0)",
             [{"in": T((4, 3), f32, "c", 1, 1), "out": T((4, 3), f32, "x", 1, 1)},
              {"in": T((4, 3), f32, "c", 1, 1), "out": T((4, 3), f32, "x", 1, 1)}],
             (0, 1), kw_x),
        # A receive into an expanded tensor (only the receiver is wrong).
        Case(5, "isend/irecv", "some_bad", "receive into an expanded tensor (stride 0)",
             [{"role": "send", "peer": 1, "tag": 5 << 10 | 5, "t": T((4,), f32, "c", 1, 1)},
              {"role": "recv", "peer": 0, "tag": 5 << 10 | 5, "t": T((4,), f32, "x", 1, 1)}],
             (1,), kw_x),
    ]
    return cases


@pytest.mark.skipif(not is_ucx(), reason="commux's promises (docs/semantics.md): not another backend's")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("path", ["shm", "ucx"])
def test_pinned_cases(path):
    """The pinned cases above at 2 ranks, through the fuzzer's runner and checks."""
    cases = _pinned_cases()

    def replay(idx):
        return (f"python3 -m pytest tests/python/test_bad_inputs.py -k 'test_pinned_cases and "
                f"{path}'" + (f"  (pinned case {idx})" if idx is not None else ""))

    results = run_ranks(bad_inputs.rank_main, 2, timeout=150,
                        env={"COMMUX_SHM": "1" if path == "shm" else "0"},
                        pg_timeout=datetime.timedelta(seconds=PG_TIMEOUT_S),
                        seed=0, count=len(cases), short_s=SHORT_S, cases=cases,
                        label=f"pinned-{path}")
    msg = bad_inputs.report(0, 2, len(cases), results, replay, cases=cases)
    if msg:
        pytest.fail(msg, pytrace=False)


# --------------------------------------------------------------------------------------------


def _first_collective_one_rank_wrong(rank, world_size, short_s, refused_by):
    import torch
    import torch.distributed as dist

    from harness import side_barrier

    g = dist.new_group(ranks=list(range(world_size)))
    start = time.monotonic()
    outcome = "finished"
    try:
        # rank 0's mistake: a float64 input for float32 outputs, refused by commux itself
        # (all_gather_into_tensor) or before commux sees it, by torch.distributed's Python
        # checks (all_gather: "Invalid usage of tensors with different dtypes")
        d = torch.float64 if rank == 0 else torch.float32
        if refused_by == "commux":
            w = dist.all_gather_into_tensor(torch.zeros(2 * world_size), torch.ones(2, dtype=d),
                                            group=g, async_op=True)
        else:
            w = dist.all_gather([torch.zeros(2) for _ in range(world_size)],
                                torch.ones(2, dtype=d), group=g, async_op=True)
        w.wait(timeout=datetime.timedelta(seconds=short_s))
    except (RuntimeError, ValueError) as e:
        outcome = f"{type(e).__name__}: {str(e)[:300]}"
    took = time.monotonic() - start
    side_barrier("first-collective-done", timeout_s=120)
    return took, outcome


@pytest.mark.skipif(not is_ucx(), reason="commux's promises (docs/semantics.md): not another backend's")
@pytest.mark.timeout(180)
@pytest.mark.parametrize("path, refused_by", [
    ("shm", "commux"), ("ucx", "commux"), ("ucx", "torch"), ("shm", "torch")])
def test_first_collective_of_a_group_with_one_rank_wrong(path, refused_by):
    """Found by the fuzzer (seed 37030, shm-w3, case 23; fixed in 9152049): on shared
    memory, the FIRST collective of a group sets up the segment through the store. When one
    rank refused its call there (here a dtype mismatch), the other ranks' call with
    async_op=True returned no Work: it blocked in the store until the store's timeout (the
    default group's timeout, 30 minutes by default; 20 s here), so wait(timeout=2 s) never
    ran. The others must raise or finish within the op's timeout.

    refused_by="torch": the same when torch.distributed's own Python checks refuse rank 0's
    call before commux sees it (found by the fuzzer, seed 404 shm-w2 case 12: all_to_all
    with int64 inputs and int32 outputs on one rank); 9152049 covered only what commux
    refuses: rank 1 blocked in the set-up until the store's timeout. Fixed by setting the
    group up on a thread of its own from its construction on (issue 37 item 6)."""
    short_s = 2.0
    res = run_ranks(_first_collective_one_rank_wrong, 2, timeout=150,
                    env={"COMMUX_SHM": "1" if path == "shm" else "0"},
                    pg_timeout=datetime.timedelta(seconds=20), short_s=short_s,
                    refused_by=refused_by)
    took, outcome = res[1]
    assert "dtype" in res[0][1], f"rank 0 should have raised a dtype error: {res[0]}"
    assert took < short_s + 5, (
        f"rank 1 (valid call) took {took:.1f}s to come back from the first collective of a "
        f"group whose rank 0's call was refused by {refused_by} (op timeout {short_s}s): "
        f"{outcome}")


def test_guard_checker_sees_every_stray_write():
    """The fuzzer's own check (no process group): a write just before or after a view, into
    the gap of a strided view, or into an input is reported; writes inside an output are not."""
    import types

    import torch

    runner = types.SimpleNamespace(seed=1)
    case = types.SimpleNamespace(index=0)
    for layout in ("c", "g", "t"):
        for where in ("before", "after", "gap", "inside", "input"):
            if where == "gap" and layout != "g":
                continue
            ctx = bad_inputs.CaseCtx(runner, case, 0)
            spec = bad_inputs.T((3, 4), "float32", layout, 2, 3)
            role = "in" if where == "input" else "out"
            v = ctx.one("t", spec, ctx.data(0, "t", spec), role)
            b = ctx.buffers[0]
            first = v.storage_offset()
            if where == "before":
                b.buf[first - 1] = 1.0
            elif where == "after":
                b.buf[-1] = 1.0
            elif where == "gap":
                b.buf[first + 1] = 1.0
            else:
                v[1, 1] += 1.0
            problems = b.check(may_write_views=role != "in")
            should = where != "inside"
            assert bool(problems) == should, (layout, where, problems)
            if where in ("before", "after", "gap"):
                assert "GUARD OVERWRITTEN" in problems[0], problems
    # bfloat16 and complex buffers compare bit patterns
    for dtype in ("bfloat16", "complex64"):
        ctx = bad_inputs.CaseCtx(runner, case, 0)
        spec = bad_inputs.T((5,), dtype, "c", 1, 1)
        ctx.one("t", spec, torch.zeros(5).to(getattr(torch, dtype)), "out")
        ctx.buffers[0].buf[0] = 0
        assert ctx.buffers[0].check(True), dtype
