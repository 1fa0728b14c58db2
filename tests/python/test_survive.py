"""A DDP training job survives a rank killed at a random step (tests/python/survive_job.py):
the survivors reconfigure and go on, a replacement joins and is healed, and every process's
final parameters equal a serial run of the same memberships. The seed is printed on
failure; COMMUX_SURVIVE_SEED replays one, scripts/survive_runs.sh runs many."""

from __future__ import annotations

import datetime
import os
import random

import pytest
import torch.distributed as dist

import survive_job
from harness import free_port, is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = [
    pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("commux's reconfigure")),
    pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                       reason="this torch has no reconfigure API (torch >= 2.15)"),
]


def _rank(rank, world_size, scratch, **kwargs):
    return survive_job.run(rank, **kwargs)


@pytest.mark.parametrize("shm", ["1", "0"])
def test_a_ddp_job_survives_a_killed_rank_and_heals_its_replacement(shm):
    seed = int(os.environ.get("COMMUX_SURVIVE_SEED", random.randrange(1 << 30)))
    # Any of the four may be the victim: the store lives here.
    victim, kill_at, grow_at = survive_job.schedule(seed, [0, 1, 2, 3])
    why = f"seed {seed} (COMMUX_SURVIVE_SEED): victim {victim}, killed at step {kill_at}, replaced at {grow_at}"
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    results = run_ranks(_rank, 5, timeout=150, init="none", killed=(victim,), port=store.port,
                        victim=victim, kill_at=kill_at, grow_at=grow_at, shm=shm)
    for me, result in enumerate(results):
        if me == victim:
            assert result is None, why
        else:
            survive_job.check(me, result, victim, kill_at, grow_at, why)
