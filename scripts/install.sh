#!/usr/bin/env bash
# Installs what commux needs and builds + installs commux into the Python environment that
# `python3` runs. Idempotent: a second run downloads nothing and rebuilds only what changed.
#   PYTHON=...          the interpreter to install into (default: python3)
#   COMMUX_UCX_WHEEL=.. the UCX wheel (default: libucx-cuNN matching torch's CUDA major)
#   --mpi               also Open MPI (Debian's openmpi-bin, libopenmpi-dev) and mpi4py, for
#                       `python3 -m commux.bench --mpi` (commux itself never uses MPI)
#   --torchft           also torchft (PyPI, optional for commux) and what its own tests
#                       import, for tests/torchft (commux.torchft)
set -euo pipefail
with_mpi=0
with_torchft=0
for arg in "$@"; do
  case "$arg" in
    --mpi) with_mpi=1 ;;
    --torchft) with_torchft=1 ;;
    *) echo "usage: scripts/install.sh [--mpi] [--torchft]" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
# ccache hits across clones of the repository (CI builds in a fresh clone).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"  # -g would put the folder in the hash
PY=${PYTHON:-python3}

# Build tools from Debian's packages, only those missing.
missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
command -v cc >/dev/null || missing+=(gcc)
# The Rust crate's tests (bindings/rust): the machine's rustup toolchain, else Debian's.
command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || missing+=(cargo)
command -v ccache >/dev/null || missing+=(ccache)
[ -f /usr/include/gtest/gtest.h ] || missing+=(libgtest-dev)
# Debian's UCX (1.13) backs the test of the system-UCX build option.
command -v pkg-config >/dev/null || missing+=(pkg-config)
[ -f /usr/include/ucp/api/ucp.h ] || missing+=(libucx-dev)
if [ "$with_mpi" = 1 ]; then
  command -v mpirun >/dev/null || missing+=(openmpi-bin)
  command -v mpicc >/dev/null || missing+=(libopenmpi-dev)
fi
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "commux: please install these Debian packages first: ${missing[*]}" >&2
    exit 1
  fi
  echo "commux: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Python packages, only those missing. torch first: the UCX wheel must match its CUDA.
pip_install() { "$PY" -m pip install --disable-pip-version-check -q "$@"; }
"$PY" -c "import torch" 2>/dev/null || pip_install "torch>=2.5"
if [ -z "${COMMUX_UCX_WHEEL:-}" ]; then
  major=$("$PY" -c "import torch; v = torch.version.cuda; print(v.split('.')[0] if v else '13')")
  COMMUX_UCX_WHEEL="libucx-cu${major}"
fi
"$PY" -c "import libucx" 2>/dev/null || pip_install "$COMMUX_UCX_WHEEL"
need=()
"$PY" -c "import scikit_build_core" 2>/dev/null || need+=("scikit-build-core>=0.10")
"$PY" -c "import pytest, pytest_timeout" 2>/dev/null || need+=(pytest pytest-timeout)
# torch's own distributed test utilities (tests/upstream) import expecttest.
"$PY" -c "import expecttest" 2>/dev/null || need+=(expecttest)
"$PY" -c "import numpy" 2>/dev/null || need+=(numpy)
# python3 -m commux.bench draws its plot with matplotlib.
"$PY" -c "import matplotlib" 2>/dev/null || need+=(matplotlib)
command -v ninja >/dev/null || "$PY" -c "import ninja" 2>/dev/null || need+=(ninja)
[ ${#need[@]} -eq 0 ] || pip_install "${need[@]}"
# mpi4py builds against the Open MPI installed above.
if [ "$with_mpi" = 1 ]; then
  "$PY" -c "import mpi4py" 2>/dev/null || pip_install mpi4py
fi
# torchft without its dependencies (they would be free to move torch), then those it
# imports at run time, and what its tests import.
if [ "$with_torchft" = 1 ]; then
  "$PY" -c "import torchft" 2>/dev/null || {
    pip_install --no-deps "torchft==0.2.0"
    pip_install opentelemetry-api opentelemetry-sdk opentelemetry-exporter-otlp-proto-http
  }
  "$PY" -c "import parameterized" 2>/dev/null || pip_install parameterized
fi

# Build (incrementally, in build/wheel) and install. The C++ unit tests build alongside.
echo "commux: building and installing into $("$PY" -c 'import sys; print(sys.prefix)')"
"$PY" -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps \
  -C cmake.define.COMMUX_BUILD_TESTS=ON -C build.verbose=false .
(cd / && "$PY" -c "import commux; print('commux', commux.__version__, 'installed at', commux.__path__[0])")
