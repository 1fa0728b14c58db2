"""Two ranks on a commux that runs on a system UCX (built against it, or a wheel build with
COMMUX_UCX_HOME): all_reduce, tagged p2p, one-sided windows; run by test_system_ucx.py. Prints 'OK <ucx version> <libucp path>'.
With --no-cuda the build must have left its CUDA unit out."""

import os
import sys
import tempfile

import torch
import torch.multiprocessing as mp


def rank_main(rank, world, path, queue, no_cuda):
    import torch.distributed as dist

    import commux

    commux.register()
    dist.init_process_group("ucx", init_method=f"file://{path}", rank=rank, world_size=world)
    t = torch.arange(300_000, dtype=torch.float64) * (rank + 1)
    dist.all_reduce(t)  # large enough for the ring
    assert torch.equal(t, torch.arange(300_000, dtype=torch.float64) * 3)
    if rank == 0:
        dist.send(torch.full((5,), 7.0), 1, tag=11)
        dist.send(torch.full((5,), 3.0), 1, tag=10)
    else:
        a, b = torch.zeros(5), torch.zeros(5)
        wa = dist.irecv(a, 0, tag=10)
        wb = dist.irecv(b, 0, tag=11)
        wa.wait()
        wb.wait()
        assert a.eq(3).all() and b.eq(7).all(), (a, b)
    # One-sided windows on this UCX: mapped (the default), and an unmoved tensor (owning=False),
    # whose small puts, put_signal and get after flush travel as UCX messages, large puts by CMA.
    peer = 1 - rank
    for owning, n in ((True, 5), (False, 5), (False, 300_000)):
        buf = torch.zeros(n)
        win = dist._new_window()
        win.tensor_register(buf, owning)
        win.put(torch.full((n,), float(rank + 1)), peer, 0, False)
        win.signal(peer, False)
        win.wait_signal(peer, False)
        assert torch.equal(buf, torch.full((n,), float(peer + 1))), (owning, n, win.path(peer))
        dist.barrier()
        win.put_signal(torch.full((n,), float(rank + 5)), peer, 0)
        win.wait_signal(peer, False)
        assert torch.equal(buf, torch.full((n,), float(peer + 5))), (owning, n, win.path(peer))
        back = torch.zeros(n)
        win.flush(peer)
        win.get(back, peer, 0)
        assert torch.equal(back, torch.full((n,), float(rank + 5))), (owning, n, win.path(peer))
        win.tensor_deregister()
    C = commux.load_extension()
    if no_cuda:
        assert C.cuda_compiled() is False and C.cuda_device_count() == 0
    queue.put((rank, C.ucx_version(), C.ucx_library_path()))
    dist.destroy_process_group()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    path = os.path.join(tempfile.mkdtemp(), "store")
    procs = [ctx.Process(target=rank_main, args=(r, 2, path, queue, "--no-cuda" in sys.argv)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    codes = [p.exitcode for p in procs]
    if codes != [0, 0]:
        for p in procs:
            p.kill()
        sys.exit(f"ranks exited with {codes}")
    rank, version, library = queue.get(timeout=5)
    print("OK", version, library)
