"""One process of the upstream-suite driver: PyTorch's ``_DistTestBase`` for one mode.

This module is run by ``run_suite.py`` as a separate interpreter, once to list
the tests (``list``) and once per test (``run``).  The rank processes that
the upstream ``MultiProcessTestCase`` spawns (multiprocessing *spawn*) import
this file again as ``__mp_main__``, so everything that must hold in the ranks
too (environment, feature-set patches, backend registration) happens at
module level, driven only by environment variables that the ranks inherit.

Modes (``COMMUX_SUITE_MODE``):

``gloo``, ``ucx``
    PyTorch's gating unchanged: ``BACKEND`` is the backend name.
``ucx+features``
    As ``ucx``, but before ``distributed_test`` is imported "ucx" is added to
    ``DistTestCases.backend_feature`` sets ``ddp``, ``subgroup``, ``gpu`` and
    ``plugin`` (the data-driven gates; tests that need a real GPU still skip
    at run time through ``skip_if_no_gpu``).  Tests gated by a literal
    backend-name comparison (``BACKEND != "gloo"``, ``{"gloo"}``) still skip.
``ucx+gloo-gates``
    ``distributed_test`` is imported with ``BACKEND=gloo``, so every skip
    decorator is evaluated exactly as for gloo; then the module's ``BACKEND``
    and ``os.environ["BACKEND"]`` are set to ``ucx`` before any test runs, so
    every process group uses ucx; the module's ``BACKEND`` also compares equal
    to "gloo", so test bodies that branch on ``BACKEND == "gloo"`` take gloo's
    (CPU) path.  This runs ucx through exactly the tests gloo runs.
``ucx+mpi-gates``
    The same with ``mpi`` in place of ``gloo``: upstream runs its CPU
    all_to_all / all_to_all_single tests only for ``BACKEND == "mpi"``
    (gloo skips them too); tests that need MPI itself
    (``require_backend_is_available``) still skip.

Environment read here (set by run_suite.py): ``COMMUX_SUITE_MODE``,
``WORLD_SIZE``, ``TEMP_DIR``, ``INIT_METHOD``, ``COMMUX_SUITE_START``
(``spawn``, the default as upstream, or ``fork``).

Usage (normally only through run_suite.py)::

    COMMUX_SUITE_MODE=ucx WORLD_SIZE=2 TEMP_DIR=/tmp/x python3 suite_child.py list OUT.json
    COMMUX_SUITE_MODE=ucx WORLD_SIZE=2 TEMP_DIR=/tmp/x python3 suite_child.py run TEST OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import traceback
import unittest

MODES = ("gloo", "ucx", "ucx+features", "ucx+gloo-gates", "ucx+mpi-gates")
MODE = os.environ.get("COMMUX_SUITE_MODE", "")
if MODE not in MODES:
    raise SystemExit(f"COMMUX_SUITE_MODE must be one of {MODES}, got {MODE!r}")

START_METHOD = os.environ.get("COMMUX_SUITE_START", "spawn")
REAL_BACKEND = "gloo" if MODE == "gloo" else "ucx"
# The backend name the skip decorators see when distributed_test is imported.
DECORATE_AS = {"gloo": "gloo", "ucx+gloo-gates": "gloo", "ucx+mpi-gates": "mpi"}.get(MODE, "ucx")
FEATURE_SETS = ("ddp", "subgroup", "gpu", "plugin")

os.environ["BACKEND"] = DECORATE_AS
os.environ.setdefault("WORLD_SIZE", "2")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

if REAL_BACKEND == "ucx":
    # The torch.backends entry point normally autoloads commux on `import
    # torch`; register explicitly as well (idempotent) so that a missing
    # entry point shows up as a clear error here.
    import commux  # noqa: E402

    commux.register()
    if "ucx" not in dist.Backend.backend_list:
        raise SystemExit("commux.register() did not register backend 'ucx'")

from torch.testing._internal import common_distributed  # noqa: E402

if MODE == "ucx+features":
    for _name in FEATURE_SETS:
        common_distributed.DistTestCases.backend_feature[_name].add("ucx")

from torch.testing._internal.distributed import distributed_test as _dt  # noqa: E402



class _UcxInPlaceOf(str):
    """The string "ucx" that also compares equal to ``self.alias`` ("gloo" or "mpi").

    Used as ``distributed_test.BACKEND`` in modes ucx+gloo-gates/ucx+mpi-gates
    so that the few test bodies that branch on ``BACKEND == "gloo"`` at run time (e.g.
    ``_test_accumulate_gradients_no_sync``: "if BACKEND == 'mpi' or BACKEND ==
    'gloo': <build the CPU model>") take gloo's CPU path.  Everything handed
    to torch is the plain name: ``dist.Backend(BACKEND)`` upper-cases it to
    "UCX", and set membership uses the hash of "ucx".
    """

    alias = ""

    def __eq__(self, other):
        return str.__eq__(self, other) or (isinstance(other, str) and str.__eq__(other, self.alias))

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = str.__hash__


if MODE in ("ucx+gloo-gates", "ucx+mpi-gates"):
    # Decorators were evaluated as for gloo (mpi); everything from here on is ucx.
    _dt.BACKEND = _UcxInPlaceOf(REAL_BACKEND)
    _dt.BACKEND.alias = DECORATE_AS
    os.environ["BACKEND"] = REAL_BACKEND

torch.backends.cuda.matmul.allow_tf32 = False


class TestDistBackendWithSpawn(_dt.TestDistBackend, _dt.DistributedTest._DistTestBase):
    """Same composition as PyTorch's test/distributed/test_distributed_spawn.py."""

    def setUp(self):
        super().setUp()
        if START_METHOD == "fork":
            # Not what PyTorch CI does (it spawns); much faster because the
            # ranks inherit the imported modules instead of importing again.
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()
        torch.backends.cudnn.flags(enabled=True, allow_tf32=False).__enter__()


def _static_skip(name: str) -> str | None:
    fn = getattr(TestDistBackendWithSpawn, name)
    if getattr(fn, "__unittest_skip__", False):
        return str(getattr(fn, "__unittest_skip_why__", "")) or "skipped"
    if getattr(TestDistBackendWithSpawn, "__unittest_skip__", False):
        return str(getattr(TestDistBackendWithSpawn, "__unittest_skip_why__", ""))
    return None


def list_tests() -> list[dict]:
    names = unittest.TestLoader().getTestCaseNames(TestDistBackendWithSpawn)
    return [{"name": n, "static_skip": _static_skip(n)} for n in names]


class _Result(unittest.TestResult):
    def __init__(self):
        super().__init__()
        self.outcome = None  # (status, detail)

    def addSuccess(self, test):
        self.outcome = ("PASS", "")

    def addFailure(self, test, err):
        self.outcome = ("FAIL", self._exc_info_to_string(err, test))

    def addError(self, test, err):
        self.outcome = ("FAIL", self._exc_info_to_string(err, test))

    def addSkip(self, test, reason):
        self.outcome = ("SKIP", str(reason))

    def addExpectedFailure(self, test, err):
        self.outcome = ("PASS", "expected failure (unittest.expectedFailure)")

    def addUnexpectedSuccess(self, test):
        self.outcome = ("FAIL", "unexpected success of an expectedFailure test")


def run_one(name: str) -> dict:
    suite = unittest.TestSuite([TestDistBackendWithSpawn(name)])
    result = _Result()
    suite.run(result)
    status, detail = result.outcome or ("ERROR", "unittest reported no outcome")
    return {"status": status, "detail": detail}


def _write(path: str, obj) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    if len(argv) == 2 and argv[0] == "list":
        _write(argv[1], {"mode": MODE, "tests": list_tests()})
        return 0
    if len(argv) == 3 and argv[0] == "run":
        name, out = argv[1], argv[2]
        try:
            res = run_one(name)
        except Exception:
            res = {"status": "ERROR", "detail": traceback.format_exc()}
        _write(out, res)
        sys.stdout.flush()
        sys.stderr.flush()
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
