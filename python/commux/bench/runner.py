"""Starts one world of rank processes on localhost and never lets it hang.

Each world size runs in fresh processes (``python -m commux.bench._worker``), each rank
in its own session so that a timeout can kill whatever it started as well. The parent
never imports torch: it only writes the spec, watches the processes and reads rank 0's
``result.json``.

Two limits: the world's hard timeout (``--timeout``, sized from the plan, generous), and
a stall limit (``--stall-timeout``): ranks rewrite their state file before every block,
so when no rank's file has changed for that long the world is hung, and is stopped
without waiting out the whole hard timeout.

Ranks print progress (rank 0) to the parent's stdout; each rank's stderr goes to
``rank<r>.stderr`` in the world's folder and is shown afterwards, rank by rank, so that
eight ranks' warnings or stack dumps do not interleave into one unreadable stream.

On either limit every rank gets SIGUSR1 (Python stacks to its stderr), then its process
group is SIGKILLed, and the error names the op/size/backend/block each rank's state
file shows. When a rank exits with an error the others get a short grace period (they
are usually blocked on the dead peer) before they are killed the same way.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field

FAILURE_GRACE_S = 10.0
STACK_DUMP_WAIT_S = 1.0
STDERR_TAIL_LINES = 60


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class WorldResult:
    world_size: int
    seconds: float
    result: dict = field(default_factory=dict)  # rank 0's result.json (may be partial)
    error: str | None = None
    stderr: str = ""  # the ranks' stderr tails, labelled by rank ("" when all were silent)


def _stderr_tails(workdir: str, world_size: int) -> str:
    parts = []
    # mpirun's own messages (a --mpi world), then each rank's.
    for who, name in [("mpirun", "mpirun.stderr")] + [(f"rank {r}", f"rank{r}.stderr") for r in range(world_size)]:
        path = os.path.join(workdir, name)
        try:
            with open(path, errors="replace") as f:
                lines = f.read().splitlines()
        except OSError:
            continue
        if not lines:
            continue
        cut = len(lines) > STDERR_TAIL_LINES
        head = f"--- {who} stderr" + (f" (last {STDERR_TAIL_LINES} lines of {path})" if cut else "")
        parts.append("\n".join([head + " ---", *lines[-STDERR_TAIL_LINES:]]))
    return "\n".join(parts)


def _kill_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _states(workdir: str, world_size: int) -> str:
    lines = []
    for rank in range(world_size):
        try:
            with open(os.path.join(workdir, f"state.{rank}")) as f:
                text = f.read().strip()
        except OSError:
            text = "(no state yet: still starting up or in init_process_group)"
        lines.append(f"    rank {rank}: {text}")
    return "\n".join(lines)


def _rank_pids(workdir: str) -> list[int]:
    """The pids the ranks wrote at start (pid.<rank>): ranks under mpirun are its children
    in process groups of their own, so killing mpirun's group alone could leave them."""
    pids = []
    for name in os.listdir(workdir):
        if name.startswith("pid."):
            try:
                with open(os.path.join(workdir, name)) as f:
                    pids.append(int(f.read().strip()))
            except (OSError, ValueError):
                pass
    return pids


def _signal_pids(pids: list[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def _stop(procs: list[subprocess.Popen], workdir: str) -> None:
    """SIGUSR1 (stack dump) then SIGKILL to every rank still alive, and reap them."""
    alive = [p for p in procs if p.poll() is None]
    ranks = _rank_pids(workdir) if alive else []
    _signal_pids(ranks, signal.SIGUSR1)
    if alive:
        time.sleep(STACK_DUMP_WAIT_S)
    _signal_pids(ranks, signal.SIGKILL)
    for p in procs:
        _kill_group(p, signal.SIGKILL)
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _last_progress(workdir: str, world_size: int, since: float) -> float:
    """Wall-clock time of the newest state-file update (``since`` if none yet)."""
    newest = since
    for rank in range(world_size):
        try:
            newest = max(newest, os.stat(os.path.join(workdir, f"state.{rank}")).st_mtime)
        except OSError:
            pass
    return newest


def _forwarded(env: dict) -> list[str]:
    """mpirun -x arguments that pass the rank-independent environment to every rank."""
    names = [v for v in env if v.startswith(("COMMUX_", "UCX_", "TORCH_", "MASTER_", "NCCL_"))
             or v in ("WORLD_SIZE", "OMP_NUM_THREADS", "PYTHONUNBUFFERED", "PYTHONPATH", "LD_LIBRARY_PATH")]
    return [a for v in sorted(names) for a in ("-x", v)]


def _pin_to(cpu: int):
    """A child's pre-exec step: run on ``cpu`` alone (mpirun --bind-to core's way)."""
    return lambda: os.sched_setaffinity(0, {cpu})


def _launch(world_size: int, spec_path: str, workdir: str, base_env: dict, mpirun: list[str] | None,
            logs: list, pinned: bool = False) -> list[subprocess.Popen]:
    """The ranks as processes of their own (each with RANK set; ``pinned``: rank r bound to
    CPU r mod the CPUs this process may use), or, with ``mpirun`` (the command up to the
    program, its binding included), as one mpirun whose ranks read RANK from Open MPI's
    environment (_worker.py) and write their own rank<r>.stderr."""
    cmd = [sys.executable, "-m", "commux.bench._worker", spec_path]
    if mpirun is not None:
        logs.append(open(os.path.join(workdir, "mpirun.stderr"), "w"))
        return [subprocess.Popen(mpirun + _forwarded(base_env) + cmd, env=base_env, stdin=subprocess.DEVNULL,
                                 stderr=logs[-1], start_new_session=True)]
    procs = []
    cpus = sorted(os.sched_getaffinity(0))
    for rank in range(world_size):
        env = dict(base_env, RANK=str(rank), LOCAL_RANK=str(rank))
        logs.append(open(os.path.join(workdir, f"rank{rank}.stderr"), "w"))
        procs.append(subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stderr=logs[-1],
                                      start_new_session=True,
                                      preexec_fn=_pin_to(cpus[rank % len(cpus)]) if pinned else None))
    return procs


def run_world(world_size: int, spec: dict, workdir: str, timeout_s: float,
              stall_timeout_s: float, mpirun: list[str] | None = None,
              pinned: bool = False) -> WorldResult:
    """Runs ``spec`` (see _worker.py) in ``world_size`` ranks; at most ``timeout_s``, and
    at most ``stall_timeout_s`` without any rank starting a new block. With ``mpirun``
    (``mpirun -n R ...``, up to the program) the ranks start under it, so that they can
    also run MPI (the --mpi run's mpi4py blocks); else ``pinned`` binds each rank to a CPU
    of its own (shared round-robin when ranks outnumber CPUs)."""
    os.makedirs(workdir, exist_ok=True)
    for name in os.listdir(workdir):
        os.unlink(os.path.join(workdir, name))
    spec = dict(spec, workdir=workdir)
    spec_path = os.path.join(workdir, "spec.json")
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=1)

    base_env = dict(os.environ)
    base_env.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
        WORLD_SIZE=str(world_size),
        OMP_NUM_THREADS="1",
        PYTHONUNBUFFERED="1",
    )
    procs: list[subprocess.Popen] = []
    logs: list = []
    start = time.monotonic()
    wall_start = time.time()
    error = None
    try:
        procs = _launch(world_size, spec_path, workdir, base_env, mpirun, logs, pinned)
        deadline = start + timeout_s
        first_failure = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c == 0 for c in codes):
                break
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            now = time.monotonic()
            if failed and first_failure is None:
                first_failure = now
            if failed and (all(c is not None for c in codes) or now - first_failure > FAILURE_GRACE_S):
                who = (f"mpirun exited with {codes[0]}" if mpirun is not None else
                       f"rank(s) {failed} exited with {[codes[r] for r in failed]}")
                error = (
                    f"world of {world_size} ranks failed: {who} (stderr above)\nwhere each rank was:\n"
                    + _states(workdir, world_size)
                )
                break
            stalled = time.time() - _last_progress(workdir, world_size, wall_start)
            if now > deadline or stalled > stall_timeout_s:
                running = [r for r, c in enumerate(codes) if c is None]
                why = (f"TIMED OUT after {timeout_s:.0f} s (--timeout)" if now > deadline else
                       f"HUNG: no rank started a new block for {stalled:.0f} s (--stall-timeout)")
                error = (
                    f"world of {world_size} ranks {why}; ranks still running {running} were "
                    "killed (Python stacks in the stderr above)\nwhere each rank was:\n"
                    + _states(workdir, world_size)
                )
                break
            time.sleep(0.05)
    finally:
        _stop(procs, workdir)
        for log in logs:
            log.close()

    result: dict = {}
    try:
        with open(os.path.join(workdir, "result.json")) as f:
            result = json.load(f)
    except (OSError, ValueError):
        pass
    if error is None and not result.get("complete"):
        error = f"world of {world_size} ranks exited cleanly but rank 0 wrote no complete result"
    return WorldResult(world_size, time.monotonic() - start, result, error,
                       _stderr_tails(workdir, world_size))
