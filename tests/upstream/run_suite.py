#!/usr/bin/env python3
"""Run PyTorch's own distributed test suite (``_DistTestBase``) against ucx and gloo.

PyTorch ships ``torch/testing/_internal/distributed/distributed_test.py``;
its ``test/distributed/test_distributed_spawn.py`` runs ``_DistTestBase`` for
one backend chosen by ``BACKEND``.  This driver does the same for a list of
backends (modes, see ``suite_child.py``), each test in its own interpreter
(its own process group/session) with a hard timeout: when it expires the whole
process group, spawned rank processes included, is SIGKILLed and the test is
recorded as TIMEOUT.

Modes: ``gloo``, ``ucx`` (PyTorch's gating unchanged), ``ucx+features``
(ucx added to ``DistTestCases.backend_feature`` sets), ``ucx+gloo-gates``
(skip decorators evaluated as for gloo, tests run on ucx), ``ucx+mpi-gates``
(the same as for mpi: upstream's CPU all_to_all tests).

Examples::

    python3 tests/upstream/run_suite.py                      # ucx and gloo, world size 2
    python3 tests/upstream/run_suite.py -k all_reduce -k barrier --backends ucx
    python3 tests/upstream/run_suite.py --backends gloo ucx ucx+gloo-gates --jobs 2 \\
        --out tests/upstream/results-ws2.json --report docs/upstream-suite.md

Statuses: PASS, FAIL (the test or a rank raised), SKIP (with reason),
TIMEOUT (hard timeout, or the upstream join timeout that the driver sets to
``timeout - 30`` s), ERROR (the harness itself failed: no result written).
Tests that a skip decorator disables in the parent are recorded as SKIP
without starting any process (``static: true``).

Results are written (atomically, after every test) to ``--out`` as JSON:
``{"meta": {...}, "static_skips": {mode: {test: reason}}, "results":
{test: {mode: record}}}``.  ``--resume`` keeps the records already in
``--out`` and runs only the missing ones.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import datetime
import json
import os
import platform
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
CHILD = os.path.join(HERE, "suite_child.py")
MODES = ("gloo", "ucx", "ucx+features", "ucx+gloo-gates", "ucx+mpi-gates")
# A test that one of these modes runs runs identically in the later ucx modes
# (at run time every ucx mode uses BACKEND=ucx; only the parent's skip
# decorators differ), so by default it runs once and the record is copied.
DEDUP_SOURCES = ("ucx", "ucx+gloo-gates")
DEFAULT_BACKENDS = ("ucx", "gloo")
DEFAULT_TIMEOUT_S = 120
# Seconds between the upstream join timeout (which collects the ranks' Python
# stacks and reports "timed out") and the driver's hard kill.
UPSTREAM_TIMEOUT_MARGIN_S = 30
# Tests for which PyTorch itself allows much more time (common_distributed's
# TIMEOUT_OVERRIDE); the hard timeout is raised to at least this.
LONG_TESTS = {"test_ddp_uneven_inputs": 420, "test_DistributedDataParallel": 520}
TAIL_LINES = 40
# Log noise from the profiler/CUDA probing in every process.
_NOISE = re.compile(
    r"^(USDT:|ERROR:\S+ \S+ \d+:\d+ DeviceProperties\.cpp|W\d{4} .*cpp_extension\.py:\d+\] No CUDA runtime"
    r"|I\d{4} .*common_distributed\.py:\d+\] Started process)"
)
_SUBPROC_SKIP = re.compile(r"skipping test (\S+) for following reason: (.*)")
_UPSTREAM_TIMEOUT = re.compile(r"terminated or timed out after|Timing out after \d+ seconds")
_EXC_LINE = re.compile(r"^([A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Warning)|[\w.]+Error)\b(:.*)?$")


def _torch_info() -> dict:
    code = (
        "import json, torch, platform\n"
        "info = {'torch': torch.__version__}\n"
        "try:\n"
        "    import commux\n"
        "    info['commux'] = getattr(commux, '__version__', 'unknown')\n"
        "except Exception as e:\n"
        "    info['commux'] = f'not importable: {e}'\n"
        "print(json.dumps(info))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except Exception:
        return {"torch": "unknown", "commux": "unknown", "error": out.stderr[-2000:]}


def _base_env(mode: str, world_size: int, temp_dir: str, init_method: str, timeout: int) -> dict:
    env = dict(os.environ)
    env.update(
        COMMUX_SUITE_MODE=mode,
        WORLD_SIZE=str(world_size),
        TEMP_DIR=temp_dir,
        DISTRIBUTED_TESTS_DEFAULT_TIMEOUT=str(max(10, timeout - UPSTREAM_TIMEOUT_MARGIN_S)),
        PYTHONUNBUFFERED="1",
        PYTHONFAULTHANDLER="1",
    )
    env.pop("BACKEND", None)  # suite_child.py sets it per mode
    if init_method == "file":
        env["INIT_METHOD"] = "file://" + os.path.join(temp_dir, "init_dir", "shared_init_file")
    else:
        env["INIT_METHOD"] = "env://"
    return env


def commux_build_stamp() -> str | None:
    """mtime of the installed commux extension (commux is reinstalled while
    the suite runs; this tells which build a ucx record ran against)."""
    import glob
    import importlib.util

    try:
        spec = importlib.util.find_spec("commux")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    files = []
    for loc in spec.submodule_search_locations:
        files += glob.glob(os.path.join(loc, "*.so")) + glob.glob(os.path.join(loc, "**", "*.so"), recursive=True)
    if not files:
        return None
    mtime = max(os.path.getmtime(f) for f in files)
    return datetime.datetime.fromtimestamp(mtime).astimezone().isoformat(timespec="seconds")


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _clean_tail(text: str, n: int = TAIL_LINES) -> list[str]:
    lines = [ln for ln in text.splitlines() if ln.strip() and not _NOISE.match(ln)]
    return [ln[:500] for ln in lines[-n:]]


def error_summary(detail: str, log: str = "") -> str:
    """The first relevant error line of a failure: the exception line of the
    first failing rank's traceback (plus up to two continuation lines)."""
    text = detail or ""
    blocks = re.split(r"Process \d+ exited with error code \d+ and exception:", text)
    if len(blocks) > 1:
        text = blocks[1]
    lines = text.splitlines()
    best = None
    for i, ln in enumerate(lines):
        if ln.startswith((" ", "\t")) or not ln.strip():
            continue
        if _EXC_LINE.match(ln.strip()):
            best = i  # the last exception line of the block is the one raised
    if best is None:
        for ln in (log or "").splitlines():
            if _EXC_LINE.match(ln.strip()):
                return ln.strip()[:400]
        nonempty = [ln for ln in lines if ln.strip()]
        return (nonempty[-1].strip() if nonempty else "")[:400]
    out = [lines[best].strip()]
    for ln in lines[best + 1 : best + 4]:
        if not ln.strip() or ln.startswith("Exception raised from") or ln.startswith("frame #"):
            break
        out.append(ln.strip())
        if len(out) >= 3:
            break
    return " | ".join(out)[:400]


def list_tests(mode: str, world_size: int, init_method: str) -> dict[str, str | None]:
    """{test name: static skip reason or None} for one mode (one interpreter)."""
    with tempfile.TemporaryDirectory(prefix="commux-upstream-list-") as tmp:
        env = _base_env(mode, world_size, tmp, init_method, DEFAULT_TIMEOUT_S)
        out = os.path.join(tmp, "list.json")
        proc = subprocess.run(
            [sys.executable, CHILD, "list", out], env=env, capture_output=True, text=True, timeout=300
        )
        if proc.returncode != 0 or not os.path.exists(out):
            raise RuntimeError(f"listing tests for mode {mode} failed:\n{proc.stderr[-4000:]}")
        with open(out) as f:
            data = json.load(f)
    return {t["name"]: t["static_skip"] for t in data["tests"]}


def run_test(
    name: str,
    mode: str,
    world_size: int = 2,
    timeout: int = DEFAULT_TIMEOUT_S,
    init_method: str = "file",
    log_dir: str | None = None,
    start_method: str = "spawn",
) -> dict:
    """Run one upstream test in its own session; return its record."""
    timeout = max(timeout, LONG_TESTS.get(name, 0))
    tmp = tempfile.mkdtemp(prefix="commux-upstream-")
    env = _base_env(mode, world_size, tmp, init_method, timeout)
    env["COMMUX_SUITE_START"] = start_method
    out = os.path.join(tmp, "result.json")
    log_path = os.path.join(tmp, "log.txt")
    build = commux_build_stamp() if mode != "gloo" else None
    start = time.monotonic()
    timed_out = False
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, CHILD, "run", name, out],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            cwd=tmp,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            rc = proc.wait()
        # Rank processes left behind (they share the session's process group).
        _kill_group(proc.pid)
    duration = round(time.monotonic() - start, 1)
    with open(log_path, errors="replace") as f:
        log_text = f.read()
    if log_dir:
        os.makedirs(log_dir, exist_ok=True)
        with open(os.path.join(log_dir, f"{name}.{mode}.log"), "w") as f:
            f.write(log_text)
    rec: dict = {"duration": duration, "rc": rc}
    if mode != "gloo":
        rec["commux_build"] = build
    result = None
    if os.path.exists(out):
        try:
            with open(out) as f:
                result = json.load(f)
        except ValueError:
            result = None
    if timed_out:
        rec.update(status="TIMEOUT", reason=f"hard timeout after {timeout} s (process group killed)")
    elif result is None:
        rec.update(status="ERROR", reason=f"child exited with status {rc} without writing a result")
    else:
        status, detail = result["status"], result.get("detail", "")
        if status == "SKIP":
            m = _SUBPROC_SKIP.search(log_text)
            if m and "subprocess level" in detail:
                detail = f"{detail.rstrip('.')} ({m.group(2).strip()})"
            rec.update(status="SKIP", reason=detail.strip())
        elif status == "FAIL" and _UPSTREAM_TIMEOUT.search(detail) and "exited with error code" not in detail:
            rec.update(status="TIMEOUT", reason="upstream join timeout: " + error_summary(detail, log_text))
            rec["detail"] = detail[-4000:]
        elif status in ("FAIL", "ERROR"):
            rec.update(status=status, reason=error_summary(detail, log_text))
            rec["detail"] = detail[-6000:]
        else:
            rec.update(status=status, reason=detail.strip())
    if rec["status"] not in ("PASS", "SKIP"):
        rec["tail"] = _clean_tail(log_text)
    _rmtree(tmp)
    return rec


def _rmtree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def with_history(rec: dict, old: dict) -> dict:
    """``rec`` with ``old`` (an earlier run of the same test and mode) appended
    to its ``previous`` list; a changed outcome is flagged ``rebuilt`` when
    the commux build differs between the two runs, else ``flaky``."""
    keys = ("status", "reason", "duration", "commux_build")
    rec["previous"] = old.get("previous", []) + [{k: old.get(k) for k in keys if k in old}]
    if rec["status"] != old["status"]:
        if rec.get("commux_build") != old.get("commux_build"):
            rec["rebuilt"] = True  # commux was reinstalled in between
        else:
            rec["flaky"] = True
    return rec


def _select(names: list[str], patterns: list[str], tests_file: str | None) -> list[str]:
    sel = list(names)
    if tests_file:
        with open(tests_file) as f:
            wanted = [ln.split("#")[0].strip() for ln in f]
        wanted = [w for w in wanted if w]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            raise SystemExit(f"unknown tests in {tests_file}: {unknown}")
        sel = [n for n in sel if n in set(wanted)]
    if patterns:
        sel = [n for n in sel if any(p in n for p in patterns)]
    return sel


class _Store:
    def __init__(self, path: str | None, data: dict):
        self.path = path
        self.data = data
        self.lock = threading.Lock()

    def put(self, name: str, mode: str, rec: dict) -> None:
        with self.lock:
            self.data["results"].setdefault(name, {})[mode] = rec
            self.flush()

    def flush(self) -> None:
        if not self.path:
            return
        self.data["meta"]["updated"] = _now()
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.data, f, indent=1, sort_keys=True)
        os.replace(tmp, self.path)


def _now() -> str:
    return datetime.datetime.now().astimezone().isoformat(timespec="seconds")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", nargs="+", default=list(DEFAULT_BACKENDS), choices=MODES, metavar="MODE",
                    help=f"modes to run, from {MODES} (default: {' '.join(DEFAULT_BACKENDS)})")
    ap.add_argument("--world-size", type=int, default=2, choices=(2, 3))
    ap.add_argument("-k", dest="patterns", action="append", default=[],
                    help="run only tests whose name contains this substring (repeatable: any)")
    ap.add_argument("--tests", help="file with test names, one per line (# comments)")
    ap.add_argument("--jobs", type=int, default=1, help="tests run at once (default 1)")
    ap.add_argument("--timeout", type=int, default=DEFAULT_TIMEOUT_S,
                    help=f"hard per-test timeout in seconds (default {DEFAULT_TIMEOUT_S})")
    ap.add_argument("--init-method", choices=("file", "env"), default="file",
                    help="INIT_METHOD the parent sees (ranks always get file:// from upstream setUp)")
    ap.add_argument("--out", help="results JSON (written after every test)")
    ap.add_argument("--resume", action="store_true", help="keep finished records already in --out")
    ap.add_argument("--redo", action="append", default=[], choices=MODES, metavar="MODE",
                    help="with --resume: run this mode's tests again (e.g. after commux was rebuilt); the "
                         "earlier record is kept under 'previous'; repeatable")
    ap.add_argument("--log-dir", help="keep every run test's full log here")
    ap.add_argument("--run-static-skips", action="store_true",
                    help="also start tests that a decorator skips in the parent (they only report SKIP)")
    ap.add_argument("--no-dedup", action="store_true",
                    help="run every ucx mode even for tests that an earlier ucx mode runs too (identical runs)")
    ap.add_argument("--start-method", choices=("spawn", "fork"), default="spawn",
                    help="how rank processes start: spawn (as upstream, default) or fork "
                         "(much faster, not what PyTorch CI does)")
    ap.add_argument("--retry-failed", action="store_true",
                    help="rerun FAIL/TIMEOUT/ERROR runs once, one at a time, at the end; a changed outcome "
                         "is flagged 'flaky' (the record keeps the first attempt under 'previous')")
    ap.add_argument("--report", metavar="MD", help="render this markdown report at the end (make_report.py)")
    ap.add_argument("--list", action="store_true", help="print the selected tests and exit")
    args = ap.parse_args(argv)

    modes = list(dict.fromkeys(args.backends))
    # The feature-set listing is cheap and lets the report tell which
    # gloo-gated tests a DistTestCases change alone would enable.
    list_modes = list(modes)
    if any(m.endswith("-gates") for m in modes) and "ucx+features" not in modes:
        list_modes.append("ucx+features")
    if any(m.startswith("ucx") for m in modes) and "ucx" not in list_modes:
        list_modes.append("ucx")
    static = {m: list_tests(m, args.world_size, args.init_method) for m in list_modes}
    names = list(static[modes[0]])
    selected = _select(names, args.patterns, args.tests)
    if args.list:
        for n in selected:
            print(n)
        return 0

    data = None
    if args.resume and args.out and os.path.exists(args.out):
        with open(args.out) as f:
            data = json.load(f)
    info = _torch_info()
    cmd = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0]) if argv is None else "run_suite.py"]
                   + (sys.argv[1:] if argv is None else argv))
    meta = {
        "command": "python3 " + cmd,
        "torch": info.get("torch"),
        "commux": info.get("commux"),
        "python": platform.python_version(),
        "host_cpus": os.cpu_count(),
        "world_size": args.world_size,
        "modes": modes,
        "jobs": args.jobs,
        "timeout_s": args.timeout,
        "init_method": args.init_method,
        "start_method": args.start_method,
        "retry_failed": args.retry_failed,
        "started": _now(),
        "selected": len(selected),
    }
    invocation = {"command": meta["command"], "started": meta["started"]}
    redone: dict = {}  # (name, mode) -> record dropped by --redo (kept as history)
    if data is None:
        meta["invocations"] = [invocation]
        data = {"meta": meta, "static_skips": {}, "results": {}}
    else:
        old_meta = data.get("meta", {})
        meta["invocations"] = old_meta.get("invocations", [{"command": old_meta.get("command"),
                                                              "started": old_meta.get("started")}]) + [invocation]
        meta["started"] = old_meta.get("started", meta["started"])
        meta["modes"] = list(dict.fromkeys(old_meta.get("modes", []) + modes))
        data["meta"] = {**old_meta, **meta}
        for name in selected:
            for mode in args.redo:
                old = data["results"].get(name, {}).pop(mode, None)
                if old and not old.get("static") and not old.get("same_as"):
                    redone[(name, mode)] = old
    data["static_skips"] = {m: {n: r for n, r in s.items() if r} for m, s in static.items()}
    store = _Store(args.out, data)
    store.flush()

    def dedup_source(name: str, mode: str) -> str | None:
        if args.no_dedup or mode in ("gloo", "ucx"):
            return None
        for src in DEDUP_SOURCES:
            if src == mode:
                return None
            if src in modes and not static[src].get(name):
                return src
        return None

    dedup = not args.no_dedup
    copies = []
    todo = []
    for name in selected:
        for mode in modes:
            old = data["results"].get(name, {}).get(mode)
            if old and old.get("status") != "ERROR":
                continue
            reason = static[mode].get(name)
            if reason and not args.run_static_skips:
                store.put(name, mode, {"status": "SKIP", "reason": reason, "static": True, "duration": 0.0})
                continue
            src = dedup_source(name, mode)
            if src:
                copies.append((name, mode, src))  # identical run; copied below
                continue
            todo.append((name, mode))

    total = len(todo)
    data["meta"]["dedup"] = dedup
    print(f"[run_suite] {len(selected)} tests x {modes}: {total} runs "
          f"(jobs={args.jobs}, timeout={args.timeout}s, world size {args.world_size})", flush=True)
    t0 = time.monotonic()
    done = 0
    counts: dict = {}
    lock = threading.Lock()

    def work(item):
        name, mode = item
        rec = run_test(name, mode, args.world_size, args.timeout, args.init_method, args.log_dir,
                       args.start_method)
        return name, mode, rec

    with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        futs = [ex.submit(work, it) for it in todo]
        for fut in cf.as_completed(futs):
            name, mode, rec = fut.result()
            if (name, mode) in redone:
                rec = with_history(rec, redone[(name, mode)])
            store.put(name, mode, rec)
            with lock:
                done += 1
                counts[(mode, rec["status"])] = counts.get((mode, rec["status"]), 0) + 1
                extra = "" if rec["status"] == "PASS" else f"  {rec.get('reason', '')[:160]}"
                print(f"[{done}/{total} {time.monotonic() - t0:6.0f}s] {rec['status']:7s} {mode:15s} "
                      f"{name} ({rec['duration']}s){extra}", flush=True)

    if args.retry_failed:
        again = [(n, m) for n, m in todo
                 if data["results"].get(n, {}).get(m, {}).get("status") in ("FAIL", "TIMEOUT", "ERROR")]
        print(f"[run_suite] retrying {len(again)} failed runs one at a time", flush=True)
        for i, (name, mode) in enumerate(again, 1):
            old = data["results"][name][mode]
            rec = with_history(work((name, mode))[2], old)
            store.put(name, mode, rec)
            print(f"[retry {i}/{len(again)}] {rec['status']:7s} {mode:15s} {name} ({rec['duration']}s) "
                  f"first: {old['status']}{' (other commux build)' if rec.get('rebuilt') else ''}", flush=True)

    for name, mode, src in sorted(copies, key=lambda c: MODES.index(c[1])):
        rec = data["results"].get(name, {}).get(src)
        if rec:
            store.put(name, mode, {**rec, "same_as": rec.get("same_as", src)})
    data["meta"]["finished"] = _now()
    data["meta"]["wall_s"] = round(time.monotonic() - t0, 1)
    invocation.update(wall_s=data["meta"]["wall_s"], runs=total, jobs=args.jobs)
    store.flush()
    summary = {}
    for name, per in data["results"].items():
        for mode, rec in per.items():
            summary.setdefault(mode, {}).setdefault(rec["status"], 0)
            summary[mode][rec["status"]] += 1
    for mode in modes:
        print(f"[run_suite] {mode}: " + ", ".join(f"{k} {v}" for k, v in sorted(summary.get(mode, {}).items())))
    if args.report:
        if not args.out:
            raise SystemExit("--report needs --out")
        sys.path.insert(0, HERE)
        import make_report

        make_report.main([args.out, "--out", args.report])
    return 0


if __name__ == "__main__":
    sys.exit(main())
