"""CUDA tensors through commux: every operation, stream ordering, futures and DDP, with
2 ranks sharing one GPU (processes on one device talk through cuda_ipc) or one GPU each.
Without a GPU every multi-rank test here skips; the build check runs everywhere."""

import os

import pytest
import torch
import torch.distributed as dist

from harness import expect_error, get_backend_obj, run_ranks

pytestmark = pytest.mark.ucx_only

HAVE_GPU = torch.cuda.is_available() and torch.cuda.device_count() > 0
needs_gpu = pytest.mark.skipif(not HAVE_GPU, reason="needs a CUDA GPU (none visible here)")
R = dist.ReduceOp


def test_cuda_unit_is_compiled_with_a_cuda_torch():
    """The CUDA code is built whenever torch has CUDA, GPU or not, so it cannot rot."""
    import commux

    ext = commux.load_extension()
    assert ext.cuda_compiled() == (torch.version.cuda is not None)
    assert ext.cuda_device_count() == (torch.cuda.device_count() if HAVE_GPU else 0)


def _use_gpu(rank):
    """This rank's GPU (ranks share the GPUs round robin), made current."""
    dev = torch.device("cuda", rank % torch.cuda.device_count())
    torch.cuda.set_device(dev)
    return dev


def _p2p(rank, ws):
    dev = _use_gpu(rank)
    peer = 1 - rank
    # Tags match exactly, in any order of posting.
    if rank == 0:
        for tag in (7, 3, 11):
            dist.send(torch.full((1000,), float(tag), device=dev), peer, tag=tag)
    else:
        got = {t: torch.empty(1000, device=dev) for t in (11, 7, 3)}
        works = [dist.irecv(got[t], peer, tag=t) for t in (11, 7, 3)]
        for w in works:
            w.wait()
        for t, x in got.items():
            assert torch.equal(x.cpu(), torch.full((1000,), float(t))), t
    # Large (rendezvous), non-contiguous, several tensors in one call, empty.
    big = torch.arange(4 << 20, device=dev, dtype=torch.float32) + rank
    back = torch.empty_like(big)
    reqs = dist.batch_isend_irecv([dist.P2POp(dist.isend, big, peer), dist.P2POp(dist.irecv, back, peer)])
    for r in reqs:
        r.wait()
    assert torch.equal(back, torch.arange(4 << 20, device=dev, dtype=torch.float32) + peer)
    strided = (torch.arange(24, device=dev, dtype=torch.float64) + 100 * rank).reshape(4, 6).t()
    into = torch.empty(6, 4, device=dev, dtype=torch.float64)
    backend = get_backend_obj()
    ws_ = backend.send([strided, torch.empty(0, device=dev)], peer, 5)
    wr = backend.recv([into, torch.empty(0, device=dev)], peer, 5)
    ws_.wait()
    wr.wait()
    assert torch.equal(into.cpu(), (torch.arange(24, dtype=torch.float64) + 100 * peer).reshape(4, 6).t())
    return True


@needs_gpu
def test_cuda_point_to_point():
    assert all(run_ranks(_p2p, 2, timeout=180))


def _stream_order(rank, ws):
    """A send on a busy side stream must carry what that stream computes, not what was in
    the buffer when send() was called; results are visible on the receiver's stream."""
    dev = _use_gpu(rank)
    side = torch.cuda.Stream(dev)
    x = torch.zeros(1 << 20, device=dev)
    with torch.cuda.stream(side):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time before the fill
        x.fill_(rank + 1.0)
        if rank == 0:
            w = dist.isend(x, 1, tag=1)
        else:
            w = dist.irecv(x, 0, tag=1)
        w.wait()
        total = x.sum()  # queued on the side stream after the receive
        y = torch.full((1000,), float(rank + 1), device=dev)
        torch.cuda._sleep(50_000_000)
        y.mul_(2)
        dist.all_reduce(y)
        ysum = y.sum()
    torch.cuda.synchronize()
    if rank == 1:
        assert total.item() == float(1 << 20), total.item()  # rank 0's 1.0s
    assert torch.equal(y.cpu(), torch.full((1000,), float(2 * sum(range(1, ws + 1)))))
    assert ysum.item() == 1000 * 2 * sum(range(1, ws + 1))
    return True


@needs_gpu
def test_cuda_stream_ordering():
    assert all(run_ranks(_stream_order, 2, timeout=180))


def _collectives(rank, ws):
    dev = _use_gpu(rank)
    for n in (1, 1000, 1 << 20):  # recursive doubling, and the chunked ring past 256 KiB
        for op, dtype in ((R.SUM, torch.float32), (R.MAX, torch.int64), (R.AVG, torch.float64),
                          (R.PRODUCT, torch.float32), (R.BXOR, torch.int32)):
            base = torch.arange(n, dtype=torch.float64) % 7 + 1
            x = (base * (rank + 1)).to(dtype)
            cpu = [(base * (r + 1)).to(dtype) for r in range(ws)]
            want = cpu[0].clone()
            for c in cpu[1:]:
                if op in (R.SUM, R.AVG):
                    want = want + c
                elif op == R.MAX:
                    want = torch.maximum(want, c)
                elif op == R.PRODUCT:
                    want = want * c
                else:
                    want = want ^ c
            if op == R.AVG:
                want = want / ws
            g = x.to(dev)
            dist.all_reduce(g, op=op)
            assert torch.allclose(g.cpu(), want), (n, op, dtype)
        t = torch.full((n,), float(rank), device=dev)
        dist.reduce(t, dst=ws - 1)
        if rank == ws - 1:
            assert torch.equal(t.cpu(), torch.full((n,), float(sum(range(ws)))))
        b = torch.full((n,), float(rank), device=dev)
        dist.broadcast(b, src=0)
        assert torch.equal(b.cpu(), torch.zeros(n))
        outs = [torch.empty(n, device=dev) for _ in range(ws)]
        dist.all_gather(outs, torch.full((n,), float(rank), device=dev))
        assert all(torch.equal(o.cpu(), torch.full((n,), float(r))) for r, o in enumerate(outs))
        flat = torch.empty(n * ws, device=dev)
        dist.all_gather_into_tensor(flat, torch.full((n,), float(rank), device=dev))
        assert torch.equal(flat.cpu(), torch.arange(ws).repeat_interleave(n).float())
        rs = torch.empty(n, device=dev)
        dist.reduce_scatter_tensor(rs, torch.arange(n * ws, device=dev, dtype=torch.float32))
        assert torch.equal(rs.cpu(), ws * torch.arange(rank * n, (rank + 1) * n, dtype=torch.float32))
        rl = torch.empty(n, device=dev)
        dist.reduce_scatter(rl, [torch.full((n,), float(r + rank), device=dev) for r in range(ws)])
        assert torch.equal(rl.cpu(), torch.full((n,), float(ws * rank + sum(range(ws)))))
        a2a = torch.empty(n * ws, device=dev)
        dist.all_to_all_single(a2a, torch.full((n * ws,), float(rank), device=dev))
        assert torch.equal(a2a.cpu(), torch.arange(ws).repeat_interleave(n).float())
        outl = [torch.empty(n, device=dev) for _ in range(ws)]
        dist.all_to_all(outl, [torch.full((n,), float(10 * rank + r), device=dev) for r in range(ws)])
        assert all(torch.equal(o.cpu(), torch.full((n,), float(10 * r + rank))) for r, o in enumerate(outl))
        gl = [torch.empty(n, device=dev) for _ in range(ws)] if rank == 0 else None
        dist.gather(torch.full((n,), float(rank), device=dev), gl, dst=0)
        if rank == 0:
            assert all(torch.equal(o.cpu(), torch.full((n,), float(r))) for r, o in enumerate(gl))
        sc = torch.empty(n, device=dev)
        dist.scatter(sc, [torch.full((n,), float(r), device=dev) for r in range(ws)] if rank == 0 else None, src=0)
        assert torch.equal(sc.cpu(), torch.full((n,), float(rank)))
        dist.barrier()
    # Uneven all_to_all_single splits: rank r sends j + 1 elements to rank j.
    send_splits = [j + 1 for j in range(ws)]
    inp = torch.cat([torch.full((j + 1,), float(10 * rank + j)) for j in range(ws)]).to(dev)
    out = torch.empty(ws * (rank + 1), device=dev)
    dist.all_to_all_single(out, inp, [rank + 1] * ws, send_splits)
    want = torch.cat([torch.full((rank + 1,), float(10 * i + rank)) for i in range(ws)])
    assert torch.equal(out.cpu(), want)
    # One dtype per coalesced reduction (as gloo): a mix is refused, and nothing is lost.
    mixed = [torch.ones(5, device=dev), torch.ones(3, device=dev, dtype=torch.float64)]
    expect_error(lambda: get_backend_obj().allreduce_coalesced(mixed).wait(), ("one dtype",),
                 "allreduce_coalesced of float32 and float64")
    pieces = [torch.ones(5, device=dev) * rank, torch.ones(3, device=dev)]
    get_backend_obj().allreduce_coalesced(pieces).wait()
    assert torch.equal(pieces[0].cpu(), torch.full((5,), float(sum(range(ws)))))
    assert torch.equal(pieces[1].cpu(), torch.full((3,), float(ws)))
    return True


@needs_gpu
@pytest.mark.parametrize("world_size", [2, 3])
def test_cuda_every_collective(world_size):
    assert all(run_ranks(_collectives, world_size, timeout=300))


def _chunked(rank, ws):
    """Rings that move and fold CUDA blocks in many pieces (COMMUX_CUDA_CHUNK_BYTES)."""
    import commux

    assert commux.load_extension().config()["COMMUX_CUDA_CHUNK_BYTES"] == 4096
    dev = _use_gpu(rank)
    for n in (ws, 1000 * ws + 3, 50_001):  # one element per rank, uneven blocks, many pieces
        x = torch.arange(n, dtype=torch.float64, device=dev) * (rank + 1)
        dist.all_reduce(x)
        assert torch.equal(x.cpu(), torch.arange(n, dtype=torch.float64) * (ws * (ws + 1) / 2)), n
    out = torch.empty(20_000, device=dev)
    dist.reduce_scatter_tensor(out, torch.full((20_000 * ws,), float(rank + 1), device=dev))
    assert torch.equal(out.cpu(), torch.full((20_000,), float(ws * (ws + 1) / 2)))
    return True


@needs_gpu
def test_cuda_rings_in_many_pieces():
    env = {"COMMUX_CUDA_CHUNK_BYTES": "4096", "COMMUX_ALLREDUCE_RING_MIN_BYTES": "1024"}
    assert all(run_ranks(_chunked, 3, timeout=120, env=env))


def _errors_and_futures(rank, ws):
    dev = _use_gpu(rank)
    backend = get_backend_obj()
    expect_error(lambda: backend.allreduce([torch.ones(3, device=dev), torch.ones(3)]).wait(),
                 ("one device",), "allreduce with a CUDA and a CPU tensor")
    expect_error(lambda: dist.all_gather_into_tensor(torch.empty(6), torch.ones(3, device=dev)),
                 ("one device",), "all_gather_into_tensor CUDA input, CPU output")
    # The group still works, and futures carry CUDA tensors (as DDP's comm hooks need).
    x = torch.ones(4, device=dev)
    fut = dist.all_reduce(x, async_op=True).get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2).wait()
    assert torch.equal(doubled.cpu(), torch.full((4,), 2.0 * ws))
    return True


@needs_gpu
def test_cuda_mixed_devices_error_and_futures():
    assert all(run_ranks(_errors_and_futures, 2, timeout=120))


def _ddp(rank, ws):
    from torch.nn.parallel import DistributedDataParallel as DDP

    dev = _use_gpu(rank)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4)).to(dev)
    ref = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    ref.load_state_dict({k: v.cpu() for k, v in model.state_dict().items()})
    ddp = DDP(model, device_ids=[dev.index] if torch.cuda.device_count() > 1 else None, bucket_cap_mb=0.001)
    inputs = [torch.randn(8, 32, generator=torch.Generator().manual_seed(r)) for r in range(ws)]
    ddp(inputs[rank].to(dev)).sum().backward()
    sum(ref(i).sum() for i in inputs).backward()
    for p, q in zip(ddp.module.parameters(), ref.parameters()):
        assert torch.allclose(p.grad.cpu(), q.grad / ws, atol=1e-5), (p.grad, q.grad / ws)
    return True


@needs_gpu
def test_cuda_ddp_matches_single_process():
    assert all(run_ranks(_ddp, 2, timeout=240))


def _lifetime_and_more_ops(rank, ws):
    import datetime

    dev = _use_gpu(rank)
    peer = 1 - rank
    # The caller drops its send buffers at once and the caching allocator hands the memory
    # to new tensors: the transfers must still carry the original values.
    if rank == 0:
        works = [dist.isend(torch.full((1 << 18,), float(i), device=dev), peer, tag=i) for i in range(8)]
        junk = [torch.full((1 << 18,), -1.0, device=dev) for _ in range(8)]
        for w in works:
            w.wait()
        del junk
    else:
        for i in range(8):
            x = torch.empty(1 << 18, device=dev)
            dist.recv(x, peer, tag=i)
            assert torch.equal(x.cpu(), torch.full((1 << 18,), float(i))), i
    # Receive from any source.
    if rank == 0:
        y = torch.empty(10, device=dev)
        src = dist.recv(y, tag=77)
        assert src == 1 and torch.equal(y.cpu(), torch.full((10,), 5.0))
    else:
        dist.send(torch.full((10,), 5.0, device=dev), 0, tag=77)
    # Coalesced all_gather / reduce_scatter over CUDA tensors (the coalescing manager).
    from torch.distributed.distributed_c10d import _coalescing_manager

    ins = [torch.full((3,), float(rank), device=dev), torch.full((5,), float(rank + 10), device=dev)]
    outs = [torch.empty(3 * ws, device=dev), torch.empty(5 * ws, device=dev)]
    with _coalescing_manager(async_ops=True) as cm:
        for o, i in zip(outs, ins):
            dist.all_gather_into_tensor(o, i)
    cm.wait()
    assert torch.equal(outs[0].cpu(), torch.arange(ws).repeat_interleave(3).float())
    assert torch.equal(outs[1].cpu(), (torch.arange(ws) + 10).repeat_interleave(5).float())
    rs_in = [torch.ones(4 * ws, device=dev), torch.full((2 * ws,), 2.0, device=dev)]
    rs_out = [torch.empty(4, device=dev), torch.empty(2, device=dev)]
    with _coalescing_manager(async_ops=True) as cm:
        for o, i in zip(rs_out, rs_in):
            dist.reduce_scatter_tensor(o, i)
    cm.wait()
    assert torch.equal(rs_out[0].cpu(), torch.full((4,), float(ws)))
    assert torch.equal(rs_out[1].cpu(), torch.full((2,), 2.0 * ws))
    # all_gather_coalesced (lists of lists, mixed dtypes) on the backend.
    backend = get_backend_obj()
    inputs = [torch.full((2,), float(rank), device=dev), torch.full((3,), rank, device=dev, dtype=torch.int32)]
    lists = [[torch.empty(2, device=dev), torch.empty(3, device=dev, dtype=torch.int32)] for _ in range(ws)]
    backend.allgather_coalesced(lists, inputs).wait()
    for r, (f, i) in enumerate(lists):
        assert torch.equal(f.cpu(), torch.full((2,), float(r))) and torch.equal(i.cpu(), torch.full((3,), r, dtype=torch.int32))
    # A receive nobody answers times out, and the group keeps working.
    if rank == 0:
        w = dist.irecv(torch.empty(4, device=dev), peer, tag=999)
        expect_error(lambda: w.wait(timeout=datetime.timedelta(milliseconds=300)),
                     ("timed out",), "CUDA receive that never matches")
    z = torch.ones(3, device=dev)
    dist.all_reduce(z)
    assert torch.equal(z.cpu(), torch.full((3,), float(ws)))
    return True


@needs_gpu
def test_cuda_buffer_lifetime_any_source_coalesced_and_timeout():
    assert all(run_ranks(_lifetime_and_more_ops, 2, timeout=180))


def _device_left_alone(rank, ws):
    # Every rank's thread is on cuda:0 and moves tensors on cuda:1: starting the operation
    # inline on this thread must not leave cuda:1 current.
    torch.cuda.set_device(0)
    other = torch.device("cuda", 1)
    peer = 1 - rank
    x = torch.full((1000,), float(rank), device=other)
    y = torch.empty(1000, device=other)
    for w in dist.batch_isend_irecv([dist.P2POp(dist.isend, x, peer), dist.P2POp(dist.irecv, y, peer)]):
        w.wait()
    assert torch.cuda.current_device() == 0, "p2p changed this thread's current device"
    dist.all_reduce(x)
    assert torch.cuda.current_device() == 0, "all_reduce changed this thread's current device"
    assert torch.equal(y.cpu(), torch.full((1000,), float(peer)))
    assert torch.equal(x.cpu(), torch.full((1000,), float(ws * (ws - 1) // 2)))
    return True


@pytest.mark.skipif(not HAVE_GPU or torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_cuda_operation_leaves_the_callers_device_current():
    assert all(run_ranks(_device_left_alone, 2, timeout=120))


def _stranded_behind_stream(rank, ws):
    import datetime

    import commux

    dev = _use_gpu(rank)
    dist.barrier()
    if rank == 1:
        return True
    # The receive waits for the stream, which sleeps ~2 s on the GPU; the engine stops
    # (as at interpreter exit) before the stream gets there. The Work must fail, not wait.
    torch.cuda._sleep(4_000_000_000)
    w = dist.irecv(torch.empty(4, device=dev), 1, tag=5)
    commux.load_extension()._shutdown()
    expect_error(lambda: w.wait(timeout=datetime.timedelta(seconds=20)), ("shut down",),
                 "a CUDA receive still behind its stream when the engine stopped")
    torch.cuda.synchronize()
    return True


@needs_gpu
def test_cuda_operation_behind_its_stream_fails_when_the_engine_stops():
    assert all(run_ranks(_stranded_behind_stream, 2, timeout=120))


def _window(rank, ws):
    """One-sided windows on CUDA tensors: every peer through UCX messages (device memory
    moved by UCX), this rank's own window through a device copy; each call waits for the
    caller's stream, so data a kernel just wrote is what moves."""
    from torch._C._distributed_c10d import WindowAccessType

    dev = _use_gpu(rank)
    peer = 1 - rank
    assert dist._supports_window()
    for n in (3, 3000, 1_000_003):  # inline-sized for host memory, and rendezvous sizes
        buf = torch.zeros(n + 5, device=dev)
        win = dist._new_window(buf)
        assert win.path(peer) == "messages" and win.path(rank) == "self", win.path(peer)
        assert win.get_attr(peer).access_type == WindowAccessType.SEPARATE
        # Written by a kernel on the current stream just before the put.
        data = torch.arange(n, device=dev, dtype=torch.float32) * 3 + rank
        win.put(data, peer, 5, False)
        win.signal(peer, False)
        win.wait_signal(peer, False)
        want = torch.arange(n, dtype=torch.float32) * 3 + peer
        assert torch.equal(buf[5:].cpu(), want), f"n={n}: put from rank {peer} differs"
        assert torch.equal(buf[:5].cpu(), torch.zeros(5)), "a put wrote before its offset"
        dist.barrier()
        win.put_signal(data + 1, peer, 5)
        win.wait_signal(peer, False)
        assert torch.equal(buf[5:].cpu(), want + 1), f"n={n}: put_signal differs"
        dist.barrier()
        win.put(data + 2, peer, 5, True)
        win.flush(peer)
        back = torch.empty(n, device=dev)
        win.get(back, peer, 5)
        assert torch.equal(back.cpu(), (data + 2).cpu()), f"n={n}: get after flush differs"
        # This rank's own window: a device copy, and map_remote_tensor is a view of it.
        win.put(torch.full((2,), 9.0, device=dev), rank, 0, False)
        mine = torch.empty(2, device=dev)
        win.get(mine, rank, 0)
        assert torch.equal(mine.cpu(), torch.full((2,), 9.0))
        assert win.map_remote_tensor(rank).data_ptr() == buf.data_ptr()
        expect_error(lambda: win.map_remote_tensor(peer), "not mappable", "map of a cuda peer")
        # A host tensor into a device window is refused, and the window still works.
        expect_error(lambda: win.put(torch.ones(2), peer, 0, False), "cuda memory",
                     "cpu tensor into a cuda window", exc_types=(ValueError,))
        dist.barrier()
        win.tensor_deregister()
    # A CUDA tensor into a CPU window is refused the same way.
    host = dist._new_window(torch.zeros(4))
    expect_error(lambda: host.put(torch.ones(2, device=dev), peer, 0, False), "cpu memory",
                 "cuda tensor into a cpu window", exc_types=(ValueError,))
    host.put(torch.full((4,), float(rank)), peer, 0, False)
    host.signal(peer, False)
    host.wait_signal(peer, False)
    host.tensor_deregister()
    return True


@needs_gpu
@pytest.mark.skipif(not hasattr(torch._C._distributed_c10d, "WindowAccessType"),
                    reason=f"torch {torch.__version__} has no c10d Window API (2.15 or newer)")
def test_cuda_window_put_signal_get():
    assert all(run_ranks(_window, 2, timeout=180))
