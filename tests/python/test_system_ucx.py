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


def test_build_and_run_against_system_ucx(tmp_path):
    build = REPO / "build" / "system-ucx"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", "-S", str(REPO), "-B", str(build), *generator,
                    "-DCOMMUX_UCX_PROVIDER=system", f"-DPython3_EXECUTABLE={sys.executable}",
                    # Also the build a CPU-only torch gets: the CUDA stub instead of the unit.
                    "-DCOMMUX_CUDA=OFF"],
                   check=True, capture_output=True, timeout=300)
    subprocess.run(["cmake", "--build", str(build), "-j2"], check=True, timeout=1200)

    stage = tmp_path / "commux"
    shutil.copytree(REPO / "python" / "commux", stage)
    for built in list(build.glob("_C*.so")) + [build / "_build_config.py"]:
        shutil.copy(built, stage)

    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = subprocess.run([sys.executable, str(REPO / "tests" / "python" / "system_ucx_job.py")],
                       env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    words = r.stdout.split()
    assert words[0] == "OK", r.stdout
    assert words[1] == _system_ucx_version(), f"loaded UCX {words[1]}, system has {_system_ucx_version()}"
    assert "libucx/lib" not in words[2], f"the wheel's UCX was loaded: {words[2]}"
