"""No silent limits in the 64-bit tag (src/wire/tag.hpp, docs/design.md "Tag limits"): each
field either cannot overflow or fails with a clear error before anything is sent. The
limits are far away (4,096 rounds, 65,536 ranks, 32,768 live groups), so tests lower them:
COMMUX_ROUND_WRAP, COMMUX_MAX_RANKS and COMMUX_MAX_CONTEXTS (and COMMUX_SEQUENCE_WRAP,
test_sequence_wrap.py). User tags outside [0, 2^31-1] are refused in test_p2p.py.

A collective whose rounds the field could not tell apart is refused at launch
(collectives/round_fit.hpp), but no shipped algorithm can be: the C++ simulator shows it for
every algorithm at wraps 2, 4 and 4,096 (tests/cpp/test_schedules.cpp, RoundWrap.*), and
tests/cpp/test_round_fit.cpp drives the check with hand-made schedules.
"""

from __future__ import annotations

import gc

import pytest

from harness import assert_group_works, expect_error, is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("tag limits"))

# Everything over UCX schedules (no shared memory), 64-byte pieces: a ring step of a few KiB
# is dozens of rounds, so one collective crosses a round wrap of 2 many times.
CHUNKED = {"COMMUX_SHM": "0", "COMMUX_PIPELINE_CHUNK_BYTES": 64, "COMMUX_CHAIN_MIN_BYTES": 0,
           "COMMUX_ALLREDUCE_RING_MIN_BYTES": 0}


def _collectives_across_the_round_wrap(rank, ws, wrap):
    import torch
    import torch.distributed as dist

    import commux

    assert commux.load_extension().config()["COMMUX_ROUND_WRAP"] == wrap
    n = 3001  # 12 KB of float32: ~60 pieces per ring block at 3 ranks, ~190 in a chain
    for i in range(3):
        a = torch.arange(n, dtype=torch.float32) * (rank + 1) + i
        dist.all_reduce(a)
        want = torch.arange(n, dtype=torch.float32) * (ws * (ws + 1) // 2) + ws * i
        assert torch.equal(a, want), f"all_reduce {i}"
        root = i % ws
        b = torch.arange(n, dtype=torch.float32) + i if rank == root else torch.zeros(n)
        dist.broadcast(b, src=root)
        assert torch.equal(b, torch.arange(n, dtype=torch.float32) + i), f"broadcast from {root}"
        r = torch.full((n,), float(rank + i))
        dist.reduce(r, dst=root)
        if rank == root:
            assert torch.equal(r, torch.full((n,), float(sum(range(ws)) + ws * i))), f"reduce to {root}"
        out = torch.empty(n)
        dist.reduce_scatter_tensor(out, torch.arange(n * ws, dtype=torch.float32) + rank)
        want = torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32) * ws + sum(range(ws))
        assert torch.equal(out, want), "reduce_scatter_tensor"
        g = torch.empty(n * ws)
        dist.all_gather_into_tensor(g, torch.full((n,), float(rank + i)))
        assert torch.equal(g, torch.arange(ws, dtype=torch.float32).repeat_interleave(n) + i), "all_gather"
    return True


@pytest.mark.parametrize("wrap,algorithms", [
    (2, {}),
    # The logarithmic algorithms: the dissemination allgather sends a range that wraps past
    # the last block as two transfers to one peer in one step (rounds 2k and 2k+1).
    (2, {"COMMUX_LOG_ALGORITHMS_MIN_RANKS": 2, "COMMUX_RING_MIN_BLOCK_BYTES": 1 << 40}),
    (8, {}),
])
def test_results_stay_exact_across_a_small_round_wrap(wrap, algorithms):
    env = dict(CHUNKED, COMMUX_ROUND_WRAP=wrap, **algorithms)
    world = 5 if algorithms else 3  # 5 ranks: a dissemination range wraps
    assert all(run_ranks(_collectives_across_the_round_wrap, world, timeout=150, env=env, wrap=wrap))


def _init_beyond_max_ranks(rank, ws, scratch):
    import torch.distributed as dist

    msg = expect_error(
        lambda: dist.init_process_group("ucx", init_method=f"file://{scratch}/init", rank=rank,
                                        world_size=ws),
        ("a group of 3 ranks",), "a 3-rank group with COMMUX_MAX_RANKS=2", exc_types=(ValueError,))
    assert "COMMUX_MAX_RANKS" in msg and "source field" in msg, msg
    return msg


def _at_max_ranks(rank, ws):
    assert_group_works(ws)
    return True


def test_group_larger_than_max_ranks_fails_at_init():
    env = {"COMMUX_MAX_RANKS": 2}
    assert all(run_ranks(_at_max_ranks, 2, timeout=60, env=env))
    run_ranks(_init_beyond_max_ranks, 3, timeout=60, init="none", env=env)


def _contexts_run_out_and_come_back(rank, ws):
    import torch
    import torch.distributed as dist

    def works(group, salt):
        t = torch.full((5,), float(rank + salt))
        dist.all_reduce(t, group=group)
        assert t.eq(sum(range(ws)) + ws * salt).all(), f"group {salt} gave {t.tolist()}"

    # The default group holds one of the 4 ids.
    groups = [dist.new_group(list(range(ws))) for _ in range(3)]
    for i, g in enumerate(groups):
        works(g, i + 1)
    msg = expect_error(lambda: dist.new_group(list(range(ws))), ("live process groups",),
                       "a fifth group with COMMUX_MAX_CONTEXTS=4", exc_types=(RuntimeError,))
    assert "COMMUX_MAX_CONTEXTS" in msg and "destroy_process_group" in msg, msg
    assert_group_works(ws)
    for i, g in enumerate(groups):
        works(g, i + 1)
    # A destroyed group's id is free again once nothing holds the group.
    dist.destroy_process_group(groups[1])
    del groups[1]
    gc.collect()
    groups.append(dist.new_group(list(range(ws))))
    for i, g in enumerate(groups):
        works(g, 10 + i)
    assert_group_works(ws)
    return msg


def test_live_groups_beyond_max_contexts_fail_and_ids_come_back():
    msgs = run_ranks(_contexts_run_out_and_come_back, 3, timeout=120,
                     env={"COMMUX_MAX_CONTEXTS": 4, "COMMUX_SHM": "0"})
    assert all("more than 4 live process groups" in m for m in msgs), msgs[0]


def _bad_setting(rank, ws, scratch):
    import commux

    return expect_error(lambda: commux.load_extension().config(), ("COMMUX_ROUND_WRAP",),
                        "COMMUX_ROUND_WRAP=3", exc_types=(ValueError,))


def test_limit_settings_are_checked():
    # 3 is no power of two; a wider field than the tag's cannot be asked for.
    for env, words in (({"COMMUX_ROUND_WRAP": 3}, "not a power of two"),
                       ({"COMMUX_ROUND_WRAP": 8192}, "outside [2, 4096]")):
        msg = run_ranks(_bad_setting, 1, timeout=60, init="none", env=env)[0]
        assert words in msg, msg
