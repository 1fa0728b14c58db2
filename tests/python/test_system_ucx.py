"""The system-UCX build option (COMMUX_UCX_PROVIDER=system) builds, loads that UCX rather
than the wheel's, and passes a 2-rank exchange. The same build leaves the CUDA unit out
(COMMUX_CUDA=OFF, as with a CPU-only torch): it must load and run on CPU tensors alone. Uses pkg-config's `ucx` (Debian's
libucx-dev, UCX 1.13: the oldest version commux supports)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _system_ucx_version():
    if shutil.which("pkg-config") is None:
        return None
    r = subprocess.run(["pkg-config", "--modversion", "ucx"], capture_output=True, text=True)
    return r.stdout.strip() if r.returncode == 0 else None


pytestmark = [
    pytest.mark.ucx_only,
    pytest.mark.skipif(_system_ucx_version() is None,
                       reason="no system UCX found by pkg-config (apt-get install libucx-dev)"),
    pytest.mark.timeout(1500),
]


@pytest.mark.long  # a second full build of libcommux (2-5 min on 2 cores)
def test_build_and_run_against_system_ucx(tmp_path):
    build = REPO / "build" / "system-ucx"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    # Paths relative to the checkout in ccache's keys: a fresh clone reuses earlier objects.
    cache = dict(os.environ, CCACHE_BASEDIR=str(REPO), CCACHE_NOHASHDIR="1")
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), *generator,
                    "-DCOMMUX_UCX_PROVIDER=system", f"-DPython3_EXECUTABLE={sys.executable}",
                    # Also the build a CPU-only torch gets: the CUDA stub instead of the unit.
                    "-DCOMMUX_CUDA=OFF"],
                   check=True, capture_output=True, timeout=300, env=cache)
    subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, timeout=1200, env=cache)

    stage = tmp_path / "commux"
    shutil.copytree(REPO / "python" / "commux", stage)
    for built in list(build.glob("_C*.so")) + [build / "_build_config.py"]:
        shutil.copy(built, stage)

    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "python" / "system_ucx_job.py"), "--no-cuda"],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    assert words[0] == "OK", r.stdout
    assert words[1] == _system_ucx_version(), f"loaded UCX {words[1]}, system has {_system_ucx_version()}"
    assert "libucx/lib" not in words[2], f"the wheel's UCX was loaded: {words[2]}"


def _system_ucx_libdir():
    r = subprocess.run(["pkg-config", "--variable=libdir", "ucx"], capture_output=True, text=True)
    return r.stdout.strip()


def test_wheel_built_commux_runs_on_the_sites_ucx(tmp_path):
    """COMMUX_UCX_HOME makes the installed (wheel-built) commux load another UCX at run time,
    here Debian's 1.13, the oldest supported; commux.info reports which one was loaded."""
    env = dict(os.environ, COMMUX_UCX_HOME=_system_ucx_libdir())
    r = subprocess.run([sys.executable, str(REPO / "tests" / "python" / "system_ucx_job.py")],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    assert words[0] == "OK", r.stdout
    assert words[1] == _system_ucx_version(), f"loaded UCX {words[1]}, COMMUX_UCX_HOME has {_system_ucx_version()}"
    assert words[2].startswith(_system_ucx_libdir()), f"loaded {words[2]}"
    info = subprocess.run([sys.executable, "-m", "commux.info"], env=env, capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert info.returncode == 0, info.stderr
    assert "UCX:" in info.stdout and _system_ucx_version() in info.stdout, info.stdout
    assert "COMMUX_UCX_HOME" in info.stdout, info.stdout


def test_ucx_home_without_ucx_is_a_clear_error(tmp_path):
    env = dict(os.environ, COMMUX_UCX_HOME=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", "import commux; commux.load_extension()"], env=env,
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode != 0 and "no libucp.so.0" in r.stderr, r.stderr
