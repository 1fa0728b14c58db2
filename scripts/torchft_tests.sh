#!/usr/bin/env bash
# torchft's own tests (they ship in its wheel: process_group_test.py, manager_integ_test.py)
# with commux in place of gloo (tests/torchft/commux_swap.py), then the same run on gloo,
# for the counts side by side; then tests/torchft/test_commux_extra.py (what torchft's
# gloo group cannot run) on commux. Extra arguments go to every pytest run.
# Needs torchft: scripts/install.sh --torchft. docs/fault-tolerance.md records the counts.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
repo=$PWD
ft=$("$PY" -c "import torchft, os; print(os.path.dirname(torchft.__file__))") || {
  echo "torchft is not installed: scripts/install.sh --torchft" >&2
  exit 2
}
out=$(mktemp -d)
run() {  # run <label> <swap> <files...>
  local label=$1 swap=$2
  shift 2
  # From a scratch folder: torchft's tests write checkpoints and sockets where they run.
  (cd "$out" && COMMUX_TORCHFT_SWAP=$swap PYTHONPATH="$repo/tests/torchft" timeout 1800 \
    "$PY" -m pytest -p commux_swap -p no:cacheprovider -q --timeout 300 -rA "$@" \
    >"$out/$label.log" 2>&1)
  local rc=$?
  # The summary line (background threads of torchft may print after it).
  printf '%-8s rc=%-3s %s\n' "$label" "$rc" \
    "$(grep -E '(passed|failed|error).* in [0-9.]+s' "$out/$label.log" | tail -1)"
  grep -E '^FAILED' "$out/$label.log" | sed "s|$ft/||; s|^|    |"
  return $rc
}
status=0
run commux 1 "$ft/process_group_test.py" "$ft/manager_integ_test.py" "$@" || status=1
run gloo 0 "$ft/process_group_test.py" "$ft/manager_integ_test.py" "$@"
run extra 1 "$repo/tests/torchft/test_commux_extra.py" "$@" || status=1
echo "logs: $out"
exit $status
