#!/usr/bin/env bash
# Every test: install commux, then the C++ tests (ctest), the torch-free core alone
# (scripts/test_core.sh), the same C++ tests under
# AddressSanitizer+UBSan and ThreadSanitizer, C++ consumers of the installed package
# (find_package, FetchContent, a plain install prefix: test_commux and the halo example on
# 2 and 3 ranks), a slice of the Python tests under ASan+UBSan (the bad-input fuzzer, window
# lifetimes), the binary wheel in a virtualenv without a compiler, and the
# multi-process Python tests (pytest, real UCX on localhost). Extra arguments go to pytest.
# COMMUX_SANITIZERS=0 skips the sanitizer builds and COMMUX_PACKAGING=0 the consumer and
# wheel checks (a quicker local run); COMMUX_LONG_TESTS=1 adds the Python tests marked long,
# which CI leaves out (docs/testing.md).
set -euo pipefail
cd "$(dirname "$0")/.."
# Each stage's start, in minutes from the top: where CI's time goes (docs/testing.md).
stage() { printf '== [%dm%02ds] %s\n' $((SECONDS / 60)) $((SECONDS % 60)) "$*"; }
# --mpi: Open MPI and mpi4py, for the benchmark test that puts MPI beside commux.
scripts/install.sh --mpi --torchft
PY=${PYTHON:-python3}
stage "C++ tests"
ctest --test-dir build/wheel --output-on-failure --timeout 120
stage "the torch-free core, built where torch cannot be found"
scripts/test_core.sh
if [ "${COMMUX_SANITIZERS:-1}" != 0 ]; then
  stage "C++ tests under ASan+UBSan and TSan"
  scripts/sanitize.sh address thread
  # A bounded slice of the bad-input fuzzer and the memory-lifetime tests (windows, the
  # all-to-all own block, fork) with libcommux under ASan+UBSan: a stray write that leaves
  # the guards intact (past a staging buffer, into freed memory) still fails here.
  stage "Python slice under ASan+UBSan"
  COMMUX_FUZZ_CASES=12 scripts/sanitize_python.sh tests/python/test_bad_inputs.py \
    tests/python/test_window.py tests/python/test_trust.py \
    -k "bad_inputs or pinned or first_collective or dropped or registration_never or own_block or fork or records_changed"
fi
if [ "${COMMUX_PACKAGING:-1}" != 0 ]; then
  stage "C++ consumers"
  scripts/test_consumer.sh
  stage "the binary wheel, no compiler"
  scripts/test_wheel.sh
fi
stage "Python tests"
# The long ones (a second full build against the system's UCX) run with COMMUX_LONG_TESTS=1.
long=(-m "not long")
[ "${COMMUX_LONG_TESTS:-0}" = 1 ] && long=()
exec "$PY" -m pytest tests/python -q --durations=25 "${long[@]}" "$@"
