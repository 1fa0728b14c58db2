#!/usr/bin/env bash
# Prepares, on a machine with PyPI access, what scripts/gpu_check.sh installs on an offline
# GPU machine, in gpu-wheels/ (git-ignored; carry it to the device run). It holds:
#  - the UCX wheel matching this torch's CUDA major (COMMUX_UCX_WHEEL overrides),
#  - the build and test tools (scikit-build-core, pytest, pytest-timeout),
#  - a commux wheel built here, for a GPU machine without a compiler (it needs the same
#    torch version as this one),
#  - with COMMUX_GPU_BUILD_TOOLS=1 also cmake and ninja (30 MB more).
# The device run carries at most 64 MiB in all: the UCX wheel alone is ~43 MB.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
out=gpu-wheels
rm -rf "$out"
mkdir -p "$out"
major=$("$PY" -c "import torch; v = torch.version.cuda; print(v.split('.')[0] if v else '13')")
extra=()
[ "${COMMUX_GPU_BUILD_TOOLS:-0}" = 1 ] && extra=(cmake ninja)
"$PY" -m pip download --disable-pip-version-check -q -d "$out" --only-binary=:all: \
  "${COMMUX_UCX_WHEEL:-libucx-cu$major}" scikit-build-core pytest pytest-timeout "${extra[@]}"
# Release build without debug info keeps the wheel small.
"$PY" -m pip wheel --disable-pip-version-check -q --no-build-isolation --no-deps -w "$out" \
  -C cmake.build-type=Release -C build-dir=build/gpu-wheel .
"$PY" -c "import torch; print(torch.__version__)" > "$out/built-against-torch.txt"
ls -la "$out"
du -sh "$out"
