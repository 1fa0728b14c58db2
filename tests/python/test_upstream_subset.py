"""A short CI subset of PyTorch's own distributed test suite, run on ucx.

Runs representative tests of ``torch.testing._internal.distributed.
distributed_test._DistTestBase`` (p2p, collectives, DDP basics) through the
driver in ``tests/upstream/run_suite.py``: each test in its own interpreter,
ranks started by upstream's ``MultiProcessTestCase`` (spawn), hard timeout
per test with the whole process group killed.  Every listed test must PASS
(a skip counts as a failure: the list only holds tests that run on CPU).

Upstream skips some of these for any backend not named in its feature sets
or literally "gloo"; those run in the driver's clearly labelled modes (see
``tests/upstream/suite_child.py``): ``ucx+features`` (ucx added to
``DistTestCases.backend_feature``) and ``ucx+gloo-gates`` (skip decorators
evaluated as for gloo, the test itself runs on ucx).

Deselect with ``-m "not upstream"``.  Needs ``expecttest`` (imported by
torch's test utilities).  ``COMMUX_TEST_BACKEND=gloo`` runs the same tests on
gloo.  The upstream tests run two at a time in the background (2 jobs); each
pytest test waits for its own.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import os
import sys

import pytest

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "upstream"))

import run_suite  # noqa: E402

pytestmark = [
    pytest.mark.upstream,
    pytest.mark.skipif(
        importlib.util.find_spec("expecttest") is None,
        reason="torch's test utilities need expecttest (pip install expecttest)",
    ),
]

# (upstream test, mode for ucx); a few seconds each. The plain send/recv, isend, allreduce,
# broadcast, allgather, scatter and barrier cases left CI's subset (commux's own tests cover
# them, and the whole suite runs through tests/upstream/run_suite.py, docs/testing.md).
SUBSET = [
    # point-to-point
    ("test_send_recv_any_source", "ucx"),
    ("test_send_recv_with_tag", "ucx"),
    ("test_batch_isend_irecv_gloo", "ucx+gloo-gates"),
    # collectives
    ("test_all_reduce_sum_complex", "ucx"),
    ("test_all_reduce_coalesced_sum", "ucx+gloo-gates"),
    ("test_reduce_sum", "ucx"),
    ("test_gather", "ucx"),
    ("test_all_gather_object_default_pg", "ucx+features"),
    # DDP basics
    ("test_DistributedDataParallelCPU", "ucx"),
    ("test_DistributedDataParallel_requires_grad", "ucx+features"),
]
PER_TEST_TIMEOUT_S = 120
JOBS = 2


def _mode(mode: str) -> str:
    return "gloo" if harness.BACKEND == "gloo" else mode


@pytest.fixture(scope="module")
def upstream_runs(request):
    """Start every selected subset test in a 2-worker pool; {name: future}."""
    wanted = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.module is request.module and hasattr(item, "callspec")
    }
    pool = cf.ThreadPoolExecutor(max_workers=JOBS)
    futs = {
        name: pool.submit(run_suite.run_test, name, _mode(mode), 2, PER_TEST_TIMEOUT_S)
        for name, mode in SUBSET
        if name in wanted
    }
    yield futs
    for f in futs.values():
        f.cancel()
    pool.shutdown(wait=True)


# Queueing behind the other tests counts against pytest-timeout, so each test
# gets the whole subset's worst case; run_test's own hard timeout is 120 s.
@pytest.mark.timeout(PER_TEST_TIMEOUT_S * len(SUBSET) // JOBS + 60)
@pytest.mark.parametrize("name,mode", SUBSET, ids=[n for n, _ in SUBSET])
def test_upstream(upstream_runs, name, mode):
    rec = upstream_runs[name].result()
    if rec["status"] != "PASS":
        tail = "\n".join(rec.get("tail", [])[-25:])
        pytest.fail(
            f"{name} [{_mode(mode)}]: {rec['status']} after {rec['duration']} s: {rec.get('reason', '')}\n"
            f"{rec.get('detail', '')[-3000:]}\n--- log tail ---\n{tail}",
            pytrace=False,
        )
