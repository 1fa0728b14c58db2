"""torchrun --max-restarts brings a job back on `ucx` after a rank was SIGKILLed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness import free_port, is_ucx, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("torchrun restart"))

HERE = os.path.dirname(os.path.abspath(__file__))


def test_torchrun_restart_after_a_killed_rank():
    cmd = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes=1", "--nproc-per-node=2", "--max-restarts=1",
        "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--monitor-interval=0.5",
        os.path.join(HERE, "torchrun_restart_job.py"),
    ]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, f"torchrun exited {proc.returncode}:\n{out[-6000:]}"
    assert "attempt 1 rank 0: PASS" in out and "attempt 1 rank 1: PASS" in out, out[-6000:]
