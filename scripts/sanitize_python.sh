#!/usr/bin/env bash
# The Python tests with libcommux and its extension built under AddressSanitizer+UBSan:
# builds into build/asan-python (not installed: the tests import it through PYTHONPATH)
# and preloads the sanitizer runtimes into every process (pytest and each rank), since
# python3 and torch are not instrumented. Any report aborts that process, which fails the
# test. Results: docs/performance-log.md ("Python under AddressSanitizer").
#   scripts/sanitize_python.sh [pytest arguments]   (default: the core test files)
# Run scripts/install.sh first. Slow: a full build (~15 min on 2 cores; the CUDA unit and the
# benchmark are left out: CPU tests exercise neither), tests ~2x slower.
set -euo pipefail
cd "$(dirname "$0")/.."
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
PY=${PYTHON:-python3}
dir=build/asan-python
echo "== building commux under ASan+UBSan ($dir)"
"$PY" -m pip install --disable-pip-version-check -q --no-build-isolation --no-deps --upgrade \
  --target "$dir/site" -C build-dir="$dir/build" -C cmake.define.COMMUX_SANITIZE=address \
  -C cmake.define.COMMUX_BUILD_TESTS=OFF -C cmake.define.COMMUX_BUILD_BENCH=OFF \
  -C cmake.define.COMMUX_CUDA=OFF .
runtimes="$(g++ -print-file-name=libasan.so):$(g++ -print-file-name=libubsan.so)"
# CPython and torch keep memory until exit by design: leak reports would be theirs.
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:halt_on_error=1:verify_asan_link_order=0
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
# As in scripts/sanitize.sh: CMA's process_vm_readv trips ASan's interceptor, and UCX's
# mmap hooks fight the sanitizer's.
export UCX_TLS=^cma UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none
args=("$@")
[ ${#args[@]} -gt 0 ] || args=(tests/python/test_p2p.py tests/python/test_collectives.py
  tests/python/test_work.py tests/python/test_faults.py tests/python/test_shm.py
  tests/python/test_group_lifecycle.py tests/python/test_coalesced.py tests/python/test_errors.py)
echo "== Python tests under ASan+UBSan: ${args[*]}"
PYTHONPATH="$PWD/$dir/site" LD_PRELOAD="$runtimes" "$PY" -m pytest -q -p no:cacheprovider "${args[@]}"
