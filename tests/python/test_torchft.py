"""torchft on commux (commux.torchft.ProcessGroupUCX): a bounded subset of torchft's own tests,
from its wheel, with commux in place of gloo (tests/torchft/commux_swap.py): the API test,
the timeout test, functional collectives, every multi-group collective (with a rank that
shuts its group down and the others' next collective failing at once), DDP healthy and
DDP recovery; plus the collectives torchft's gloo group cannot run. The full run, beside
gloo's, is scripts/torchft_tests.sh."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from harness import is_ucx, skip_reason_unless_ucx

torchft = pytest.importorskip("torchft", reason="torchft is not installed (scripts/install.sh --torchft)")
pytest.importorskip("parameterized", reason="torchft's tests import parameterized")

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("commux.torchft"))

REPO = Path(__file__).resolve().parents[2]
FT = Path(torchft.__file__).parent

SUBSET = [
    (FT / "process_group_test.py",
     "test_gloo_apis or test_gloo_timeout or test_functional_collectives or NormalGlooMultiPgTest"),
    (FT / "manager_integ_test.py", "test_ddp_healthy or test_ddp_recovery"),
    (REPO / "tests" / "torchft" / "test_commux_extra.py", ""),
]


@pytest.mark.parametrize("path,select", SUBSET, ids=["process_group", "manager_ddp", "extra"])
def test_torchfts_own_tests_pass_on_commux(path, select, tmp_path):
    cmd = [sys.executable, "-m", "pytest", "-p", "commux_swap", "-p", "no:cacheprovider", "-q",
           "--timeout", "120", "-rA", str(path)]
    if select:
        cmd += ["-k", select]
    env = dict(os.environ, PYTHONPATH=str(REPO / "tests" / "torchft"), COMMUX_TORCHFT_SWAP="1")
    # From a scratch folder: torchft's tests write where they run.
    done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    tail = done.stdout[-6000:] + done.stderr[-2000:]
    assert done.returncode == 0, tail
    summary = done.stdout.strip().splitlines()[-1]
    passed = int(re.search(r"(\d+) passed", summary).group(1))
    # Each part runs every test it selects: torchft's 17 + 4 (DDP) + commux's 6.
    assert passed >= {"process_group_test.py": 17, "manager_integ_test.py": 4}.get(path.name, 6), tail
    assert "failed" not in summary and "error" not in summary, tail
