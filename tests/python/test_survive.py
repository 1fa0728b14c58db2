"""A DDP training job survives a rank killed at a random step (tests/python/survive_job.py):
the survivors reconfigure and go on, a replacement joins and is healed, and every process's
final parameters equal a serial run of the same memberships. The seed is printed on
failure; COMMUX_SURVIVE_SEED replays one, scripts/survive_runs.sh runs many."""

from __future__ import annotations

import datetime
import os
import random

import pytest
import torch
import torch.distributed as dist

import survive_job
from harness import free_port, is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = [
    pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("commux's reconfigure")),
    pytest.mark.skipif(not hasattr(dist, "_reconfigure"),
                       reason="this torch has no reconfigure API (torch >= 2.15)"),
]

# float64 throughout: the distributed sums add in another order than the serial one.
BOUND = 1e-12


def _rank(rank, world_size, scratch, **kwargs):
    return survive_job.run(rank, **kwargs)


@pytest.mark.parametrize("shm", ["1", "0"])
def test_a_ddp_job_survives_a_killed_rank_and_heals_its_replacement(shm):
    seed = int(os.environ.get("COMMUX_SURVIVE_SEED", random.randrange(1 << 30)))
    rng = random.Random(seed)
    victim = rng.randrange(4)
    kill_at = rng.randrange(1, 6)
    grow_at = rng.randrange(kill_at + 1, survive_job.STEPS - 1)
    why = f"seed {seed} (COMMUX_SURVIVE_SEED): victim {victim}, killed at step {kill_at}, replaced at {grow_at}"
    # The store lives here: any rank may be the victim.
    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=60))
    results = run_ranks(_rank, 5, timeout=150, init="none", killed=(victim,), port=store.port,
                        victim=victim, kill_at=kill_at, grow_at=grow_at, shm=shm)
    plan = [4 if step < kill_at or step >= grow_at else 3 for step in range(survive_job.STEPS)]
    want = survive_job.reference(plan)
    for me, result in enumerate(results):
        if me == victim:
            assert result is None, why
            continue
        first = 0 if me != survive_job.REPLACEMENT else grow_at
        assert result["plan"] == {s: plan[s] for s in range(first, survive_job.STEPS)}, (why, me, result["plan"])
        assert result["failures"] == (1 if me != survive_job.REPLACEMENT else 0), (why, me)
        for got, expected in zip(result["params"], want):
            diff = (got - expected).abs().max().item()
            assert diff <= BOUND, f"{why}: process {me}'s parameters are {diff} off the serial run"
    # The members agree with each other exactly: DDP gave them all the same sums.
    alive = [r for r in results if r is not None]
    for other in alive[1:]:
        for a, b in zip(alive[0]["params"], other["params"]):
            assert torch.equal(a, b), f"{why}: two members' parameters differ"
