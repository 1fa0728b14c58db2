#!/usr/bin/env bash
# Fetches, on a machine with PyPI access, the wheels scripts/gpu_check.sh installs on an
# offline GPU machine (into gpu-wheels/, git-ignored; pass it to the device run as a
# carried path). The GPU machine's torch decides the UCX wheel: CUDA 13 -> libucx-cu13,
# CUDA 12 -> libucx-cu12 (COMMUX_UCX_WHEEL overrides); both are fetched by default.
#   PYTHON=...   interpreter whose version/ABI the wheels are for (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
mkdir -p gpu-wheels
"$PY" -m pip download --disable-pip-version-check -q -d gpu-wheels --only-binary=:all: \
  ${COMMUX_UCX_WHEEL:-libucx-cu13 libucx-cu12} scikit-build-core pybind11 pytest pytest-timeout \
  cmake ninja
ls -la gpu-wheels
du -sh gpu-wheels
