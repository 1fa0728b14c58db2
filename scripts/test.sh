#!/usr/bin/env bash
# Every test: install commux, then the C++ tests (ctest), the same C++ tests under
# AddressSanitizer+UBSan and ThreadSanitizer, C++ consumers of the installed package
# (find_package, FetchContent, a plain install prefix: test_commux and the halo example on
# 2 and 3 ranks), the binary wheel in a virtualenv without a compiler, and the
# multi-process Python tests (pytest, real UCX on localhost). Extra arguments go to pytest.
# COMMUX_SANITIZERS=0 skips the sanitizer builds and COMMUX_PACKAGING=0 the consumer and
# wheel checks (a quicker local run; CI runs everything).
set -euo pipefail
cd "$(dirname "$0")/.."
# --mpi: Open MPI and mpi4py, for the benchmark test that puts MPI beside commux.
scripts/install.sh --mpi
PY=${PYTHON:-python3}
echo "== C++ tests"
ctest --test-dir build/wheel --output-on-failure --timeout 120
if [ "${COMMUX_SANITIZERS:-1}" != 0 ]; then
  scripts/sanitize.sh address thread
fi
if [ "${COMMUX_PACKAGING:-1}" != 0 ]; then
  echo "== C++ consumers"
  scripts/test_consumer.sh
  echo "== the binary wheel, no compiler"
  scripts/test_wheel.sh
fi
echo "== Python tests"
exec "$PY" -m pytest tests/python -q "$@"
