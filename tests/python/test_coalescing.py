"""Message coalescing: COMMUX_COALESCE (several tensors, one IOV message) and COMMUX_GROUP
(operations of a coalescing window posted together at its end), over real UCX."""

import pytest
import torch
import torch.distributed as dist

from harness import assert_group_works, expect_error, get_backend_obj, run_ranks

pytestmark = pytest.mark.ucx_only


def _variables(rank, v):
    """V tensors of mixed sizes, dtypes and layouts, as a stencil code's variables."""
    out = []
    for i in range(v):
        if i % 4 == 1:
            out.append(torch.arange(i * 7, dtype=torch.float64) + 1000 * rank)
        elif i % 4 == 2:
            out.append((torch.arange(24, dtype=torch.int32) + rank).reshape(4, 6).t())  # strided
        elif i % 4 == 3:
            out.append(torch.empty(0))
        else:
            out.append(torch.full((5 + 300 * i,), float(rank * 100 + i)))
    return out


def _list_exchange(rank, ws, vs):
    import commux

    assert commux.load_extension().config()["COMMUX_COALESCE"] is True
    backend = get_backend_obj()
    peer = 1 - rank
    for v in vs:
        out = _variables(rank, v)
        got = [torch.empty_like(t) for t in out]
        ws_ = backend.send(out, peer, 3)
        wr = backend.recv(got, peer, 3)
        ws_.wait()
        wr.wait()
        for a, b in zip(got, _variables(peer, v)):
            assert torch.equal(a, b), (v, a, b)
    # A size mismatch between the packed message and the receive is a clear error.
    if rank == 0:
        backend.send([torch.ones(4), torch.ones(4)], 1, 4).wait()
    else:
        expect_error(lambda: backend.recv([torch.empty(4), torch.empty(3)], 0, 4).wait(),
                     ("size mismatch", "truncated"), "packed size mismatch")
    assert_group_works(ws)
    return True


def test_coalesced_list_send_recv():
    assert all(run_ranks(_list_exchange, 2, timeout=120, env={"COMMUX_COALESCE": "1"},
                         vs=[1, 2, 3, 4, 16]))


def _format_mismatch(rank, ws):
    backend = get_backend_obj()
    # Rank 0 packs (COMMUX_COALESCE=1), rank 1 does not: each direction fails on the
    # receiver with a message that names the setting, never with wrong data.
    if rank == 0:
        backend.send([torch.ones(4), torch.ones(4), torch.ones(4)], 1, 5).wait()
        msg = expect_error(lambda: backend.recv([torch.empty(2), torch.empty(2)], 1, 6).wait(),
                           "COMMUX_COALESCE", "separate messages meet a packed receive")
    else:
        msg = expect_error(
            lambda: backend.recv([torch.empty(4), torch.empty(4), torch.empty(4)], 0, 5).wait(),
            "COMMUX_COALESCE", "a packed message meets separate receives")
        backend.send([torch.ones(2), torch.ones(2)], 0, 6).wait()
    assert "rank" in msg, msg
    assert_group_works(ws)
    return True


def test_coalesce_mismatch_is_a_clear_error():
    assert all(run_ranks(_format_mismatch, 2, timeout=120, env={"COMMUX_COALESCE": ["1", "0"]}))


def _group_window(rank, ws):
    import commux

    assert commux.load_extension().config()["COMMUX_GROUP"] is True
    pg = dist.group.WORLD
    cpu = torch.device("cpu")
    right, left = (rank + 1) % ws, (rank - 1) % ws
    # batch_isend_irecv: 2V posts leave together at the end of the window.
    for v in (1, 4, 16):
        out = [torch.full((10 + i,), float(rank * 100 + i)) for i in range(v)]
        got = [torch.empty_like(t) for t in out]
        ops = [dist.P2POp(dist.isend, t, right, tag=i) for i, t in enumerate(out)]
        ops += [dist.P2POp(dist.irecv, t, left, tag=i) for i, t in enumerate(got)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        assert all(t.eq(left * 100 + i).all() for i, t in enumerate(got))
    # Collectives inside the window keep their order.
    pg._start_coalescing(cpu)
    a, b = torch.ones(3), torch.full((2,), float(rank))
    dist.all_reduce(a, async_op=True)
    dist.broadcast(b, 0, async_op=True)
    pg._end_coalescing(cpu).wait()
    assert a.eq(ws).all() and b.eq(0).all()
    # Waiting on an operation before its window ends could never finish: a clear error,
    # and the operation still runs once the window ends.
    pg._start_coalescing(cpu)
    t = torch.ones(2)
    work = dist.all_reduce(t, async_op=True)
    expect_error(work.wait, ("coalescing window", "COMMUX_GROUP"), "wait inside the window")
    pg._end_coalescing(cpu).wait()
    work.wait()
    assert t.eq(ws).all()
    assert_group_works(ws)
    return True


def test_group_window_defers_posts():
    assert all(run_ranks(_group_window, 3, timeout=120, env={"COMMUX_GROUP": "1"}))


def test_bad_boolean_option_is_a_clear_error():
    from harness import run_python

    result = run_python(
        "import torch.distributed as dist, commux; commux.register()\n"
        "dist.init_process_group('ucx', init_method='tcp://127.0.0.1:0', rank=0, world_size=1)\n",
        env={"COMMUX_COALESCE": "maybe"},
    )
    assert result.returncode != 0
    assert "COMMUX_COALESCE" in result.stderr and "boolean" in result.stderr, result.stderr
