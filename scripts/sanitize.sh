#!/usr/bin/env bash
# Builds the C++ tests with a sanitizer and runs them: `address` (ASan+UBSan) and/or
# `thread` (TSan), in build/sanitize-<kind>. Any report fails the run. The test binaries:
# the unit tests and the rank tests (real ranks over real UCX: the engine's threads, the peer
# watch, cancellation). The core's engine tests and the step tests (the shared-memory step
# protocol under a deterministic scheduler) run under both sanitizers in
# scripts/test_core.sh, where torch is not installed. libcommux is built instrumented;
# torch and UCX are not.
#   scripts/sanitize.sh [address] [thread]     (default: both)
# Run scripts/install.sh first (it installs torch, UCX and GoogleTest, which CMake finds).
set -euo pipefail
cd "$(dirname "$0")/.."
# ccache hits across clones of the repository (CI builds in a fresh clone).
export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$PWD}"
export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"  # -g would put the folder in the hash
PY=${PYTHON:-python3}
kinds=("$@")
[ ${#kinds[@]} -gt 0 ] || kinds=(address thread)
for kind in "${kinds[@]}"; do
  dir=build/sanitize-$kind
  echo "== C++ unit tests under the $kind sanitizer ($dir)"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  cmake -S . -B "$dir" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCOMMUX_SANITIZE="$kind" \
    -DCOMMUX_BUILD_TESTS=ON -DCOMMUX_BUILD_PYTHON=OFF -DCOMMUX_BUILD_BENCH=OFF \
    -DPython3_EXECUTABLE="$(command -v "$PY")" >/dev/null
  cmake --build "$dir" --target commux_unit_tests commux_rank_tests commux_cost_model
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:halt_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
  # UCX's CMA transport reads the peer's memory with process_vm_readv, whose interceptor
  # checks those (remote) addresses against this process's heap: false reports. The other
  # shared-memory transports carry the data instead.
  export UCX_TLS=^cma
  # UCX patches mmap/munmap/brk to track memory; under TSan's own interceptors that
  # crashes at start-up. commux registers no memory, so it needs no such events.
  export UCX_MEM_EVENTS=no UCX_MEM_MMAP_HOOK_MODE=none
  # The schedule simulator and the cost model run every rank in one thread: TSan has
  # nothing to look at there and makes them ~6x slower (minutes), so the thread run leaves
  # them to ASan.
  skip=()
  [ "$kind" = thread ] && skip=(-E '^(Schedules|SchedulesAtScale|CostModel)\.')
  ctest --test-dir "$dir" --output-on-failure "${skip[@]}"
done
