"""Framework-level collective APIs over the backend under test, each result
checked against a reference computed locally from every rank's (deterministic)
input:

* functional collectives (``torch.distributed._functional_collectives``):
  all_reduce, all_gather_tensor, reduce_scatter_tensor, all_to_all_single
  (uneven splits), broadcast, their coalesced variants, and ``wait_tensor``;
* ``dist._coalescing_manager`` around all_gather_into_tensor /
  reduce_scatter_tensor, and ``ReduceOp.PREMUL_SUM``;
* ``dist.batch_isend_irecv``: a ring exchange, and several ops to the same
  peer told apart only by their tags;
* object collectives: all_gather_object, broadcast_object_list,
  gather_object, scatter_object_list.
"""

import pytest
import torch
import torch.distributed as dist

from harness import BACKEND, run_ranks

TOL = dict(rtol=1e-5, atol=1e-6)


def _inp(rank, shape, salt=0):
    g = torch.Generator().manual_seed(1000 * salt + rank)
    return torch.randn(*shape, generator=g)


# --------------------------------------------------------------------------
# Functional collectives
# --------------------------------------------------------------------------


def _funcol(rank, ws):
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    x = _inp(rank, (4, 3))
    xs = [_inp(r, (4, 3)) for r in range(ws)]

    # all_reduce: result is an AsyncCollectiveTensor until waited on.
    for op, want in (("sum", sum(xs)), ("avg", sum(xs) / ws), ("max", torch.stack(xs).amax(0))):
        y = funcol.all_reduce(x, op, group)
        got = funcol.wait_tensor(y)
        assert torch.allclose(got, want, **TOL), f"all_reduce({op})"
        assert torch.equal(x, xs[rank]), f"all_reduce({op}) modified its input"
    # Using the async result in an op waits implicitly.
    y = funcol.all_reduce(x, "sum", group)
    assert torch.allclose(y * 2, 2 * sum(xs), **TOL), "implicit wait of all_reduce's result"

    # all_gather_tensor along dim 0 and along dim 1.
    for dim in (0, 1):
        got = funcol.wait_tensor(funcol.all_gather_tensor(x, dim, group))
        assert torch.equal(got, torch.cat(xs, dim=dim)), f"all_gather_tensor(gather_dim={dim})"

    # reduce_scatter_tensor along dim 0 and along dim 1.
    big = _inp(rank, (2 * ws, 3 * ws), salt=1)
    total = sum(_inp(r, (2 * ws, 3 * ws), salt=1) for r in range(ws))
    for dim in (0, 1):
        got = funcol.wait_tensor(funcol.reduce_scatter_tensor(big, "sum", dim, group))
        assert torch.allclose(got, total.chunk(ws, dim=dim)[rank], **TOL), f"reduce_scatter_tensor(scatter_dim={dim})"
    got = funcol.wait_tensor(funcol.reduce_scatter_tensor(big, "avg", 0, group))
    assert torch.allclose(got, (total / ws).chunk(ws)[rank], **TOL), "reduce_scatter_tensor(avg)"

    # all_to_all_single with uneven splits: rank r sends r + j + 1 rows to rank j.
    in_splits = [rank + j + 1 for j in range(ws)]
    out_splits = [j + rank + 1 for j in range(ws)]
    rows = []
    for j in range(ws):
        for i in range(in_splits[j]):
            rows.append([rank * 100.0 + j * 10 + i, -1.0])
    src = torch.tensor(rows)
    got = funcol.wait_tensor(funcol.all_to_all_single(src, out_splits, in_splits, group))
    want = torch.tensor([[j * 100.0 + rank * 10 + i, -1.0] for j in range(ws) for i in range(out_splits[j])])
    assert torch.equal(got, want), f"all_to_all_single with uneven splits: got {got[:, 0].tolist()}"
    # Even splits (None).
    even = torch.arange(ws * 2, dtype=torch.float32) + 100 * rank
    got = funcol.wait_tensor(funcol.all_to_all_single(even, None, None, group))
    want = torch.cat([torch.arange(2 * rank, 2 * rank + 2, dtype=torch.float32) + 100 * j for j in range(ws)])
    assert torch.equal(got, want), "all_to_all_single with even splits"

    # broadcast from the last rank.
    got = funcol.wait_tensor(funcol.broadcast(x, ws - 1, group))
    assert torch.equal(got, xs[ws - 1]), "broadcast"
    return True


def _funcol_coalesced(rank, ws):
    import torch.distributed._functional_collectives as funcol

    group = dist.group.WORLD
    shapes = [(3,), (2, 5), (4, 1)]
    ins = [_inp(rank, s, salt=i) for i, s in enumerate(shapes)]
    all_ins = [[_inp(r, s, salt=i) for i, s in enumerate(shapes)] for r in range(ws)]

    outs = funcol.all_reduce_coalesced(ins, "sum", group)
    for i, o in enumerate(outs):
        want = sum(all_ins[r][i] for r in range(ws))
        assert torch.allclose(funcol.wait_tensor(o), want, **TOL), f"all_reduce_coalesced tensor {i}"

    outs = funcol.all_gather_into_tensor_coalesced(ins, group)
    for i, o in enumerate(outs):
        want = torch.cat([all_ins[r][i] for r in range(ws)], dim=0)
        assert torch.equal(funcol.wait_tensor(o), want), f"all_gather_into_tensor_coalesced tensor {i}"

    rs_shapes = [(ws * 2,), (ws, 3), (ws * 3, 2)]
    rs_ins = [_inp(rank, s, salt=10 + i) for i, s in enumerate(rs_shapes)]
    outs = funcol.reduce_scatter_tensor_coalesced(rs_ins, "sum", [0] * len(rs_ins), group)
    for i, (o, s) in enumerate(zip(outs, rs_shapes)):
        total = sum(_inp(r, s, salt=10 + i) for r in range(ws))
        assert torch.allclose(funcol.wait_tensor(o), total.chunk(ws)[rank], **TOL), (
            f"reduce_scatter_tensor_coalesced tensor {i}"
        )
    return True


@pytest.mark.parametrize("world_size", [2, 3])
def test_functional_collectives(world_size):
    assert all(run_ranks(_funcol, world_size, timeout=120))


@pytest.mark.parametrize("world_size", [2, 3])
def test_functional_collectives_coalesced(world_size):
    assert all(run_ranks(_funcol_coalesced, world_size, timeout=120))


# --------------------------------------------------------------------------
# Coalescing manager and PREMUL_SUM
# --------------------------------------------------------------------------


def _coalescing_manager(rank, ws):
    ins = [_inp(rank, (2, 3), salt=i) for i in range(3)]
    outs = [torch.empty(2 * ws, 3) for _ in ins]
    with dist._coalescing_manager():
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    for k, o in enumerate(outs):
        want = torch.cat([_inp(r, (2, 3), salt=k) for r in range(ws)])
        assert torch.equal(o, want), f"coalesced all_gather_into_tensor {k}"

    ins = [_inp(rank, (ws * 2, 3), salt=5 + i) for i in range(3)]
    outs = [torch.empty(2, 3) for _ in ins]
    with dist._coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    for k, o in enumerate(outs):
        want = sum(_inp(r, (ws * 2, 3), salt=5 + k) for r in range(ws)).chunk(ws)[rank]
        assert torch.allclose(o, want, **TOL), f"coalesced reduce_scatter_tensor {k}"

    ts = [torch.full((5,), float(rank + k)) for k in range(3)]
    with dist._coalescing_manager():
        for t in ts:
            dist.all_reduce(t)
    for k, t in enumerate(ts):
        assert torch.equal(t, torch.full((5,), float(sum(r + k for r in range(ws))))), f"coalesced all_reduce {k}"
    return True


def _premul_sum(rank, ws):
    op = dist._make_nccl_premul_sum(0.5)
    t = torch.full((6,), float(rank + 1))
    dist.all_reduce(t, op=op)
    want = 0.5 * sum(r + 1 for r in range(ws))
    assert torch.allclose(t, torch.full((6,), want)), f"all_reduce(PREMUL_SUM(0.5)) gave {t.tolist()}"
    inp = torch.arange(2.0 * ws) + rank
    out = torch.empty(2)
    dist.reduce_scatter_tensor(out, inp, op=dist._make_nccl_premul_sum(0.25))
    want = 0.25 * sum(torch.arange(2.0 * ws) + r for r in range(ws)).chunk(ws)[rank]
    assert torch.allclose(out, want), f"reduce_scatter_tensor(PREMUL_SUM(0.25)) gave {out.tolist()}"
    # A scalar factor given as a tensor.
    t = torch.full((3,), float(rank + 1), dtype=torch.float64)
    dist.all_reduce(t, op=dist._make_nccl_premul_sum(torch.tensor([2.0], dtype=torch.float64)))
    assert torch.allclose(t, torch.full((3,), 2.0 * sum(r + 1 for r in range(ws)), dtype=torch.float64))
    return True


@pytest.mark.parametrize("world_size", [2, 3])
def test_coalescing_manager(world_size):
    assert all(run_ranks(_coalescing_manager, world_size, timeout=120))


@pytest.mark.skipif(BACKEND == "gloo", reason="gloo: Cannot use ReduceOp.PREMUL_SUM with Gloo")
@pytest.mark.parametrize("world_size", [2, 3])
def test_premul_sum(world_size):
    assert all(run_ranks(_premul_sum, world_size, timeout=120))


# --------------------------------------------------------------------------
# batch_isend_irecv
# --------------------------------------------------------------------------


def _batch_p2p(rank, ws):
    nxt, prv = (rank + 1) % ws, (rank - 1) % ws

    # Ring: send to the next rank, receive from the previous one.
    send = torch.arange(5, dtype=torch.float32) + 10 * rank
    recv = torch.empty(5)
    ops = [dist.P2POp(dist.isend, send, nxt), dist.P2POp(dist.irecv, recv, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert torch.equal(recv, torch.arange(5, dtype=torch.float32) + 10 * prv), f"ring exchange gave {recv.tolist()}"

    # Ring in both directions at once, recvs listed before sends.
    r_from_prv, r_from_nxt = torch.empty(3, dtype=torch.int64), torch.empty(3, dtype=torch.int64)
    ops = [
        dist.P2POp(dist.irecv, r_from_prv, prv),
        dist.P2POp(dist.irecv, r_from_nxt, nxt, tag=1),
        dist.P2POp(dist.isend, torch.full((3,), rank), nxt),
        dist.P2POp(dist.isend, torch.full((3,), 100 + rank), prv, tag=1),
    ]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    assert r_from_prv.eq(prv).all() and r_from_nxt.eq(100 + nxt).all(), (
        f"bidirectional ring: {r_from_prv.tolist()} / {r_from_nxt.tolist()}"
    )

    # Several ops to the same peer, distinguished only by their tags: the
    # receives are posted in the reverse order of the sends and have
    # different sizes, so a tag mix-up shows up as a size or value error.
    tags = [3, 7, 11, 42]
    sends = [torch.full((t,), float(1000 * rank + t)) for t in tags]
    recvs = {t: torch.empty(t) for t in tags}
    ops = [dist.P2POp(dist.isend, s, nxt, tag=t) for s, t in zip(sends, tags)]
    ops += [dist.P2POp(dist.irecv, recvs[t], prv, tag=t) for t in reversed(tags)]
    works = dist.batch_isend_irecv(ops)
    for w in works:
        w.wait()
    for t in tags:
        assert torch.equal(recvs[t], torch.full((t,), float(1000 * prv + t))), (
            f"tag {t}: got {recvs[t][:3].tolist()}..."
        )

    # Two batches in a row, the second one issued before waiting on the first.
    a, b = torch.empty(4), torch.empty(4)
    w1 = dist.batch_isend_irecv([dist.P2POp(dist.irecv, a, prv, tag=5), dist.P2POp(dist.isend, torch.ones(4) * rank, nxt, tag=5)])
    w2 = dist.batch_isend_irecv([dist.P2POp(dist.irecv, b, prv, tag=6), dist.P2POp(dist.isend, torch.ones(4) * -rank, nxt, tag=6)])
    for w in w1 + w2:
        w.wait()
    assert a.eq(prv).all() and b.eq(-prv).all(), f"back-to-back batches: {a.tolist()} {b.tolist()}"
    return True


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_batch_isend_irecv(world_size):
    assert all(run_ranks(_batch_p2p, world_size, timeout=120))


# --------------------------------------------------------------------------
# Object collectives
# --------------------------------------------------------------------------


def _obj(rank):
    # Sizes differ by rank so that the size exchange matters.
    return {"rank": rank, "name": "r" * (rank * 37 + 1), "t": torch.arange(rank + 2), "nested": [rank, (rank, None)]}


def _objects_equal(a, b):
    return (
        a.keys() == b.keys()
        and a["rank"] == b["rank"]
        and a["name"] == b["name"]
        and torch.equal(a["t"], b["t"])
        and a["nested"] == b["nested"]
    )


def _object_collectives(rank, ws):
    out = [None] * ws
    dist.all_gather_object(out, _obj(rank))
    for r in range(ws):
        assert _objects_equal(out[r], _obj(r)), f"all_gather_object: entry {r} is {out[r]!r}"

    src = ws - 1
    lst = [_obj(src), "hello", 3.5, None] if rank == src else [None] * 4
    dist.broadcast_object_list(lst, src=src)
    assert _objects_equal(lst[0], _obj(src)) and lst[1:] == ["hello", 3.5, None], f"broadcast_object_list: {lst!r}"

    dst = 1 % ws
    gathered = [None] * ws if rank == dst else None
    dist.gather_object(_obj(rank), gathered, dst=dst)
    if rank == dst:
        for r in range(ws):
            assert _objects_equal(gathered[r], _obj(r)), f"gather_object: entry {r} is {gathered[r]!r}"

    scattered = [None]
    inputs = [{"for": r, "payload": list(range(r * 50))} for r in range(ws)] if rank == 0 else None
    dist.scatter_object_list(scattered, inputs, src=0)
    assert scattered[0] == {"for": rank, "payload": list(range(rank * 50))}, f"scatter_object_list: {scattered[0]!r}"

    # Again with a non-zero source.
    inputs = [("x" * (r + 1), r) for r in range(ws)] if rank == src else None
    dist.scatter_object_list(scattered, inputs, src=src)
    assert scattered[0] == ("x" * (rank + 1), rank), f"scatter_object_list from {src}: {scattered[0]!r}"
    return True


@pytest.mark.parametrize("world_size", [2, 3])
def test_object_collectives(world_size):
    assert all(run_ranks(_object_collectives, world_size, timeout=120))
