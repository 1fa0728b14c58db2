#!/usr/bin/env bash
# Compiles every commux source against the headers of another torch release, without
# installing it: `scripts/check_torch_headers.sh 2.5.1`. Catches methods that a release
# lacks or renamed (torch's Backend API moves between releases). Syntax only: nothing is
# linked or run. Downloads the torch wheel (~1 GB) once into ${COMMUX_TORCH_CACHE:-~/.cache/commux}.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:?usage: $0 TORCH_VERSION (e.g. 2.5.1)}
PY=${PYTHON:-python3}
cache=${COMMUX_TORCH_CACHE:-$HOME/.cache/commux}/torch-$version
if [ ! -d "$cache/torch/include" ]; then
  mkdir -p "$cache"
  "$PY" -m pip download --disable-pip-version-check -q --no-deps -d "$cache" "torch==$version"
  (cd "$cache" && "$PY" -m zipfile -e torch-*.whl . >/dev/null 2>&1 || true)
  # Only the headers are needed.
  find "$cache" -maxdepth 1 -name 'torch-*.whl' -delete
fi
ucx_include=$("$PY" -c "import libucx, os; print(os.path.join(os.path.dirname(libucx.__file__), 'include'))")
py_include=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
# The oldest torch headers accept C++17; the newest need C++20, which the build uses.
std=c++17
failed=0
for f in src/c10d/*.cpp src/engine/*.cpp src/group/*.cpp src/python/bindings.cpp src/cuda/cuda_stub.cpp; do
  if ! g++ -std=$std -fsyntax-only -D_GLIBCXX_USE_CXX11_ABI=1 -DCOMMUX_VERSION='"check"' \
      -I"$cache/torch/include" -I"$cache/torch/include/torch/csrc/api/include" \
      -I"$ucx_include" -I"$py_include" -Isrc -Iinclude "$f"; then
    echo "FAILED: $f against torch $version" >&2
    failed=1
  fi
done
[ $failed -eq 0 ] && echo "commux sources compile against torch $version headers"
exit $failed
