#!/usr/bin/env bash
# Every test: install commux, then the C++ unit tests (ctest) and the multi-process Python
# tests (pytest, real UCX on localhost). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
PY=${PYTHON:-python3}
echo "== C++ unit tests"
ctest --test-dir build/wheel --output-on-failure --timeout 120
echo "== Python tests"
exec "$PY" -m pytest tests/python -q "$@"
