#!/usr/bin/env bash
# Every test: install commux, then the C++ tests (ctest), the same C++ tests under
# AddressSanitizer+UBSan and ThreadSanitizer, and the multi-process Python tests (pytest,
# real UCX on localhost). Extra arguments go to pytest. COMMUX_SANITIZERS=0 skips the
# sanitizer builds (a quicker local run; CI runs everything).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
PY=${PYTHON:-python3}
echo "== C++ tests"
ctest --test-dir build/wheel --output-on-failure --timeout 120
if [ "${COMMUX_SANITIZERS:-1}" != 0 ]; then
  scripts/sanitize.sh address thread
fi
echo "== Python tests"
exec "$PY" -m pytest tests/python -q "$@"
