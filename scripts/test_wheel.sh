#!/usr/bin/env bash
# The binary wheel on a machine without a compiler: builds it (scripts/build_wheel.sh),
# installs it into a fresh virtualenv (which sees this Python's torch and UCX wheel, as a
# cluster's shared environment would, but gets its own commux), and runs the p2p and
# collective tests with nothing but the virtualenv on PATH: no compiler, no cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
wheel=$(scripts/build_wheel.sh | tail -1)
venv=build/wheel-venv
rm -rf "$venv"
"$PY" -m venv --system-site-packages "$venv"
# --force-reinstall: this Python may have commux installed already (scripts/install.sh);
# the virtualenv must get the wheel. Its requirements (the pinned torch, the UCX wheel,
# numpy) come from this Python's site-packages: check each one is met.
"$venv/bin/python" -m pip install --disable-pip-version-check -q --force-reinstall --no-deps "$wheel"
"$venv/bin/python" - <<'PY'
import importlib.metadata as md
from packaging.requirements import Requirement
reqs = [Requirement(r) for r in md.requires("commux") if "extra ==" not in r]
for r in reqs:
    have = md.version(r.name)
    assert r.specifier.contains(have, prereleases=True), f"commux needs {r}, found {r.name} {have}"
print("the wheel requires:", ", ".join(map(str, reqs)), "(all met)")
PY
cd tests/python  # not the repository root: `import commux` must not find python/commux
PATH="$PWD/../../$venv/bin" "$PWD/../../$venv/bin/python" - <<'PY'
import os, shutil, sys
import commux
assert shutil.which("g++") is None and shutil.which("c++") is None and shutil.which("cmake") is None, os.environ["PATH"]
where = os.path.dirname(commux.__file__)
assert where.startswith(sys.prefix), f"commux came from {where}, not the virtualenv {sys.prefix}"
print("commux", commux.__version__, "from", where, "; no compiler on PATH")
PY
# A fresh install imports without a warning (torch warns without numpy, for one).
noise=$(PATH="$PWD/../../$venv/bin" "$PWD/../../$venv/bin/python" -c "import torch.distributed, commux; commux.load_extension()" 2>&1)
[ -z "$noise" ] || { echo "importing commux printed: $noise" >&2; exit 1; }
# The point-to-point suite and every collective over UCX and over shared memory, once each
# (the main run has the rest at every size).
PATH="$PWD/../../$venv/bin" "$(command -v timeout)" 1200 "$PWD/../../$venv/bin/python" -m pytest -q -p no:cacheprovider \
  test_p2p.py "test_collectives.py::test_collectives[3-shm0]" "test_collectives.py::test_collectives[2-shm1]"
