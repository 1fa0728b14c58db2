"""Multi-process test harness for the commux c10d backend.

Every test that needs a process group runs its body in ``world_size`` real
processes (multiprocessing ``forkserver`` context with torch preloaded, or ``spawn``
with ``COMMUX_TEST_SPAWN=1``), each of which initializes
``torch.distributed`` with the backend under test, runs the body, and tears
the group down again.  The parent (the pytest process) never initializes a
process group itself.

Backend selection
-----------------
``COMMUX_TEST_BACKEND`` (default ``"ucx"``) picks the backend.  ``"gloo"`` is
used to validate the harness and the backend-agnostic tests while commux is
not built.  When the backend is ``"ucx"`` or ``"commux"`` every rank runs
``import commux; commux.register()`` before ``init_process_group``.

Public API
----------
``run_ranks(fn, world_size, timeout=60, init="tcp", env=None, *,
backend=None, pg_timeout=None, **kwargs) -> list``
    Runs ``fn(rank, world_size, **kwargs)`` in every rank and returns the
    per-rank return values (index = rank).  ``fn`` must be a module-level
    function (it is pickled by reference).  Return values must be picklable;
    tensors are fine.  ``init`` is one of ``"tcp"``, ``"file"``, ``"env"``,
    ``"store"``.  ``env`` is a dict of environment variables set in every
    rank before torch is imported; a list or tuple value gives one value per rank.
    ``backend`` overrides the backend name
    passed to ``init_process_group`` (e.g. ``"commux"`` to test the alias);
    ``pg_timeout`` (a ``timedelta``) is passed as ``timeout=`` to
    ``init_process_group``, ``device_id`` (e.g. ``"cpu"``) as ``device_id=``.  ``timeout`` is a HARD limit in seconds: when it
    expires every child still alive gets its Python stacks dumped (SIGUSR1 +
    faulthandler) and is SIGKILLed, and the test fails naming the ranks that
    were still running.  If any rank raises, the test fails with the
    tracebacks of every rank that failed (ranks that are still blocked get a
    short grace period, then are killed and named).  A rank that reports
    success but then does not exit (hang in ``destroy_process_group`` or at
    interpreter shutdown), or exits with a non-zero status, also fails the
    test.

Helpers usable inside rank functions: ``BACKEND``, ``is_ucx()``,
``get_backend_obj()``, ``side_barrier()``, ``expect_error()``,
``cpu_seconds()``.
"""

from __future__ import annotations

import datetime
import faulthandler
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

import multiprocessing as mp
from multiprocessing.connection import wait as mp_wait

BACKEND = os.environ.get("COMMUX_TEST_BACKEND", "ucx").strip().lower() or "ucx"
UCX_NAMES = ("ucx", "commux")
INIT_METHODS = ("tcp", "file", "env", "store")

# Seconds the parent keeps waiting for the other ranks once one rank failed.
FAILURE_GRACE_S = 5.0
# Seconds given to children to dump their stacks before they are killed.
STACK_DUMP_WAIT_S = 1.0


def is_ucx(backend: str | None = None) -> bool:
    """True when the backend under test is commux (``ucx``/``commux``)."""
    return (backend or BACKEND) in UCX_NAMES


def skip_reason_unless_ucx(what: str) -> str:
    return f"ucx-specific ({what}); backend under test is {BACKEND!r}"


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago.

    Below the kernel's ephemeral range where there is room: a port the kernel handed out
    (bind to port 0) can go to any outgoing connection or listener (UCX's among them)
    before rank 0 binds it, which failed a CI run with EADDRINUSE; one below the range is
    only taken by a process that names it.
    """
    import random

    low = _ephemeral_low()
    if low > 12000:
        pick = random.Random(os.getpid() ^ time.monotonic_ns())
        for _ in range(50):
            port = pick.randrange(10000, low)
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    continue
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _fail(msg: str):
    try:
        import pytest
    except ImportError:  # pragma: no cover - harness used outside pytest
        raise AssertionError(msg)
    pytest.fail(msg, pytrace=False)


# --------------------------------------------------------------------------
# Helpers for code running inside a rank
# --------------------------------------------------------------------------


def get_backend_obj(group=None):
    """The c10d ``Backend`` object (CPU) behind ``group`` (default: WORLD).

    Calling methods on it (``send``, ``recv``, ``allreduce`` ...) bypasses the
    argument checks that ``torch.distributed``'s Python layer does, so tests
    can verify that the backend itself validates its inputs.
    """
    import torch
    import torch.distributed as dist

    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    return pg._get_backend(torch.device("cpu"))


def shm_threads() -> int:
    """Threads named commux-shm in this process: commux runs one per group that took the
    shared-memory path (src/shm/channel.cpp)."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                n += f.read().strip() == "commux-shm"
        except OSError:
            pass
    return n


def side_barrier(name: str, timeout_s: float = 60.0, *, store=None, rank=None, ws=None) -> None:
    """Barrier through the default group's *store*, not through the backend.

    Used where the backend may legitimately be unusable (e.g. right after a
    timeout) but ranks must still not run ahead of each other, e.g. so that
    a peer does not exit while another rank is still waiting for a timeout.
    A rank that destroyed its group passes the store it kept, its rank and the size.
    """
    import torch.distributed as dist

    if store is None:
        store = dist.distributed_c10d._get_default_store()
        rank, ws = dist.get_rank(), dist.get_world_size()
    store.set(f"side_barrier/{name}/{rank}", "1")
    store.wait(
        [f"side_barrier/{name}/{r}" for r in range(ws)],
        datetime.timedelta(seconds=timeout_s),
    )
    # Rank 0 hosts the store (tcp:// and env:// rendezvous) and often exits right after the
    # barrier: it waits until every rank's wait was answered, or the last rank to arrive
    # reads "Connection reset by peer" (seen under load).
    passed = f"side_barrier/{name}/passed"
    store.add(passed, 1)
    if rank == 0:
        deadline = time.monotonic() + timeout_s
        while store.add(passed, 0) < ws and time.monotonic() < deadline:
            time.sleep(0.001)


def forwarding_store(real, on_read=None):
    """A store written in Python (a dist.Store subclass) that forwards every call to `real`.
    ``on_read(op, keys, values)`` sees each read ("get" or "multi_get") and returns what the
    caller gets instead of ``values``. Keep the returned object alive while it is in use:
    c10d holds only its C++ half, and the overrides die with the Python object."""
    import torch.distributed as dist

    def read(op, keys, values):
        return values if on_read is None else on_read(op, keys, values)

    class Forwarding(dist.Store):
        def set(self, key, value):
            return real.set(key, value)

        def get(self, key):
            return read("get", [key], [real.get(key)])[0]

        def multi_get(self, keys):
            return read("multi_get", list(keys), real.multi_get(keys))

        def add(self, key, value):
            return real.add(key, value)

        def check(self, keys):
            return real.check(keys)

        def wait(self, keys, *timeout):
            return real.wait(keys, *timeout)

        def compare_set(self, key, expected, desired):
            return real.compare_set(key, expected, desired)

        def delete_key(self, key):
            return real.delete_key(key)

        def num_keys(self):
            return real.num_keys()

    return Forwarding()


def expect_error(fn, keywords, what: str, exc_types=(RuntimeError, ValueError)):
    """Call ``fn()``; it must raise one of ``exc_types`` whose message
    contains at least one of ``keywords`` (case-insensitive).  Returns the
    message.  ``what`` describes the situation for the assertion message."""
    if isinstance(keywords, str):
        keywords = (keywords,)
    try:
        fn()
    except exc_types as e:  # noqa: PERF203
        msg = str(e)
        low = msg.lower()
        assert any(k.lower() in low for k in keywords), (
            f"{what}: error message should mention one of {list(keywords)}, "
            f"got {type(e).__name__}: {msg!r}"
        )
        return msg
    except Exception as e:  # wrong exception type
        raise AssertionError(
            f"{what}: expected one of {[t.__name__ for t in exc_types]}, got "
            f"{type(e).__name__}: {e!r}"
        ) from e
    raise AssertionError(f"{what}: no exception was raised")


def assert_group_works(world_size: int) -> None:
    """Inside a rank: an all_reduce on the default group still gives the right answer
    (after an operation that was expected to fail)."""
    import torch
    import torch.distributed as dist

    t = torch.ones(3)
    dist.all_reduce(t)
    assert t.eq(world_size).all(), f"the group no longer works: all_reduce gave {t.tolist()}"


def cpu_seconds() -> float:
    """User+system CPU time of this whole process (all threads)."""
    import resource

    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# --------------------------------------------------------------------------
# Child side
# --------------------------------------------------------------------------


def _init_group(rank, world_size, backend, init, init_arg, pg_timeout, device_id=None):
    import torch
    import torch.distributed as dist

    kwargs = {}
    if pg_timeout is not None:
        kwargs["timeout"] = pg_timeout
    if device_id is not None:
        kwargs["device_id"] = torch.device(device_id)
    if init == "tcp":
        dist.init_process_group(
            backend, init_method=init_arg, rank=rank, world_size=world_size, **kwargs
        )
    elif init == "file":
        dist.init_process_group(
            backend, init_method=init_arg, rank=rank, world_size=world_size, **kwargs
        )
    elif init == "env":
        # MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE are in the environment;
        # rank and world size are deliberately NOT passed so that env://
        # has to provide them.
        dist.init_process_group(backend, init_method="env://", **kwargs)
    elif init == "store":
        store = dist.TCPStore(
            "127.0.0.1",
            init_arg,
            world_size,
            is_master=(rank == 0),
            timeout=datetime.timedelta(seconds=60),
        )
        dist.init_process_group(
            backend, store=store, rank=rank, world_size=world_size, **kwargs
        )
        return store  # keep it alive
    else:
        raise ValueError(f"unknown init method {init!r}")
    return None


def _rank_context():
    """Where rank processes come from: a fork server that imported torch once, so a rank
    starts in a fraction of a second instead of importing torch anew (2-4 s on the 2-core
    machine, paid by every rank of every test). Fresh interpreters otherwise (spawn), e.g.
    COMMUX_TEST_SPAWN=1 or where the fork server is missing."""
    global _CONTEXT
    if _CONTEXT is None:
        if os.environ.get("COMMUX_TEST_SPAWN", "0") == "1" or \
                "forkserver" not in mp.get_all_start_methods():
            _CONTEXT = mp.get_context("spawn")
        else:
            _CONTEXT = mp.get_context("forkserver")
            # torch only: it autoloads commux, which registers the backend and loads neither
            # UCX nor commux's C++ library, so no engine, thread or setting exists yet.
            _CONTEXT.set_forkserver_preload(["torch", "torch.distributed"])
    return _CONTEXT


_CONTEXT = None


def _child_main(rank, world_size, fn, kwargs, conn, cfg):
    """Entry point of every rank process."""
    stack_file = None
    try:
        # The whole environment of the test at launch (a fork server's child starts with
        # the server's), then the rank's own variables.
        if cfg.get("environ") is not None:
            os.environ.clear()
            os.environ.update(cfg["environ"])
        for k, v in (cfg.get("env") or {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)
        # PYTHONFAULTHANDLER only acts at interpreter start, which a fork server's child skips.
        faulthandler.enable()
        stack_file = open(os.path.join(cfg["tmpdir"], f"stack.{rank}"), "w")
        faulthandler.register(signal.SIGUSR1, file=stack_file, all_threads=True)

        import torch
        import torch.distributed as dist

        torch.set_num_threads(1)
        backend = cfg["backend"]
        if is_ucx(backend):
            import commux

            commux.register()
        managed = cfg["init"] != "none"
        store = None
        if managed:
            store = _init_group(
                rank, world_size, backend, cfg["init"], cfg["init_arg"], cfg["pg_timeout"],
                cfg.get("device_id"),
            )
            assert dist.get_rank() == rank and dist.get_world_size() == world_size, (
                f"init gave rank/world {dist.get_rank()}/{dist.get_world_size()}, "
                f"expected {rank}/{world_size}"
            )
        result = fn(rank, world_size, **kwargs)
        # torch's _abort_process_group forgets the default group: nothing left to destroy.
        if managed and dist.is_initialized():
            dist.destroy_process_group()
        del store
        payload = pickle.dumps(("ok", result))
    except BaseException as e:  # noqa: BLE001 - report everything
        tb = traceback.format_exc()
        try:
            conn.send_bytes(pickle.dumps(("err", f"{type(e).__name__}: {e}", tb)))
        except Exception:
            pass
        sys.stdout.flush()
        sys.stderr.flush()
        # Do not try to tear the group down: the peers may be blocked waiting
        # for this rank.  The parent kills whatever is left.
        os._exit(1)
    conn.send_bytes(payload)
    conn.close()
    # Normal interpreter shutdown: a hang here is reported by the parent.


# --------------------------------------------------------------------------
# Parent side
# --------------------------------------------------------------------------


def _dump_and_kill(procs, ranks, tmpdir):
    """SIGUSR1 (stack dump) then SIGKILL the given ranks; return their stacks."""
    alive = [r for r in ranks if procs[r].is_alive()]
    for r in alive:
        try:
            os.kill(procs[r].pid, signal.SIGUSR1)
        except ProcessLookupError:
            pass
    if alive:
        time.sleep(STACK_DUMP_WAIT_S)
    stacks = {}
    for r in ranks:
        path = os.path.join(tmpdir, f"stack.{r}")
        try:
            with open(path) as f:
                txt = f.read().strip()
        except OSError:
            txt = ""
        native = _native_stacks(procs[r].pid) if r in alive else ""
        if native:
            txt += "\n--- native stacks (gdb) ---\n" + native
        if txt:
            stacks[r] = txt
    _kill_all(procs)
    return stacks


def _native_stacks(pid):
    """C/C++ stacks of every thread of a hung rank (a hang inside the backend shows no
    Python frame), or "" when gdb is not installed."""
    if shutil.which("gdb") is None:
        return ""
    try:
        out = subprocess.run(
            ["gdb", "-p", str(pid), "-batch", "-nx", "-ex", "thread apply all bt 20"],
            capture_output=True, text=True, timeout=30,
        ).stdout
    except (subprocess.TimeoutExpired, OSError):
        return ""
    return "\n".join(l for l in out.splitlines() if l.startswith(("#", "Thread")))


def _kill_all(procs):
    """SIGKILLs every child still alive and reaps them all."""
    for p in procs:
        if p.is_alive():
            try:
                os.kill(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    for p in procs:
        p.join(5)


def _bare(frame):
    """A gdb frame's function without its arguments, template arguments and lambdas' types."""
    name = re.sub(r" at \S+:\d+$", "", frame).replace("(anonymous namespace)", "{anon}")
    while True:
        shorter = re.sub(r"<[^<>]*>", "", name)
        if shorter == name:
            return re.sub(r" ?\(.*", "", name)
        name = shorter


def _summary(text):
    """A few lines of one rank's dump: the innermost Python frames of each thread, and each
    native thread's name with its innermost commux frame (else its innermost frame). CI keeps
    only part of a long failure, so this goes first."""
    native_at = text.find("--- native stacks (gdb) ---")
    py, native = (text, "") if native_at < 0 else (text[:native_at], text[native_at:])
    out = []
    for block in re.split(r"\n(?=(?:Current thread|Thread) 0x)", py):
        frames = re.findall(r'File "([^"]+)", line (\d+) in (\S+)', block)
        if frames:
            out.append("  py: " + " <- ".join(f"{os.path.basename(f)}:{n} {fn}"
                                               for f, n, fn in frames[:3]))
    for block in re.split(r"\n(?=Thread \d+ )", native):
        name = re.search(r'Thread \d+ \(Thread \S+ \(LWP \d+\) "([^"]*)"\)', block)
        frames = [re.sub(r"^#\d+\s+(0x[0-9a-f]+ in )?", "", l) for l in block.splitlines()
                  if l.startswith("#")]
        if not name or not frames:
            continue
        ours = [f for f in frames if "commux::" in f]
        pick = [_bare(f) for f in (ours[:2] or frames[:1])]
        out.append(f"  thread {name.group(1)}: " + " <- ".join(pick))
    return "\n".join(out)


def _format_stacks(stacks):
    if not stacks:
        return ""
    out = ["", "Where each rank was (full stacks below):"]
    for r in sorted(stacks):
        out.append(f"rank {r}:")
        out.append(_summary(stacks[r]))
    out += ["", "Python stacks of the ranks that were still running:"]
    for r in sorted(stacks):
        out.append(f"--- rank {r} ---")
        out.append(stacks[r][-12000:])
    return "\n".join(out)


def run_ranks(
    fn,
    world_size: int,
    timeout: float = 60,
    init: str = "tcp",
    env: dict | None = None,
    *,
    backend: str | None = None,
    pg_timeout: datetime.timedelta | None = None,
    device_id: str | None = None,
    killed=(),
    **kwargs,
):
    """Run ``fn(rank, world_size, **kwargs)`` in ``world_size`` processes.

    ``killed``: ranks that must die by SIGKILL (fault tests kill them for real); their
    result is None, and the test fails if one of them returns or exits otherwise.
    With ``init="none"`` the harness neither creates nor destroys a process group: ``fn``
    manages its own (``init_arg`` is then a fresh scratch folder, passed as ``scratch``).

    See the module docstring for the full contract.  Returns the list of
    per-rank return values.
    """
    if init not in INIT_METHODS + ("none",):
        raise ValueError(f"init must be one of {INIT_METHODS + ('none',)}, got {init!r}")
    backend = backend or BACKEND
    # A short device lease caps every world's time, so that one hang cannot eat the rest.
    cap = float(os.environ.get("COMMUX_TEST_TIMEOUT_MAX", "0") or 0)
    if cap > 0:
        timeout = min(timeout, cap)
    ctx = _rank_context()
    tmpdir = tempfile.mkdtemp(prefix="commux_test_")

    child_env = {
        "OMP_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "PYTHONFAULTHANDLER": "1",
    }
    init_arg = None
    if init == "tcp":
        init_arg = f"tcp://127.0.0.1:{free_port()}"
    elif init == "file":
        init_arg = "file://" + os.path.join(tmpdir, "pg_init_file")
    elif init == "env":
        child_env.update(
            {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(free_port()),
                "WORLD_SIZE": str(world_size),
            }
        )
    elif init == "store":
        init_arg = free_port()
    elif init == "none":
        init_arg = tmpdir
        kwargs = dict(kwargs, scratch=tmpdir)
    per_rank = {}
    if env:
        for k, v in env.items():
            if isinstance(v, (list, tuple)):
                per_rank[k] = [None if x is None else str(x) for x in v]
            else:
                child_env[k] = None if v is None else str(v)

    cfg = {
        "backend": backend,
        "init": init,
        "init_arg": init_arg,
        "pg_timeout": pg_timeout,
        "device_id": device_id,
        "env": child_env,
        "environ": dict(os.environ),
        "tmpdir": tmpdir,
    }

    procs, conns = [], []
    # The environment is also applied in the parent while the children are
    # started, so that it is already present when the child interpreter (and
    # anything it imports before _child_main runs) starts up.
    saved_env = dict(os.environ)
    try:
        for r in range(world_size):
            rank_env = dict(child_env)
            rank_env.update({k: v[r] for k, v in per_rank.items()})
            if init == "env":
                rank_env["RANK"] = str(r)
            for k, v in rank_env.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
            rcfg = dict(cfg, env=rank_env)
            parent_conn, child_conn = ctx.Pipe(duplex=False)
            p = ctx.Process(
                target=_child_main,
                args=(r, world_size, fn, kwargs, child_conn, rcfg),
                name=f"rank{r}",
                daemon=True,
            )
            p.start()
            child_conn.close()
            procs.append(p)
            conns.append(parent_conn)
    except BaseException:
        for p in procs:
            if p.is_alive():
                os.kill(p.pid, signal.SIGKILL)
        shutil.rmtree(tmpdir, ignore_errors=True)
        raise
    finally:
        os.environ.clear()
        os.environ.update(saved_env)

    start = time.monotonic()
    deadline = start + timeout
    results = {}  # rank -> ("ok", value) | ("err", summary, tb)
    failure_order = []
    no_report = {}  # rank -> exitcode for ranks that died without reporting
    open_conns = {conns[r]: r for r in range(world_size)}
    try:
        while open_conns:
            now = time.monotonic()
            if failure_order:
                deadline = min(deadline, now + FAILURE_GRACE_S)
            remaining = deadline - now
            if remaining <= 0:
                break
            ready = mp_wait(list(open_conns), timeout=min(remaining, 0.5))
            for c in ready:
                r = open_conns[c]
                try:
                    msg = pickle.loads(c.recv_bytes())
                except (EOFError, OSError):
                    # Child closed the pipe without reporting: it died.
                    procs[r].join(2)
                    del open_conns[c]
                    if r in killed and procs[r].exitcode == -signal.SIGKILL:
                        results[r] = ("ok", None)
                        continue
                    no_report[r] = procs[r].exitcode
                    failure_order.append(r)
                    continue
                except Exception as e:  # unpicklable result etc.
                    msg = ("err", f"result of rank {r} could not be unpickled: {e!r}", "")
                if r in killed and msg[0] == "ok":
                    msg = ("err", f"rank {r} should have been killed (SIGKILL) but returned", "")
                results[r] = msg
                if msg[0] == "err":
                    failure_order.append(r)
                del open_conns[c]

        pending = sorted(open_conns.values())
        elapsed = time.monotonic() - start

        if failure_order:
            stacks = _dump_and_kill(procs, pending, tmpdir)
            parts = [f"{len(failure_order)} of {world_size} ranks failed "
                     f"(backend={backend!r}, init={init!r}). First failing rank: "
                     f"{failure_order[0]} (ranks listed in the order their failure "
                     f"was noticed)."]
            for r in failure_order:
                if r in no_report:
                    parts.append(f"\n===== rank {r} died without reporting (exit code "
                                 f"{no_report[r]}; negative = killed by signal; its "
                                 f"stderr is in the captured output)")
                else:
                    parts.append(f"\n===== rank {r}: {results[r][1]}\n{results[r][2]}")
            if pending:
                parts.append(f"\nRanks still running {FAILURE_GRACE_S:.0f}s after the "
                             f"failure (killed): {pending}")
                parts.append(_format_stacks(stacks))
            _fail("\n".join(parts))

        if pending:
            stacks = _dump_and_kill(procs, pending, tmpdir)
            _fail(
                f"HARD TIMEOUT after {elapsed:.1f}s (limit {timeout}s, backend="
                f"{backend!r}, init={init!r}): ranks still running: {pending}; "
                f"finished: {sorted(results)}. All children were SIGKILLed."
                + _format_stacks(stacks)
            )

        # Everyone reported success; now they must also exit cleanly.
        exit_deadline = time.monotonic() + min(30.0, max(5.0, deadline - time.monotonic()))
        for p in procs:
            p.join(max(0.1, exit_deadline - time.monotonic()))
        stuck = [r for r, p in enumerate(procs) if p.is_alive()]
        if stuck:
            stacks = _dump_and_kill(procs, stuck, tmpdir)
            _fail(
                f"ranks {stuck} returned successfully but did not exit (hang in "
                f"process teardown / interpreter shutdown). All children killed."
                + _format_stacks(stacks)
            )
        bad_exit = {
            r: p.exitcode for r, p in enumerate(procs) if p.exitcode != 0 and r not in killed
        }
        if bad_exit:
            _fail(
                f"ranks returned successfully but exited with non-zero status "
                f"(negative = signal): {bad_exit}"
            )
        return [results[r][1] for r in range(world_size)]
    finally:
        _kill_all(procs)
        for c in conns:
            c.close()
        shutil.rmtree(tmpdir, ignore_errors=True)


# --------------------------------------------------------------------------
# Fresh interpreter helper
# --------------------------------------------------------------------------


def run_python(code: str, env: dict | None = None, timeout: float = 120, args=()):
    """Run ``python -c code`` (or ``python <args>`` when ``code`` is None) in
    a fresh interpreter with this environment plus ``env`` (a value of None
    removes the variable).  Returns the CompletedProcess (text mode)."""
    import subprocess

    full_env = dict(os.environ)
    full_env.setdefault("OMP_NUM_THREADS", "1")
    for k, v in (env or {}).items():
        if v is None:
            full_env.pop(k, None)
        else:
            full_env[k] = str(v)
    cmd = [sys.executable] + (["-c", code] if code is not None else []) + list(args)
    try:
        return subprocess.run(
            cmd, env=full_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired as e:
        _fail(
            f"subprocess {cmd[:3]}... timed out after {timeout}s\n"
            f"stdout:\n{e.stdout}\nstderr:\n{e.stderr}"
        )
