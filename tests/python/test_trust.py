"""What commux writes and acts on: only the caller's buffers (an all-to-all whose own block
does not fit its output is refused before any byte moves, on shared memory and over UCX),
nothing of a parent's group in a forked child, and settings only within their ranges."""

import atexit
import ctypes
import gc
import os
import signal
import sys
import time

import pytest
import torch
import torch.distributed as dist

import commux

from harness import assert_group_works, expect_error, forwarding_store, run_ranks, run_python

pytestmark = pytest.mark.ucx_only

GUARD = -12345.0


def _guarded(n, pad=3):
    """A view of n elements with `pad` guard values on each side in the same storage."""
    buf = torch.full((n + 2 * pad,), GUARD)
    return buf, buf[pad:pad + n]


def _guards_intact(buf, n, pad=3):
    return bool(buf[:pad].eq(GUARD).all() and buf[pad + n:].eq(GUARD).all())


def _self_block_too_large(rank, ws):
    # Each rank sends itself 8 elements but gives its own block room for 2.
    in_splits = [2] * ws
    in_splits[rank] = 8
    out_splits = [2] * ws
    inp = torch.arange(sum(in_splits), dtype=torch.float32)
    buf, out = _guarded(sum(out_splits))
    msg = expect_error(lambda: dist.all_to_all_single(out, inp, out_splits, in_splits),
                       "sends 8 elements to itself", "an own block larger than its room",
                       exc_types=(ValueError,))
    assert "room for 2" in msg, msg
    assert _guards_intact(buf, sum(out_splits)), f"written past the output: {buf.tolist()}"
    assert out.eq(GUARD).all(), f"the output was written before the error: {out.tolist()}"
    # The list form: this rank's own output tensor is smaller than its own input tensor.
    ins = [torch.ones(8 if r == rank else 2) for r in range(ws)]
    bufs = [_guarded(2) for _ in range(ws)]
    expect_error(lambda: dist.all_to_all([o for _, o in bufs], ins), "sends 8 elements to itself",
                 "all_to_all with an own block larger than its room", exc_types=(ValueError,))
    assert all(_guards_intact(b, 2) and o.eq(GUARD).all() for b, o in bufs)
    # Splits beyond the tensor (an overflowing sum) are refused by name.
    huge = [2 ** 62] * ws
    expect_error(lambda: dist.all_to_all_single(out, inp, out_splits, huge), "larger than",
                 "a huge split", exc_types=(ValueError,))
    assert _guards_intact(buf, sum(out_splits))
    # Nothing moved, so the group goes on, collectives included.
    assert_group_works(ws)
    good = torch.arange(ws, dtype=torch.float32) + 10 * rank
    got = torch.empty(ws)
    dist.all_to_all_single(got, good)
    assert got.tolist() == [10.0 * r + rank for r in range(ws)]
    return True


@pytest.mark.parametrize("shm", ["1", "0"])
@pytest.mark.parametrize("ws", [2, 3])
def test_all_to_all_own_block_is_checked_before_any_path(ws, shm):
    assert all(run_ranks(_self_block_too_large, ws, timeout=90, env={"COMMUX_SHM": shm}))


def _forked_child(rank, ws, mode):
    t = torch.ones(4)
    dist.all_reduce(t)  # the group is set up (shared memory included) before the fork
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        code = 0
        if mode == "use":
            try:
                dist.all_reduce(torch.ones(4))
                os.write(w, b"no error")
            except RuntimeError as e:
                os.write(w, str(e).encode()[:4000])
            try:
                dist.send(torch.ones(1), dst=(rank + 1) % ws)
                os.write(w, b"|send: no error")
            except RuntimeError as e:
                os.write(w, b"|send: " + str(e).encode()[:2000])
        os.close(w)
        # A normal exit, which the harness's own handlers would intercept as SystemExit:
        # Python's exit functions, the groups dropped (their destructors run in the child),
        # then libc's exit, which runs the C++ static destructors (the engine's exit guard)
        # with the parent's engine inherited.
        atexit._run_exitfuncs()
        dist.destroy_process_group()
        gc.collect()
        ctypes.CDLL(None).exit(code)
    os.close(w)
    deadline = time.monotonic() + 30
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise AssertionError("the forked child did not exit within 30 s")
        time.sleep(0.05)
    said = os.read(r, 8192).decode()
    os.close(r)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, f"child status {status}: {said}"
    if mode == "use":
        collective, _, send = said.partition("|send: ")
        for what in (collective, send):
            assert "fork" in what and "child" in what, f"the child's error does not name fork: {said!r}"
    # The parent's group is untouched.
    assert_group_works(ws)
    x = torch.full((3,), float(rank))
    if rank == 0:
        dist.send(x, dst=1, tag=5)
    elif rank == 1:
        dist.recv(x, src=0, tag=5)
        assert x.eq(0).all()
    return True


@pytest.mark.parametrize("mode", ["exit", "use"])
@pytest.mark.parametrize("shm", ["1", "0"])
def test_forked_child_exits_at_once_and_cannot_use_the_parents_group(mode, shm):
    assert all(run_ranks(_forked_child, 2, timeout=90, env={"COMMUX_SHM": shm}, mode=mode))


def _bad_setting(rank, ws, scratch, name):
    return expect_error(lambda: commux.load_extension().config(), (name,), f"a bad {name}",
                        exc_types=(ValueError,))


@pytest.mark.parametrize("name,value,says", [
    ("COMMUX_SHM_SLOT_BYTES", str(2 ** 64 - 1), "is outside [0, 268435456]"),
    ("COMMUX_SHM_SLOT_BYTES", str(2 ** 40), "is outside [0, 268435456]"),
    ("COMMUX_SHM_POLL_NS", str(2 ** 63 + 5), "too large"),
    ("COMMUX_SHM_POLL_NS", str(10 ** 12), "is outside [0, 1000000000] nanoseconds"),
    ("COMMUX_WAIT_SPIN_US", str(2 ** 63), "too large"),
    ("COMMUX_HANDOFF_DELAY_US", str(10 ** 9), "is outside [0, 60000000] microseconds"),
    ("COMMUX_PIPELINE_CHUNK_BYTES", "0", "is outside [1, 1073741824]"),
    ("COMMUX_LOG_ALGORITHMS_MIN_RANKS", str(2 ** 40), "too large"),
    ("COMMUX_LOG_ALGORITHMS_MIN_RANKS", str(2 ** 20), "is outside [0, 65537] ranks"),
    ("COMMUX_COALESCE", "2", "use 1, true, on or yes; 0, false, off or no"),
])
def test_settings_out_of_range_name_the_variable(name, value, says):
    msg = run_ranks(_bad_setting, 1, timeout=60, init="none", env={name: value}, name=name)[0]
    assert says in msg, msg


def _dies_before_first_collective(rank, ws, victim):
    import datetime
    if rank == victim:
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(0.5)  # the victim is gone before anyone starts the set-up
    start = time.monotonic()
    x = torch.ones(4)
    try:
        dist.all_reduce(x)
    except dist.DistError as e:
        elapsed = time.monotonic() - start
        # Rank 0 serves the TCPStore: its death is the store's, named as such.
        says = "has rank 0 exited" if victim == 0 else f"rank {victim} died"
        assert says in str(e), f"the error does not name the dead rank: {e}"
    else:
        raise AssertionError(f"all_reduce completed although rank {victim} was killed")
    assert elapsed < 10, f"the death took {elapsed:.1f} s to notice (group timeout 300 s)"
    if victim == 0:
        return True  # the store is gone with it: nothing else can start
    # Later collectives are refused at once; point-to-point between survivors still works.
    expect_error(lambda: dist.all_reduce(torch.ones(2)), ("runs no more collectives", "refused",
                                                          "died"), "a collective after it")
    # A round trip: neither survivor exits (rank 0 takes the store with it) before the
    # other is through.
    survivors = [r for r in range(ws) if r != victim]
    other = survivors[1 - survivors.index(rank)]
    got = torch.empty(2)
    if rank == survivors[0]:
        dist.send(torch.full((2,), 3.0), dst=other, tag=4)
        dist.recv(got, src=other, tag=5)
    else:
        dist.recv(got, src=other, tag=4)
        dist.send(torch.full((2,), 3.0), dst=other, tag=5)
    assert got.tolist() == [3.0, 3.0]
    return True


@pytest.mark.parametrize("victim", [0, 1, 2])
def test_a_death_before_the_first_collective_is_found_in_seconds(victim):
    import datetime
    run_ranks(_dies_before_first_collective, 3, timeout=90, killed=(victim,),
              pg_timeout=datetime.timedelta(seconds=300), victim=victim)


def _other_job(rank, ws):
    # Each rank was started by a different launch (another torchrun run id) on one store.
    msg = expect_error(lambda: dist.send(torch.ones(2), dst=1 - rank, tag=1)
                       if rank == 0 else dist.recv(torch.ones(2), src=0, tag=1),
                       "belongs to another job", "a peer record of another job")
    assert "torchrun:job-" in msg and "MASTER_PORT" in msg, msg
    return True


def test_ranks_of_two_jobs_on_one_store_are_refused_by_name():
    assert all(run_ranks(_other_job, 2, timeout=60,
                         env={"TORCHELASTIC_RUN_ID": ["job-a", "job-b"], "COMMUX_SHM": "0"}))


# A job that creates groups and runs collectives as fast as it can, killed at a random moment
# (set-up included) by SIGKILL to every rank, as a scheduler or an OOM killer would.
_CHURN = r"""
import os, sys, datetime, torch, torch.distributed as dist
import commux; commux.register()
rank, ws, path = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
store = dist.FileStore(path, ws)
dist.init_process_group("ucx", store=store, rank=rank, world_size=ws,
                        timeout=datetime.timedelta(seconds=60))
os.write(1, b"up\n")
while True:
    g = dist.new_group(list(range(ws)))
    t = torch.ones(64)
    dist.all_reduce(t, group=g)
    dist.destroy_process_group(g)
"""


def test_ranks_killed_at_random_moments_leave_nothing_in_dev_shm(tmp_path):
    import random
    import subprocess
    seed = int(os.environ.get("COMMUX_KILL_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    script = tmp_path / "churn.py"
    script.write_text(_CHURN)
    pids = []
    for round_ in range(6):
        path = str(tmp_path / f"store{round_}")
        procs = [subprocess.Popen([sys.executable, str(script), str(r), "3", path],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                 for r in range(3)]
        try:
            for p in procs:
                assert p.stdout.readline() == b"up\n", f"a rank did not start (seed {seed})"
            time.sleep(rng.uniform(0.05, 1.5))
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait(timeout=30)
        pids += [p.pid for p in procs]
    left = [n for n in os.listdir("/dev/shm")
            if n.startswith("commux-") and int(n.split("-")[1]) in pids]
    assert not left, f"segments left behind: {left} (COMMUX_KILL_SEED={seed} replays)"


def _settings_differ(rank, ws):
    import datetime
    start = time.monotonic()
    try:
        work = dist.all_reduce(torch.ones(4), async_op=True)
        work.wait(timeout=datetime.timedelta(seconds=5))
    except (ValueError, RuntimeError) as e:
        msg = str(e)
    else:
        raise AssertionError("a group whose ranks' algorithm settings differ ran a collective")
    took = time.monotonic() - start
    assert took < 15, f"rank {rank} took {took:.1f} s to fail"
    print(f"rank {rank} after {took:.1f} s: {msg[:300]}", file=sys.stderr)
    if rank == 1:
        assert "COMMUX_ALLREDUCE_RING_MIN_BYTES is 262144 on rank 0 but 4096 on rank 1" in msg, msg
    # Later collectives are refused at once, on every rank.
    expect_error(lambda: dist.all_reduce(torch.ones(2)), ("refused", "settings differ",
                                                          "no more collectives", "runs no"),
                 "a collective after the mismatch")
    return True


@pytest.mark.parametrize("shm", ["1", "0"])
def test_algorithm_settings_that_differ_between_ranks_are_refused(shm):
    assert all(run_ranks(_settings_differ, 2, timeout=90,
                         env={"COMMUX_SHM": shm,
                              "COMMUX_ALLREDUCE_RING_MIN_BYTES": ["262144", "4096"]}))


# CMake options and test-harness variables share the prefix but are no run-time settings.
_NOT_RUNTIME = {"COMMUX_UCX_PROVIDER", "COMMUX_CUDA", "COMMUX_BUILD_PYTHON", "COMMUX_BUILD_BENCH",
                "COMMUX_INSTALL", "COMMUX_BUILD_TESTS", "COMMUX_SANITIZE", "COMMUX_UNITY_BUILD",
                "COMMUX_TEST_BACKEND"}


def test_the_settings_table_is_the_readme_config_and_info():
    """One table (src/config/settings.cpp) reads every COMMUX_* setting, lists it in
    commux.config() and prints docs/settings.md's table: they cannot drift apart."""
    import re
    import subprocess
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    readme = open(os.path.join(root, "docs", "settings.md")).read()
    block = re.search(r"^<!-- settings table:.*?-->\n(.*?)^<!-- end of settings table -->",
                      readme, re.M | re.S)
    assert block, "docs/settings.md has no settings table between its markers"
    printed = subprocess.run([sys.executable, "-m", "commux.info", "--settings-table"],
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert block.group(1) == printed.stdout, (
        "docs/settings.md's table differs from the table commux reads them by: paste the "
        "output of `python3 -m commux.info --settings-table` between its markers")
    table = commux.load_extension().settings_table()
    names = [row[0] for row in table]
    assert list(commux.config()) == names, "commux.config() lists other settings than the table"
    # Every variable the sources read is one of them.
    read = set()
    for folder in ("src", "python/commux"):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in files:
                if f.endswith((".cpp", ".hpp", ".py")):
                    text = open(os.path.join(dirpath, f)).read()
                    read |= set(re.findall(r"""(?:getenv|read\w*|environ\.get|environ\[)\(?\s*["'](COMMUX_[A-Z_]+)["']""", text))
    assert read - _NOT_RUNTIME <= set(names), f"read but not in the table: {sorted(read - set(names))}"
    # The defaults the table states are the values a process without settings reads.
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith("COMMUX_") and k not in ("TORCH_DISTRIBUTED_DEBUG", "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, "-c", "import commux, json; print(json.dumps(commux.config()))"],
                          capture_output=True, text=True, timeout=120, env=clean)
    assert proc.returncode == 0, proc.stderr
    import json
    defaults = json.loads(proc.stdout)
    checked = 0
    for name, default_text, _, _ in table:
        stated = re.match(r"`([^`]*)`", default_text)
        if not stated:
            continue
        value = defaults[name]
        shown = str(int(value)) if isinstance(value, bool) else str(value)
        assert shown == stated.group(1), f"{name}: the table says {default_text}, a clean process reads {value!r}"
        checked += 1
    assert checked >= 25, checked
    info = subprocess.run([sys.executable, "-m", "commux.info"], capture_output=True, text=True,
                          timeout=120)
    assert info.returncode == 0, info.stderr
    missing = [n for n in names if f"{n}=" not in info.stdout]
    assert not missing, f"python3 -m commux.info omits {missing}"


def test_flight_recorder_switch_takes_only_booleans():
    proc = run_python("import commux; commux.config()", env={"COMMUX_TORCH_FLIGHT_RECORDER": "maybe"})
    assert proc.returncode != 0 and "COMMUX_TORCH_FLIGHT_RECORDER='maybe' is not a boolean" in proc.stderr, \
        proc.stderr


def test_launcher_switch_takes_only_booleans():
    proc = run_python("import commux; commux.config()", env={"COMMUX_LAUNCHER": "maybe"})
    assert proc.returncode != 0 and "COMMUX_LAUNCHER='maybe' is not a boolean" in proc.stderr, proc.stderr


def _mismatched_dtypes_same_bytes(rank, ws):
    # float32 against int32: the same bytes, so without the check the reduction would run
    # over garbage with no error anywhere.
    t = torch.ones(4, dtype=torch.float32 if rank == 0 else torch.int32)
    msg = expect_error(lambda: dist.all_reduce(t), "called different collectives",
                       "an all_reduce whose dtypes differ between ranks", exc_types=(ValueError,))
    assert "Float" in msg and "Int" in msg, msg
    assert t.eq(1).all(), "the tensor changed although nothing was to be sent"
    assert_group_works(ws)
    return True


def test_ranks_whose_dtypes_differ_with_equal_bytes_are_refused_over_ucx_when_checked():
    assert all(run_ranks(_mismatched_dtypes_same_bytes, 2, timeout=90,
                         env={"COMMUX_SHM": "0", "COMMUX_CHECK_COLLECTIVES": "1"}))


def _tampered_store(rank, world_size, port, what, scratch=None):
    """Rank 1 reads records that another writer of the store changed (rank 0's); every
    change must be refused by its check, never acted on."""
    import datetime

    real = dist.TCPStore("127.0.0.1", port, world_size, is_master=(rank == 0),
                         timeout=datetime.timedelta(seconds=60))
    changed = []
    decoy = None
    decoy_name = f"/commux-dec0-{os.getpid()}"  # named as commux's segments are

    def tamper(key, value):
        if rank != 1:
            return value
        text = bytes(value)
        if what.startswith("segment") and "/shm/segment/" in key:
            fields = text.decode().split(" ")
            if what == "segment-foreign-fd":
                fields[-1] = "/proc/1/fd/0"  # another process's descriptor
            elif what == "segment-decoy":
                # A file of this user that commux did not make (mode 0644), as large as the
                # real segment: mapped as the channel, the collective would write into it.
                real = fields[-1] if fields[-1].startswith("/proc/") else "/dev/shm" + fields[-1]
                nonlocal decoy
                decoy = os.open("/dev/shm" + decoy_name, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
                os.fchmod(decoy, 0o644)  # whatever the umask
                os.ftruncate(decoy, os.stat(real).st_size)
                fields[-1] = decoy_name
            elif what == "segment-path":
                fields[-1] = "/commux-../../../etc/passwd"
            else:  # segment-slot: sizes beyond any segment commux makes
                fields[1] = str(2 ** 40)
            text = " ".join(fields).encode()
        elif what == "peer-truncated" and key.endswith("/peer/0"):
            text = text[:30]
        elif what == "window-pid" and "/window/" in key and key.endswith("/0"):
            lines = text.decode().split("\n")
            lines[4] = "1"  # init: a process this rank must never write into
            text = "\n".join(lines).encode()
        else:
            return value
        changed.append(key)
        return text

    store = forwarding_store(real, lambda op, keys, values: [tamper(k, v) for k, v in zip(keys, values)])
    dist.init_process_group("ucx", store=store, rank=rank, world_size=world_size)
    outcome = None
    if what.startswith("segment"):
        # Refused by rank 1 before it opens or maps anything: the group takes UCX, and works.
        t = torch.full((1000,), float(rank + 1))
        dist.all_reduce(t)
        assert torch.equal(t, torch.full((1000,), 3.0)), t[:4]
        backend = dist.group.WORLD._get_backend(torch.device("cpu"))
        outcome = backend.shared_memory_shape()
        if decoy is not None:
            os.unlink("/dev/shm" + decoy_name)
            written = os.pread(decoy, os.fstat(decoy).st_size, 0)
            assert written.count(0) == len(written), "the collective wrote into the decoy file"
    elif what == "peer-truncated":
        if rank == 1:
            outcome = expect_error(lambda: dist.send(torch.ones(1), 0), "truncated peer record",
                                   "a send to a rank whose record was cut short")
    elif what == "window-pid":
        buf = torch.zeros(16)
        if rank == 1:
            outcome = expect_error(lambda: dist._new_window(buf), "names process 1",
                                   "a window whose peer's record names another process")
        else:
            try:
                dist._new_window(buf)
            except Exception:
                pass
    real.add("done", 1)
    while rank == 0 and real.add("done", 0) < world_size:  # hosts the store: the last to go
        time.sleep(0.02)
    assert rank != 1 or changed, "nothing was changed: the test did not reach the record"
    return outcome


@pytest.mark.timeout(120)
@pytest.mark.parametrize("what", ["segment-foreign-fd", "segment-decoy", "segment-path", "segment-slot",
                                  "peer-truncated", "window-pid"])
def test_records_changed_in_the_store_are_refused_not_acted_on(what):
    """Anyone who can write the store can change what a rank reads there: a segment to
    open (another process's descriptor, a path outside /dev/shm, sizes beyond any
    segment), a peer record, a window record naming another process. Each is refused by a
    check before anything is opened, mapped or written; the group then falls back (shared
    memory: UCX) or the call raises naming the rank."""
    from harness import free_port

    if what == "window-pid" and not hasattr(dist, "_new_window"):
        pytest.skip("torch without one-sided windows")
    results = run_ranks(_tampered_store, 2, timeout=100, init="none", port=free_port(),
                        what=what)
    if what.startswith("segment"):
        assert results == [{}, {}], f"a channel was set up from a changed record: {results}"
    elif what == "peer-truncated":
        assert "rank 0" in results[1], results[1]
    else:
        assert "rank 0" in results[1] and "peer record names" in results[1], results[1]
