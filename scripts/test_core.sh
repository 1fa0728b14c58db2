#!/usr/bin/env bash
# The torch-free core, built and tested where torch cannot be found: CMake and the compiler
# from the system, an environment with no Python package path, and COMMUX_CORE_ONLY, which
# looks for neither torch, UCX nor Python. A torch, c10 or pybind11 include in the core fails
# this build.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build/core-only
env -i PATH=/usr/bin:/bin HOME="$HOME" \
  cmake -S . -B "$build" -DCOMMUX_CORE_ONLY=ON -DCOMMUX_BUILD_TESTS=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
env -i PATH=/usr/bin:/bin HOME="$HOME" cmake --build "$build" -j2
python3 scripts/check_core_includes.py
env -i PATH=/usr/bin:/bin HOME="$HOME" ctest --test-dir "$build" --output-on-failure --timeout 120
