#!/usr/bin/env bash
# The main job: install commux, then run a real 2-rank torchrun job on localhost: a tagged
# halo exchange checked against a serial solve, and a ucx vs gloo latency table.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install.sh
PY=${PYTHON:-python3}
exec "$PY" -m torch.distributed.run --standalone --nproc-per-node=2 examples/demo.py "$@"
