"""Multi-host check: scripts/multihost_check.sh runs a torchrun job on 2 and 3 "hosts" made of
Linux namespaces (own network with a veth to a bridge, host name, IPC, mount with a private
/dev/shm, PID), 2 ranks each, with no UCX_* variable set; tests/python/multihost_job.py
checks tagged and any-source point-to-point across hosts, every collective, per-host
subgroups (shared memory) and DDP with exact values. A third case cuts one host's link
after the first collective: the job must then fail, on its own and in bounded time. A
fourth kills one rank: every other host's ranks must fail their collective naming it.

Needs root, iproute2's `ip netns` and util-linux's `unshare`; skipped otherwise.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time

import pytest

from harness import BACKEND, is_ucx, skip_reason_unless_ucx

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(ROOT, "scripts", "multihost_check.sh")
TORCHRUN_TIMEOUT_S = 240  # the script's hard limit per torchrun
HARD_TIMEOUT_S = 400      # this test's limit on the whole script (setup + cleanup included)


def _why_not_runnable() -> str | None:
    if os.geteuid() != 0:
        return "needs root to create network, UTS, IPC, mount and PID namespaces"
    for tool, pkg in (("ip", "iproute2"), ("unshare", "util-linux"), ("flock", "util-linux")):
        if shutil.which(tool) is None:
            return f"needs '{tool}' ({pkg}), not found on PATH"
    probe = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    if probe.returncode != 0:
        return f"'ip netns' does not work here: {probe.stderr.strip()}"
    probe = subprocess.run(
        ["unshare", "--net", "--uts", "--ipc", "--mount", "--pid", "--fork", "true"],
        capture_output=True, text=True,
    )
    if probe.returncode != 0:
        return f"this kernel/container refuses new namespaces: {probe.stderr.strip()}"
    return None


WHY_NOT = _why_not_runnable()
pytestmark = pytest.mark.skipif(WHY_NOT is not None, reason=WHY_NOT or "")


def _run(*args: str) -> tuple[int, str, float]:
    """Runs the script; past HARD_TIMEOUT_S it gets SIGTERM (its EXIT trap removes the
    namespaces and their processes), then its whole process group SIGKILL, and the test
    fails with its output."""
    env = dict(os.environ, MULTIHOST_BACKEND=BACKEND)
    cmd = [SCRIPT, "--timeout", str(TORCHRUN_TIMEOUT_S), *args]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=HARD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, _ = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
        pytest.fail(f"{' '.join(cmd)} ran past {HARD_TIMEOUT_S}s (killed):\n{out[-12000:]}",
                    pytrace=False)
    return proc.returncode, out, time.monotonic() - start


@pytest.mark.timeout(HARD_TIMEOUT_S + 20)
@pytest.mark.parametrize("hosts", [2, 3])
def test_multihost_job_passes(hosts):
    rc, out, elapsed = _run("--hosts", str(hosts))
    assert rc == 0, f"multihost_check.sh --hosts {hosts} exited {rc} after {elapsed:.0f}s:\n{out[-12000:]}"
    ok = dict(
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"^multihost ok rank (\d+) host (\S+)", out, re.M)
    )
    world = 2 * hosts
    assert sorted(ok) == list(range(world)), (
        f"'multihost ok' lines for ranks {sorted(ok)}, want 0..{world - 1}:\n{out[-6000:]}"
    )
    # Ranks 2h and 2h+1 share host h; the hosts' names all differ.
    for h in range(hosts):
        assert ok[2 * h] == ok[2 * h + 1], f"ranks of host {h} report different names: {ok}"
    assert len(set(ok.values())) == hosts, f"expected {hosts} distinct host names: {ok}"
    assert f"PASSED ({hosts} hosts x 2 ranks, backend {BACKEND}" in out, out[-3000:]


@pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("one-sided windows"))
@pytest.mark.timeout(HARD_TIMEOUT_S + 20)
def test_window_job_across_hosts():
    """tests/python/window_job.py on 2 hosts x 2 ranks: puts, signals, gets between the
    ranks of one host (mapped and cma) and across hosts (UCX messages over TCP), checked exactly."""
    rc, out, elapsed = _run("--hosts", "2", "--job", "tests/python/window_job.py")
    assert rc == 0, f"the window job exited {rc} after {elapsed:.0f}s:\n{out[-12000:]}"
    ok = re.findall(r"^multihost ok rank (\d+) host (\S+) paths (.*)$", out, re.M)
    assert sorted(int(r) for r, _, _ in ok) == [0, 1, 2, 3], out[-6000:]
    paths = " ".join(p for _, _, p in ok)
    assert all(p in paths for p in ("mapped", "cma", "messages")), paths


@pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("failure injection"))
@pytest.mark.timeout(HARD_TIMEOUT_S + 20)
def test_a_death_on_one_host_fails_every_other_hosts_collective():
    """Rank 5 (host 2, not its leader) is SIGKILLed. The ranks of hosts 0 and 1 never read
    its record (they watch their host and, as leaders, the next two leaders): they must fail
    their all_reduce naming it within seconds, the leaders through rank 4's notice over UCX
    across the namespaces, their hosts' other ranks through their leader."""
    rc, out, elapsed = _run("--hosts", "3", "--kill")
    assert rc == 0 and "--kill PASSED (3 hosts" in out, f"exit {rc} after {elapsed:.0f}s:\n{out[-12000:]}"
    lines = dict(
        (int(m.group(1)), m.group(2))
        for m in re.finditer(r"^multihost kill ok rank (\d+) \(\S+\): (.*)$", out, re.M)
    )
    assert sorted(lines) == [0, 1, 2, 3], out[-8000:]
    for r, msg in lines.items():
        assert "rank 5 died" in msg, (r, msg)
    for leader in (0, 2):
        # Nobody on hosts 0 and 1 watches rank 5, so only rank 4's notice can have told
        # them. The notice fails the leader's Work and also tells its host's channel, whose
        # own check may end the shared-memory part first (a race: about 1 run in 10); both
        # errors say why the rank died as this process heard it, "told by rank 4".
        assert "told by rank 4" in lines[leader], (leader, lines[leader])


@pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("failure injection"))
@pytest.mark.timeout(HARD_TIMEOUT_S + 20)
def test_multihost_job_fails_when_a_host_is_cut_off():
    """Host 1's link goes down after the first collective: every rank must fail with a
    backend error (commux's group timeout, 20 s here, or its peer failure detection),
    torchrun must exit non-zero on every host, all well before the script's hard limit."""
    rc, out, elapsed = _run("--break")
    assert rc != 0, f"the job passed although host 1 was cut off:\n{out[-8000:]}"
    assert "--break: eth0 of host 1 is down" in out, f"the link was never cut:\n{out[-8000:]}"
    for r in range(4):
        assert f"rank {r} on cmx-host{r // 2}: link cut, continuing" in out, (
            f"rank {r} failed before the link was cut, so the failure proves nothing:\n"
            f"{out[-12000:]}"
        )
    exits = re.findall(r"^multihost_check: host (\d) \S+: torchrun exit (\d+)", out, re.M)
    assert len(exits) == 2, f"no exit status for every host:\n{out[-8000:]}"
    for host, code in exits:
        assert code not in ("0", "124", "137"), (
            f"host {host}: torchrun exit {code} (0 = passed, 124/137 = killed by the hard "
            f"timeout, i.e. a hang):\n{out[-12000:]}"
        )
    assert "DistBackendError" in out, f"the ranks did not fail with a backend error:\n{out[-12000:]}"
    assert "multihost ok rank" not in out, out[-8000:]
    assert elapsed < TORCHRUN_TIMEOUT_S, f"took {elapsed:.0f}s"


@pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("reconfigure"))
@pytest.mark.timeout(HARD_TIMEOUT_S + 20)
def test_a_ddp_job_survives_a_death_on_the_other_host(monkeypatch):
    """tests/python/survive_job.py on 2 hosts x 2 ranks (no torchrun: one copy per rank): a
    rank of host 1 is killed at a random step, the survivors reconfigure across the hosts
    and go on, a replacement started on host 0 joins and is healed; every process checks
    its parameters against a serial run of the same memberships."""
    import sys

    import torch.distributed as dist

    if not hasattr(dist, "_reconfigure"):
        pytest.skip("this torch has no reconfigure API (torch >= 2.15)")
    import random

    seed = os.environ.get("COMMUX_SURVIVE_SEED") or str(random.randrange(1 << 30))
    monkeypatch.setenv("COMMUX_SURVIVE_SEED", seed)  # every rank draws the same schedule
    rc, out, elapsed = _run("--hosts", "2", "--exec", f"{sys.executable} tests/python/survive_job.py")
    assert rc == 0, f"the survive job (seed {seed}) exited {rc} after {elapsed:.0f}s:\n{out[-12000:]}"
    # A rank says so only once its own check against the serial run passed.
    ok = re.findall(r"^multihost ok rank (\d+) \(exec\)", out, re.M)
    assert sorted(int(r) for r in ok) == [0, 1, 2, 3], out[-6000:]
