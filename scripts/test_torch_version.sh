#!/usr/bin/env bash
# Builds commux against another torch release and runs the core tests on it, in a
# virtualenv of its own (build/torch-<version>/venv; the build in build/torch-<version>/build):
#   scripts/test_torch_version.sh 2.5.1      (the oldest supported release)
# Downloads that torch and its CUDA libraries from PyPI once (~3 GB). Results:
# docs/performance-log.md ("Torch versions").
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
version=${1:?usage: $0 TORCH_VERSION (e.g. 2.5.1)}
PY=${PYTHON:-python3}
root=build/torch-$version
venv=$root/venv
[ -x "$venv/bin/python" ] || "$PY" -m venv "$venv"
V="$venv/bin/python"
pip_install() { "$V" -m pip install --disable-pip-version-check -q "$@"; }
"$V" -c "import torch" 2>/dev/null || pip_install "torch==$version"
major=$("$V" -c "import torch; v = torch.version.cuda; print(v.split('.')[0] if v else '12')")
"$V" -c "import libucx" 2>/dev/null || pip_install "libucx-cu$major"
"$V" -c "import scikit_build_core, pytest, pytest_timeout, expecttest, numpy, ninja" 2>/dev/null ||
  pip_install "scikit-build-core>=0.10" pytest pytest-timeout expecttest numpy ninja
echo "== building commux against torch $("$V" -c 'import torch; print(torch.__version__)')"
"$V" -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps \
  -C build-dir="$root/build" .
cd tests/python  # import the installed commux, not python/commux
echo "== core tests on torch $version"
timeout 1800 "$PWD/../../$V" -m pytest -q -p no:cacheprovider test_p2p.py test_collectives.py \
  test_work.py test_errors.py "${@:2}"
