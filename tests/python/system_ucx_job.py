"""Two ranks on a commux that runs on a system UCX (built against it, or a wheel build with
COMMUX_UCX_HOME); run by test_system_ucx.py. Prints 'OK <ucx version> <libucp path>'.
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
