"""COMMUX_ALGORITHM_<COLLECTIVE> forces one algorithm of a collective's table
(src/collectives/route.cpp): every schedule, the shared-memory channel and the parts across
hosts give exact results when forced, the forced schedule is the one that runs (with
COMMUX_CHECK_COLLECTIVES on, a mismatch's error names the schedule in its description), and
a forced algorithm that cannot run here is a ValueError naming the setting, after which the
group goes on."""
import datetime
import os

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, run_ranks

pytestmark = pytest.mark.ucx_only

COLLECTIVES = ["allreduce", "reduce", "broadcast", "allgather", "reduce_scatter", "gather",
               "scatter", "all_to_all", "barrier"]


def _env(algorithms, **more):
    env = {f"COMMUX_ALGORITHM_{c.upper()}": algorithms.get(c, "") for c in COLLECTIVES}
    env.update(more)
    return env


def _val(rank, n, salt=0):
    return (torch.arange(n, dtype=torch.float64) % 13 + 100 * rank + salt).float()


def _every_collective(rank, ws, n, skip=()):
    """Each collective once (but those in `skip`), its result checked exactly
    (integer-valued floats)."""
    root = ws - 1
    x = _val(rank, n)
    dist.all_reduce(x)
    assert torch.equal(x, sum(_val(r, n) for r in range(ws))), "allreduce"
    y = _val(rank, n, 1)
    dist.reduce(y, dst=root)
    if rank == root:
        assert torch.equal(y, sum(_val(r, n, 1) for r in range(ws))), "reduce"
    b = _val(rank, n, 2)
    dist.broadcast(b, src=root)
    assert torch.equal(b, _val(root, n, 2)), "broadcast"
    out = torch.empty(ws * n)
    dist.all_gather_into_tensor(out, _val(rank, n, 3))
    assert torch.equal(out, torch.cat([_val(r, n, 3) for r in range(ws)])), "allgather"
    rs = torch.empty(n)
    dist.reduce_scatter_tensor(rs, torch.cat([_val(rank, n, 4 + q) for q in range(ws)]))
    assert torch.equal(rs, sum(_val(r, n, 4 + rank) for r in range(ws))), "reduce_scatter"
    if "gather" not in skip:
        gathered = [torch.empty(n) for _ in range(ws)] if rank == root else None
        dist.gather(_val(rank, n, 5), gathered, dst=root)
        if rank == root:
            assert all(torch.equal(gathered[r], _val(r, n, 5)) for r in range(ws)), "gather"
    s = torch.empty(n)
    dist.scatter(s, [_val(q, n, 6) for q in range(ws)] if rank == root else None, src=root)
    assert torch.equal(s, _val(rank, n, 6)), "scatter"
    a = torch.empty(ws * n)
    dist.all_to_all_single(a, torch.cat([_val(rank * ws + q, n, 7) for q in range(ws)]))
    assert torch.equal(a, torch.cat([_val(q * ws + rank, n, 7) for q in range(ws)])), "all_to_all"
    dist.barrier()


def _forced(rank, ws, algorithms):
    for n in (1, 37, 70_000):  # one element, a few, more than the ring's and chain's pieces
        _every_collective(rank, ws, n)
    # The schedule that ran is named in a mismatch's error (COMMUX_CHECK_COLLECTIVES).
    named = {
        "allreduce": lambda m: dist.all_reduce(torch.ones(m)),
        "reduce": lambda m: dist.reduce(torch.ones(m), dst=0),
        "broadcast": lambda m: dist.broadcast(torch.ones(m), src=0),
        "allgather": lambda m: dist.all_gather_into_tensor(torch.empty(ws * m), torch.ones(m)),
        "reduce_scatter": lambda m: dist.reduce_scatter_tensor(torch.empty(m), torch.ones(ws * m)),
        # The coalesced calls run as schedules only, and take a forced one (scheduleRoute).
        "allreduce_coalesced": lambda m: dist.group.WORLD.allreduce_coalesced(
            [torch.ones(m), torch.ones(3)]).wait(),
    }
    for collective, call in named.items():
        algorithm = algorithms.get(collective.replace("_coalesced", ""))
        if algorithm in (None, "shm", "hierarchical"):
            continue
        msg = expect_error(lambda: call(8 + rank), ("different collectives",),
                           f"{collective} with sizes that differ")
        assert f", {algorithm}, collective #" in msg, (collective, algorithm, msg)
    assert_group_works(ws)
    return True


@pytest.mark.parametrize("ws,algorithms", [
    (3, {"allreduce": "ring", "reduce": "chain", "broadcast": "scatter_allgather",
         "allgather": "dissemination", "reduce_scatter": "recursive_halving",
         "gather": "binomial", "scatter": "binomial", "all_to_all": "bruck",
         "barrier": "dissemination"}),
    (4, {"allreduce": "rabenseifner", "reduce": "binomial", "broadcast": "chain",
         "allgather": "recursive_doubling", "reduce_scatter": "ring", "all_to_all": "pairwise"}),
    (3, {"allreduce": "recursive_doubling", "broadcast": "binomial", "allgather": "ring"}),
    (3, {c: "shm" for c in COLLECTIVES}),
], ids=["set1-3ranks", "set2-4ranks", "set3-3ranks", "shm"])
def test_every_forced_algorithm_gives_exact_results(ws, algorithms):
    env = _env(algorithms, COMMUX_CHECK_COLLECTIVES="1", COMMUX_PIPELINE_CHUNK_BYTES="65536")
    assert all(run_ranks(_forced, ws, timeout=240, env=env, algorithms=algorithms))


def _in_parts(rank, ws, scratch, labels):
    os.environ["COMMUX_HOST"] = labels[rank]
    store = dist.FileStore(os.path.join(scratch, "store"), ws)
    dist.init_process_group("ucx", store=store, rank=rank, world_size=ws,
                            timeout=datetime.timedelta(seconds=60))
    # Small broadcasts and reduces run flat unless forced into parts (COMMUX_HIERARCHY_MIN_BYTES).
    for n in (1, 37, 5000):
        _every_collective(rank, ws, n, skip=("gather",))
    expect_error(lambda: dist.gather(torch.ones(4), [torch.empty(4) for _ in range(ws)]
                                     if rank == 0 else None, dst=0),
                 ("COMMUX_ALGORITHM_GATHER=shm",), "gather forced onto shared memory across hosts",
                 exc_types=(ValueError,))
    assert_group_works(ws)
    dist.destroy_process_group()
    return True


def test_forced_parts_across_hosts(tmp_path):
    algorithms = {c: "hierarchical" for c in ("allreduce", "reduce", "broadcast", "allgather",
                                              "reduce_scatter", "barrier")}
    algorithms["gather"] = "shm"
    labels = ["a", "a", "b", "b"]
    assert all(run_ranks(_in_parts, 4, timeout=240, init="none", env=_env(algorithms),
                         scratch=str(tmp_path), labels=labels))


def _refused(rank, ws):
    too = ("COMMUX_ALGORITHM_",)
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(ws * 4), torch.ones(4)), too,
                 "recursive doubling on 3 ranks", exc_types=(ValueError,))
    expect_error(lambda: dist.all_to_all_single(torch.empty(ws * 2), torch.ones(ws * 2),
                                                output_split_sizes=[2] * ws,
                                                input_split_sizes=[2] * ws),
                 too, "bruck with split sizes", exc_types=(ValueError,))
    expect_error(lambda: dist.all_reduce(torch.ones(4)), too, "shm without shared memory",
                 exc_types=(ValueError,))
    expect_error(lambda: dist.barrier(), too, "parts on one host", exc_types=(ValueError,))
    # Nothing moved: the collectives not forced still run, and agree.
    x = torch.full((5,), float(rank))
    dist.broadcast(x, src=1)
    assert torch.equal(x, torch.full((5,), 1.0))
    # Rank 0 hosts the store: it leaves only once every rank has read its peers' records
    # (a rank that reached the broadcast late found the store gone, once in a CI run).
    dist.reduce(torch.ones(1), dst=0)
    return True


def test_a_forced_algorithm_that_cannot_run_here_is_a_value_error():
    env = _env({"allgather": "recursive_doubling", "all_to_all": "bruck", "allreduce": "shm",
                "barrier": "hierarchical"}, COMMUX_SHM="0")
    assert all(run_ranks(_refused, 3, timeout=120, env=env))


def test_an_unknown_algorithm_name_is_refused_naming_the_choices():
    import subprocess
    import sys

    code = "import commux; commux.config()"
    env = dict(os.environ, COMMUX_ALGORITHM_BROADCAST="fastest")
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode != 0
    assert "COMMUX_ALGORITHM_BROADCAST=fastest names no algorithm of broadcast" in res.stderr
    assert "scatter_allgather" in res.stderr, res.stderr


def _alltoall_counts(rank, ws, seed):
    # Split sizes drawn from the seed, the same on every rank; then one pair (s, d) made to
    # disagree: s sends one row more to d than d makes room for (d == s: its own block).
    g = torch.Generator().manual_seed(seed)
    splits = torch.randint(0, 4, (ws, ws), generator=g)  # splits[s][d]: rows s sends d
    s, d = (int(v) for v in torch.randint(0, ws, (2,), generator=g))
    send = splits[rank].tolist()
    recv = splits[:, rank].tolist()
    if rank == s:
        send[d] += 1
    for single in (True, False):
        what = f"seed {seed}: rank {s} sends rank {d} a row more ({'single' if single else 'list'})"
        if single:
            call = lambda: dist.all_to_all_single(torch.empty(sum(recv)), torch.ones(sum(send)),
                                                  output_split_sizes=recv, input_split_sizes=send)
        else:
            call = lambda: dist.all_to_all([torch.empty(n) for n in recv],
                                           [torch.ones(n) for n in send])
        msg = expect_error(call, (f"rank {s} sends",), what, exc_types=(ValueError,))
        assert f"to rank {d}" in msg, (what, msg)
    assert_group_works(ws)
    return True


@pytest.mark.parametrize("ws", [2, 3])
def test_check_collectives_finds_all_to_all_counts_that_differ_on_every_rank(ws):
    """COMMUX_CHECK_COLLECTIVES with the UCX schedules (COMMUX_SHM=0): all-to-all counts
    that do not pair up (the own block included) raise ValueError naming the pair on every
    rank, before a byte moves; before, one rank failed ('Message truncated') or refused its
    own block alone, and the others waited for the timeout."""
    seed = int(os.environ.get("COMMUX_TEST_SEED", "0")) or int.from_bytes(os.urandom(3), "little")
    print(f"seed {seed} (COMMUX_TEST_SEED={seed} replays it)")
    env = {"COMMUX_CHECK_COLLECTIVES": "1", "COMMUX_SHM": "0"}
    assert all(run_ranks(_alltoall_counts, ws, timeout=120, env=env, seed=seed,
                         pg_timeout=datetime.timedelta(seconds=60)))
