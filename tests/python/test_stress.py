"""Randomized differential stress, the CI slice: stress_job.py's seeded plans (tagged p2p
posted out of order, any-source receives, every collective and coalesced form, several
async collectives in flight waited in a shuffled order, a subgroup, receives that must time
out and leave the group working), every result checked exactly, at 2-4 ranks, over shared
memory and over UCX, across two COMMUX_HOST "hosts", and beside a busy-looping process.

A wrong result fails with the seed, the operation and a command that replays it; a hang
fails at the harness's hard timeout with every rank's Python and native stacks and the
operation each rank was in. COMMUX_STRESS_SEED=<n> adds that seed to every case; long
runs over many seeds: scripts/stress.sh.
"""

import os
import subprocess
import sys

import pytest

import stress_job
from harness import BACKEND, is_ucx, run_ranks

# Fixed so that CI failures replay; one plan per world size, so the SHM on and off cases
# at a size run the same operations through the two paths.
FIXED_SEEDS = [1]
SEEDS = FIXED_SEEDS + ([int(os.environ["COMMUX_STRESS_SEED"])]
                       if os.environ.get("COMMUX_STRESS_SEED") else [])
N_OPS = 800
# A run takes 10-20 s here (most of it starting the ranks); a hang is found at this limit.
RUN_TIMEOUT_S = 75

CASES = [
    pytest.param(ws, {"COMMUX_SHM": shm}, False, id=f"ws{ws}-shm{shm}")
    for ws in (2, 3, 4) for shm in ("1", "0")
] + [
    pytest.param(4, {"COMMUX_SHM": "1", "COMMUX_HOST": ["h0", "h0", "h1", "h1"]}, False,
                 id="ws4-2hosts",
                 marks=pytest.mark.skipif(not is_ucx(), reason="COMMUX_HOST is commux's")),
    pytest.param(2, {"COMMUX_SHM": "1"}, True, id="ws2-hog"),
    # Ranks that sleep now and then before issuing and waiting: other arrival orders (the
    # run that found the cancelled-receive race of stop 30 was of this kind).
    pytest.param(4, {"COMMUX_SHM": "1", "COMMUX_HOST": ["h0", "h0", "h1", "h1"],
                     "COMMUX_STRESS_JITTER_MS": "3"}, False, id="ws4-2hosts-jitter",
                 marks=pytest.mark.skipif(not is_ucx(), reason="COMMUX_HOST is commux's")),
]


def _progress(progress_dir, ws):
    lines = []
    for r in range(ws):
        try:
            with open(os.path.join(progress_dir, f"op.{r}")) as f:
                lines.append(f"  rank {r} was at: {f.read().strip()}")
        except OSError:
            lines.append(f"  rank {r}: no progress recorded (start-up)")
    return "\n".join(lines)


@pytest.mark.timeout(RUN_TIMEOUT_S + 200)  # the harness's stack dumps (gdb) come after it
@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("ws,env,hog", CASES)
def test_stress(ws, env, hog, seed, tmp_path):
    env = {"COMMUX_HOST": None, **env}  # an outer COMMUX_HOST must not split this job
    replay = stress_job.replay_command(seed, ws, N_OPS, env, hog, BACKEND)
    hog_proc = None
    try:
        if hog:
            # Ranks that spin-wait or hand off between threads lose the core to it.
            hog_proc = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        results = run_ranks(stress_job.run_rank, ws, timeout=RUN_TIMEOUT_S, env=env,
                            seed=seed, n_ops=N_OPS, progress_dir=str(tmp_path), replay=replay)
    except pytest.fail.Exception as e:
        # Not chained: pytest would print the long harness message (stacks) first, and CI
        # keeps only part of a long failure; the progress lines must come first.
        raise pytest.fail.Exception(
            f"stress seed={seed} world_size={ws} env={env} hog={hog} failed\n"
            f"  replay: {replay}\n{_progress(tmp_path, ws)}\n\n{e}", pytrace=False) from None
    finally:
        if hog_proc is not None:
            hog_proc.kill()
            hog_proc.wait()
    assert [r["ops"] for r in results] == [N_OPS] * ws, (results, replay)
    if is_ucx():
        # Each case must have run the path it is named for (one channel thread per group).
        threads = [r["shm_threads"] for r in results]
        if env["COMMUX_SHM"] == "0":
            assert threads == [0] * ws, f"COMMUX_SHM=0 but shared-memory threads {threads}"
        else:
            assert min(threads) >= 1, f"COMMUX_SHM=1 but shared-memory threads {threads}"
