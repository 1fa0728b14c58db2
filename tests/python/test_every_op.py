"""Every operation of the backend, once each, at world sizes 1 to 5, checked against
values every rank can compute on its own. One process group per world size keeps this
cheap; the per-operation files test the corner cases."""

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, run_ranks


def _val(rank, i=0):
    return float(10 * rank + i + 1)


def _p2p(rank, ws):
    right, left = (rank + 1) % ws, (rank - 1) % ws
    out = torch.full((5,), _val(rank))
    got = torch.empty(5)
    reqs = [dist.isend(out, right, tag=7), dist.irecv(got, left, tag=7)]
    for r in reqs:
        r.wait()
    assert got.eq(_val(left)).all(), "send/recv ring"


def _batch_p2p(rank, ws):
    right, left = (rank + 1) % ws, (rank - 1) % ws
    a, b = torch.full((3,), _val(rank, 1)), torch.full((70000,), _val(rank, 2))
    ra, rb = torch.empty(3), torch.empty(70000)
    # Receives first, and two messages to the same peer told apart by their tags.
    ops = [
        dist.P2POp(dist.irecv, rb, left, tag=2),
        dist.P2POp(dist.irecv, ra, left, tag=1),
        dist.P2POp(dist.isend, a, right, tag=1),
        dist.P2POp(dist.isend, b, right, tag=2),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert ra.eq(_val(left, 1)).all() and rb.eq(_val(left, 2)).all(), "batch_isend_irecv"


def _reductions(rank, ws):
    total = sum(_val(r) for r in range(ws))
    t = torch.full((6,), _val(rank))
    dist.all_reduce(t)
    assert t.eq(total).all(), "all_reduce"
    for op, want in [
        (dist.ReduceOp.MAX, _val(ws - 1)),
        (dist.ReduceOp.MIN, _val(0)),
        (dist.ReduceOp.AVG, total / ws),
    ]:
        t = torch.full((4,), _val(rank), dtype=torch.float64)
        dist.all_reduce(t, op=op)
        assert torch.allclose(t, torch.full((4,), want, dtype=torch.float64)), f"all_reduce {op}"
    t = torch.full((3,), _val(rank))
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(0.5))
    assert torch.allclose(t, torch.full((3,), 0.5 * total)), "all_reduce PREMUL_SUM (double)"
    t = torch.full((3,), _val(rank), dtype=torch.float64)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([2.0], dtype=torch.float64)))
    assert torch.allclose(t, torch.full((3,), 2 * total, dtype=torch.float64)), "PREMUL_SUM (tensor)"
    for root in {0, ws - 1}:
        t = torch.full((5,), _val(rank))
        dist.reduce(t, dst=root)
        want = total if rank == root else _val(rank)
        assert t.eq(want).all(), f"reduce to {root}"
    ts = [torch.full((2, 3), _val(rank, 1)), torch.full((7,), _val(rank, 2))]
    dist.all_reduce_coalesced(ts)
    assert ts[0].eq(sum(_val(r, 1) for r in range(ws))).all(), "all_reduce_coalesced"
    assert ts[1].eq(sum(_val(r, 2) for r in range(ws))).all(), "all_reduce_coalesced"


def _gathers(rank, ws):
    inp = torch.full((4,), _val(rank))
    outs = [torch.empty(4) for _ in range(ws)]
    dist.all_gather(outs, inp)
    assert all(o.eq(_val(r)).all() for r, o in enumerate(outs)), "all_gather"
    big = torch.empty(4 * ws)
    dist.all_gather_into_tensor(big, inp)
    assert torch.equal(big, torch.cat([torch.full((4,), _val(r)) for r in range(ws)])), "all_gather_into_tensor"
    ins = [torch.full((3,), _val(rank, 1)), torch.full((1, 5), _val(rank, 2)), torch.empty(0)]
    lists = [[torch.empty_like(t) for t in ins] for _ in range(ws)]
    dist.all_gather_coalesced(lists, ins)
    for r in range(ws):
        assert lists[r][0].eq(_val(r, 1)).all() and lists[r][1].eq(_val(r, 2)).all(), "all_gather_coalesced"
    # Mixed dtypes and odd byte sizes, gathered in one collective.
    outs = [torch.empty(2 * ws, 3), torch.empty(ws * 5, dtype=torch.bool), torch.empty(ws * 2, dtype=torch.int64)]
    with dist._coalescing_manager():
        dist.all_gather_into_tensor(outs[0], torch.full((2, 3), _val(rank, 1)))
        dist.all_gather_into_tensor(outs[1], torch.full((5,), rank % 2 == 0))
        dist.all_gather_into_tensor(outs[2], torch.arange(rank, rank + 2))
    for r in range(ws):
        assert outs[0][2 * r : 2 * r + 2].eq(_val(r, 1)).all(), "coalesced all_gather_into_tensor float"
        assert outs[1][5 * r : 5 * r + 5].eq(r % 2 == 0).all(), "coalesced all_gather_into_tensor bool"
        assert torch.equal(outs[2][2 * r : 2 * r + 2], torch.arange(r, r + 2)), "coalesced all_gather_into_tensor int64"
    for root in {0, ws - 1}:
        g = [torch.empty(3) for _ in range(ws)] if rank == root else None
        dist.gather(torch.full((3,), _val(rank)), g, dst=root)
        if rank == root:
            assert all(x.eq(_val(r)).all() for r, x in enumerate(g)), f"gather to {root}"


def _scatters(rank, ws):
    total = lambda i: sum(_val(r, i) for r in range(ws))  # noqa: E731
    inputs = [torch.full((3,), _val(rank, i)) for i in range(ws)]
    out = torch.empty(3)
    dist.reduce_scatter(out, inputs)
    assert out.eq(total(rank)).all(), "reduce_scatter"
    flat = torch.cat([torch.full((2,), _val(rank, i)) for i in range(ws)])
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, flat, op=dist.ReduceOp.AVG)
    assert torch.allclose(out, torch.full((2,), total(rank) / ws)), "reduce_scatter_tensor AVG"
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, flat, op=dist._make_nccl_premul_sum(0.25))
    assert torch.allclose(out, torch.full((2,), total(rank) / 4)), "reduce_scatter_tensor PREMUL_SUM"
    outs = [torch.empty(2), torch.empty(1, 3)]
    ins = [flat.clone(), torch.cat([torch.full((3,), _val(rank, i) * 2) for i in range(ws)])]
    with dist._coalescing_manager():
        dist.reduce_scatter_tensor(outs[0], ins[0])
        dist.reduce_scatter_tensor(outs[1], ins[1])
    assert outs[0].eq(total(rank)).all() and outs[1].eq(2 * total(rank)).all(), "coalesced reduce_scatter_tensor"
    for root in {0, ws - 1}:
        s = [torch.full((4,), _val(r)) for r in range(ws)] if rank == root else None
        out = torch.empty(4)
        dist.scatter(out, s, src=root)
        assert out.eq(_val(rank)).all(), f"scatter from {root}"


def _exchanges(rank, ws):
    for root in {0, ws - 1}:
        t = torch.full((9,), _val(rank))
        dist.broadcast(t, src=root)
        assert t.eq(_val(root)).all(), f"broadcast from {root}"
    ins = [torch.full((r + 1,), _val(rank, r)) for r in range(ws)]
    outs = [torch.empty(rank + 1) for _ in range(ws)]
    dist.all_to_all(outs, ins)
    assert all(o.eq(_val(r, rank)).all() for r, o in enumerate(outs)), "all_to_all"
    # Uneven: rank r sends (r + p + 1) elements to rank p.
    in_splits = [rank + p + 1 for p in range(ws)]
    out_splits = [r + rank + 1 for r in range(ws)]
    inp = torch.cat([torch.full((n,), _val(rank, p)) for p, n in enumerate(in_splits)])
    out = torch.empty(sum(out_splits))
    dist.all_to_all_single(out, inp, out_splits, in_splits)
    want = torch.cat([torch.full((n,), _val(r, rank)) for r, n in enumerate(out_splits)])
    assert torch.equal(out, want), "all_to_all_single uneven"
    even_in = torch.arange(ws * 2, dtype=torch.float32) + 100 * rank
    even_out = torch.empty(ws * 2)
    dist.all_to_all_single(even_out, even_in)
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * r for r in range(ws)])
    assert torch.equal(even_out, want), "all_to_all_single even"


def _every_op(rank, ws):
    _p2p(rank, ws)
    _batch_p2p(rank, ws)
    _reductions(rank, ws)
    _gathers(rank, ws)
    _scatters(rank, ws)
    _exchanges(rank, ws)
    dist.barrier()
    dist.monitored_barrier(wait_all_ranks=True)
    return True


@pytest.mark.parametrize("world_size", [1, 2, 3, 4, 5])
def test_every_operation(world_size):
    assert all(run_ranks(_every_op, world_size, timeout=150))


def _requires_grad(rank, ws):
    # Gradients built with create_graph=True require grad themselves; collectives must
    # still write them (outside autograd, as Gloo does).
    x = torch.full((4,), float(rank + 1), requires_grad=True) * 1.0
    dist.all_reduce(x)
    assert torch.allclose(x.detach(), torch.full((4,), float(sum(range(1, ws + 1)))))
    y = torch.full((2, 3), float(rank), requires_grad=True).t()  # non-contiguous, requires grad
    dist.all_reduce(y, op=dist.ReduceOp.MAX)
    assert y.detach().eq(ws - 1).all()
    outs = [torch.zeros(3, requires_grad=True) * 1.0 for _ in range(ws)]
    dist.all_gather(outs, torch.full((3,), float(rank), requires_grad=True) * 1.0)
    assert all(o.detach().eq(r).all() for r, o in enumerate(outs))
    return True


@pytest.mark.parametrize("world_size", [2])
def test_tensors_that_require_grad(world_size):
    assert all(run_ranks(_requires_grad, world_size, timeout=90))


def _sparse(rank, ws):
    # Rank r holds non-zeros at rows r and r+1 (overlapping between neighbours), with a
    # dense trailing dimension; one rank holds none at all.
    dense = torch.zeros(ws + 2, 3)
    if rank != ws - 1 or ws == 1:
        dense[rank] = float(rank + 1)
        dense[rank + 1] = 10.0 * (rank + 1)
    t = dense.to_sparse(sparse_dim=1)
    dist.all_reduce(t)
    want = torch.zeros(ws + 2, 3)
    for r in range(ws):
        if r != ws - 1 or ws == 1:
            want[r] += float(r + 1)
            want[r + 1] += 10.0 * (r + 1)
    assert t.is_sparse and torch.equal(t.to_dense(), want), (t.to_dense(), want)
    expect_error(lambda: dist.all_reduce(dense.to_sparse(), op=dist.ReduceOp.MAX), "SUM",
                 "sparse all_reduce with MAX", exc_types=(RuntimeError, ValueError, NotImplementedError))
    assert_group_works(ws)
    return True


@pytest.mark.parametrize("world_size", [1, 3])
def test_sparse_all_reduce(world_size):
    assert all(run_ranks(_sparse, world_size, timeout=90))
