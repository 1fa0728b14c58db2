#!/usr/bin/env bash
# The bad-input fuzzer (tests/python/bad_inputs.py, CI slice: tests/python/test_bad_inputs.py)
# for a while across seeds: every collective and point-to-point call of torch.distributed on
# CPU tensors, valid and wrong arguments mixed, every tensor inside sentinel guards, at each
# world size with shared memory and over UCX (COMMUX_SHM=0). Each failing run prints the
# seed, the failing cases with their arguments and the command that replays them.
#
#   scripts/fuzz_bad_inputs.sh [--minutes 10] [--cases 40] [--worlds 2,3,4] [--paths shm,ucx]
#                              [--seed N] [--short 2] [--skip "an expanded output,..."] [--warm]
#
# It ends with "bad inputs tried: N cases (B bad, V valid) in R runs ..."; exit status 1 when
# a run failed.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python3}" tests/python/bad_inputs.py "$@"
