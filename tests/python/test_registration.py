"""Registration of the commux backend with torch.distributed, entry-point
autoloading, lazy loading of UCX, and the ``commux.info`` module.

All of this is commux-specific (the whole module is ``ucx_only``).  Fresh
interpreters (``python -c``) are used wherever the state of a process that
has not imported commux matters.
"""

import importlib.metadata as md
import json
import re

import pytest
import torch
import torch.distributed as dist

from harness import free_port, run_python, run_ranks

pytestmark = pytest.mark.ucx_only

# Entry-point groups through which torch can discover commux without an
# explicit import: "torch.backends" (called at `import torch`) and, on newer
# torch, "torch.distributed.backends" (called lazily by init_process_group).
EP_GROUPS = ("torch.backends", "torch.distributed.backends")
UCX_LIBS = ("libucp", "libuct", "libucs", "libucm")
# Autoloading of "torch.backends" entry points is on unless this is "0".
AUTOLOAD_ON = {"TORCH_DEVICE_BACKEND_AUTOLOAD": "1"}


def _check(proc, what):
    assert proc.returncode == 0, (
        f"{what}: exit status {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    )


def test_register_makes_ucx_and_commux_available():
    """``import commux; commux.register()`` adds 'ucx' and 'commux' to
    dist.Backend.backend_list, commux.preferred_backend() is 'ucx', and a
    second register() (e.g. after entry-point autoload) is harmless."""
    code = r"""
import torch.distributed as dist
import commux
commux.register()
bl = list(dist.Backend.backend_list)
assert "ucx" in bl, bl
assert "commux" in bl, bl
assert commux.preferred_backend() == "ucx", commux.preferred_backend()
assert dist.Backend("ucx") == "ucx" and dist.Backend("UCX") == "ucx"
commux.register()  # idempotent: autoload may already have called it
assert "ucx" in dist.Backend.backend_list
print("OK")
"""
    proc = run_python(code)
    _check(proc, "register()")
    assert "OK" in proc.stdout


def _alias_allreduce(rank, world_size):
    t = torch.full((16,), float(rank + 1))
    dist.all_reduce(t)
    assert torch.equal(t, torch.full((16,), 3.0))
    buf = torch.zeros(4)
    if rank == 0:
        dist.send(torch.arange(4.0), 1)
    else:
        dist.recv(buf, 0)
        assert torch.equal(buf, torch.arange(4.0))
    return dist.get_backend()


def test_init_with_commux_alias():
    """init_process_group(backend="commux") works like backend="ucx"."""
    names = run_ranks(_alias_allreduce, 2, backend="commux")
    assert all(n in ("commux", "ucx") for n in names), names


def test_entry_point_is_declared():
    """The installed commux distribution declares a torch backend entry
    point (without it the autoload tests below cannot work)."""
    found = {
        g: [f"{ep.name} = {ep.value}" for ep in md.entry_points(group=g) if "commux" in ep.value]
        for g in EP_GROUPS
    }
    assert any(found.values()), (
        f"no entry point referring to commux in groups {EP_GROUPS}; is commux pip-installed?"
    )
    print(f"commux entry points: {found}")


def test_autoload_without_import(tmp_path):
    """In a fresh interpreter that never imports commux,
    init_process_group(backend="ucx") with world size 1 works (the backend is
    found through its entry point) and the group can run collectives."""
    code = r"""
import sys, torch, torch.distributed as dist
url = sys.argv[1]
dist.init_process_group(backend="ucx", init_method=url, rank=0, world_size=1)
t = torch.arange(5.0)
dist.all_reduce(t)
assert torch.equal(t, torch.arange(5.0)), t
b = torch.arange(3)
dist.broadcast(b, 0)
dist.barrier()
print("BACKEND", dist.get_backend())
dist.destroy_process_group()
print("OK")
"""
    for url in (f"tcp://127.0.0.1:{free_port()}", "file://" + str(tmp_path / "init")):
        proc = run_python(code, env=AUTOLOAD_ON, args=[url])
        _check(proc, f"autoloaded init_process_group(backend='ucx', {url})")
        assert "BACKEND ucx" in proc.stdout and "OK" in proc.stdout, proc.stdout


def test_import_torch_does_not_load_ucx():
    """``import torch`` (which runs 'torch.backends' entry points, i.e.
    commux's autoload hook) must not load UCX: no libucp/libuct/libucs/libucm
    mapping in /proc/self/maps.  UCX is loaded only when a ucx group is
    actually created."""
    code = r"""
import json, sys
import torch
libs = sorted({l.split()[-1] for l in open("/proc/self/maps") if "libuc" in l})
print(json.dumps({"libs": libs, "commux_imported": "commux" in sys.modules}))
"""
    proc = run_python(code, env=AUTOLOAD_ON)
    _check(proc, "import torch")
    info = json.loads(proc.stdout.strip().splitlines()[-1])
    loaded = [lib for lib in info["libs"] if any(u in lib for u in UCX_LIBS)]
    assert not loaded, (
        f"`import torch` mapped UCX libraries {loaded} (commux imported: "
        f"{info['commux_imported']}); UCX must be loaded lazily"
    )


def test_import_torch_prints_no_errors():
    """With the commux entry point installed, ``import torch`` (and importing
    torch.distributed) writes nothing error-like to stderr."""
    proc = run_python("import torch, torch.distributed", env=AUTOLOAD_ON)
    _check(proc, "import torch")
    bad = [
        line
        for line in proc.stderr.splitlines()
        if re.search(r"error|traceback|exception|fail|commux|ucx", line, re.IGNORECASE)
    ]
    assert not bad, f"`import torch` printed to stderr:\n{proc.stderr}"


def test_load_extension_first_thing_in_a_fresh_interpreter():
    """``commux.load_extension()`` before anything imported torch: torch's import runs
    commux's autoload hook, which registers commux while load_extension is loading it.
    This once deadlocked on commux's own lock."""
    proc = run_python("import commux; e = commux.load_extension(); print('CUDA', e.cuda_compiled())",
                      env=AUTOLOAD_ON, timeout=60)
    _check(proc, "commux.load_extension() in a fresh interpreter")
    assert "CUDA" in proc.stdout


def test_info_module():
    """``python -m commux.info`` exits 0 and reports commux, torch, UCX, CUDA
    and transport information."""
    proc = run_python(None, args=["-m", "commux.info"], timeout=120)
    _check(proc, "python -m commux.info")
    lines = proc.stdout.splitlines()
    for kw, case_sensitive in (("commux", False), ("torch", False), ("UCX", True),
                               ("CUDA", True), ("transports", False)):
        hit = any((kw in ln) if case_sensitive else (kw.lower() in ln.lower()) for ln in lines)
        assert hit, f"`python -m commux.info` output has no line with {kw!r}:\n{proc.stdout}"
    print(proc.stdout)


def test_failing_autoload_only_warns():
    """If registering through the entry point fails, ``import torch`` must go on: the hook
    turns the failure into a RuntimeWarning instead of raising (torch would otherwise
    abort its own import)."""
    code = r"""
import warnings
import torch.distributed as dist
import commux, commux._autoload as autoload

def broken(*args, **kwargs):
    raise RuntimeError("simulated registration failure")

commux.register = broken
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    autoload.autoload()
msgs = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
assert any("simulated registration failure" in m for m in msgs), msgs
print("OK")
"""
    proc = run_python(code, env=AUTOLOAD_ON)
    _check(proc, "autoload with a failing register()")
    assert "OK" in proc.stdout, proc.stdout


_FR_PROBE = """
import torch.distributed.distributed_c10d as c10d
import commux
commux.register()
exempt = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None)
print("none" if exempt is None else ("exempt" if {"ucx", "commux"} <= exempt else "hooked"))
"""


def test_torch_flight_recorder_hook_is_opt_in():
    """torch >= 2.15 hooks a per-op flight recorder (a Python traceback per call) onto
    third-party backends; commux opts out by default and back in on request."""
    default = run_python(_FR_PROBE, env={"COMMUX_TORCH_FLIGHT_RECORDER": None})
    assert default.returncode == 0, default.stderr
    if default.stdout.strip() == "none":
        pytest.skip("this torch has no flight-recorder hook for third-party backends")
    assert default.stdout.strip() == "exempt"
    on = run_python(_FR_PROBE, env={"COMMUX_TORCH_FLIGHT_RECORDER": "1"})
    assert on.returncode == 0 and on.stdout.strip() == "hooked", (on.stdout, on.stderr)
    bad = run_python(_FR_PROBE, env={"COMMUX_TORCH_FLIGHT_RECORDER": "maybe"})
    assert bad.returncode != 0 and "COMMUX_TORCH_FLIGHT_RECORDER" in bad.stderr
