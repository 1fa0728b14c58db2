"""``python3 -m commux.info``: the report, the CMake prefix, and the RDMA warning."""

import os
import subprocess
import sys

import commux.info as info


def test_cmake_prefix_holds_the_package_config():
    r = subprocess.run([sys.executable, "-m", "commux.info", "--cmake-prefix"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    prefix = r.stdout.strip()
    for name in ("commuxConfig.cmake", "commuxConfigVersion.cmake", "commuxTargets.cmake"):
        assert os.path.isfile(os.path.join(prefix, "lib", "cmake", "commux", name)), name
    assert os.path.isfile(os.path.join(prefix, "include", "commux", "process_group_ucx.hpp"))


def test_report_names_the_loaded_ucx():
    r = subprocess.run([sys.executable, "-m", "commux.info"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for key in ("UCX:", "UCX loaded from:", "UCX chosen by:", "UCX transports:"):
        assert key in r.stdout, r.stdout


def test_report_shows_the_job_hints_given_to_ucx():
    """WORLD_SIZE and LOCAL_WORLD_SIZE (as torchrun sets them, and commux.launcher under
    mpirun/srun) become UCX's estimated_num_eps and estimated_num_ppn."""
    env = dict(os.environ, WORLD_SIZE="8", LOCAL_WORLD_SIZE="4", COMMUX_LAUNCHER="0")
    r = subprocess.run([sys.executable, "-m", "commux.info"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "estimated_num_eps=8, estimated_num_ppn=4" in r.stdout, r.stdout
    for name in ("WORLD_SIZE", "LOCAL_WORLD_SIZE"):
        env.pop(name)
    r = subprocess.run([sys.executable, "-m", "commux.info"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert "estimated_num_eps=not passed, estimated_num_ppn=not passed" in r.stdout, r.stdout


def test_rdma_devices_without_an_rdma_transport_are_flagged(monkeypatch):
    monkeypatch.setattr(info.os, "listdir", lambda path: ["mlx5_0"] if path == "/sys/class/infiniband" else [])
    tcp_only = ["posix/memory", "tcp/eth0"]
    warning = info.rdma_warning(tcp_only)
    assert warning and "mlx5_0" in warning and "COMMUX_UCX_HOME" in warning
    assert info.rdma_warning(tcp_only + ["rc_mlx5/mlx5_0:1"]) is None
    monkeypatch.setattr(info.os, "listdir", lambda path: (_ for _ in ()).throw(FileNotFoundError(path)))
    assert info.rdma_warning(tcp_only) is None
