"""torch's merge_remote_group on commux: processes that each hold a group of their own
merge into one group over a shared store, numbered in their order of arrival, and run
collectives and tagged messages in it; a process that comes past the merged size is
refused with a clear error, and the others' group works."""

from __future__ import annotations

import datetime

import pytest

from harness import is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("merge"))


def _merge(rank, world_size):
    import torch
    import torch.distributed as dist

    if not hasattr(dist.ProcessGroup, "merge_remote_group"):
        return "skip"
    # Every process gets a group of its own (all call new_group for each).
    own = None
    for r in range(world_size):
        g = dist.new_group([r])
        if r == rank:
            own = g
    base = dist.distributed_c10d._get_default_store()
    timeout = datetime.timedelta(seconds=30)

    merged = own.merge_remote_group(dist.PrefixStore("merge-all/", base), world_size, timeout)
    me = merged.rank()
    assert merged.size() == world_size and 0 <= me < world_size, (me, merged.size())
    # Who is who: the merged ranks, by world rank, are a permutation.
    ids = torch.zeros(world_size, dtype=torch.int64)
    ids[me] = rank
    merged.allreduce([ids]).wait()
    assert sorted(ids.tolist()) == list(range(world_size)), ids
    # A collective and tagged messages in the merged group.
    t = torch.full((1000,), float(me + 1))
    merged.allreduce([t]).wait()
    assert torch.all(t == world_size * (world_size + 1) / 2)
    right, left = (me + 1) % world_size, (me - 1) % world_size
    out = torch.full((8,), float(rank))
    inbox = [torch.zeros(8), torch.zeros(8)]
    works = [merged.recv([inbox[1]], left, 7), merged.recv([inbox[0]], left, 3),
             merged.send([out + 100], right, 3), merged.send([out], right, 7)]
    for w in works:
        w.wait()
    assert torch.all(inbox[1] == ids[left]) and torch.all(inbox[0] == ids[left] + 100)

    # Three processes merge into a group of two over a fresh store: the third is refused.
    if rank < 3:
        try:
            pair = own.merge_remote_group(dist.PrefixStore("merge-two/", base), 2, timeout)
        except ValueError as e:
            assert "more processes merge over this store than the size" in str(e), e
            refused = True
        else:
            refused = False
            x = torch.ones(4)
            pair.allreduce([x]).wait()
            assert torch.all(x == 2)
        counts = torch.tensor([1 if refused else 0], dtype=torch.int64)
    else:
        counts = torch.zeros(1, dtype=torch.int64)
    dist.all_reduce(counts)
    assert counts.item() == 1, f"{counts.item()} processes were refused, not 1"
    return True


def test_processes_merge_into_one_group():
    results = run_ranks(_merge, 4, timeout=120)
    if "skip" in (results or []):
        pytest.skip("this torch has no merge_remote_group")
