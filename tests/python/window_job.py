"""A torchrun job of one-sided windows for scripts/multihost_check.sh --job: a ring of
put+signal+wait, put_signal, get after flush, at sizes on both sides of the eager limit,
between ranks of one host (mapped and cma) and of different hosts (messages, UCX over TCP). Every
result is checked exactly; each rank prints "multihost ok rank R host H paths {...}" at the end.

    scripts/multihost_check.sh --job tests/python/window_job.py
"""

import os
import socket
import sys

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("ucx")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    right, left = (rank + 1) % world, (rank - 1) % world
    paths = set()
    for n, owning in ((1, True), (2048, False), (2049, True), (300_001, False)):
        buf = torch.zeros(n + 3, dtype=torch.float32)
        win = dist._new_window()
        # An owning registration moves the tensor to shared memory (mapped on one host);
        # one without ownership leaves it in place (cma on one host).
        win.tensor_register(buf, owning)
        path = win.path(right)
        paths.add(path)
        same_host = rank // local == right // local
        want = ("mapped" if owning else "cma") if same_host else "messages"
        assert path == want, f"rank {rank} -> {right}: path {path}, want {want}"
        data = (torch.arange(n, dtype=torch.float32) * 3 + rank) % 1001
        win.put(data, right, 3, False)
        win.signal(right, False)
        win.wait_signal(left, False)
        expect = (torch.arange(n, dtype=torch.float32) * 3 + left) % 1001
        assert torch.equal(buf[3:], expect), f"rank {rank}: ring data from {left} differs (n={n})"
        dist.barrier()
        win.put_signal(data + 1, right, 3)
        win.wait_signal(left, False)
        assert torch.equal(buf[3:], expect + 1), f"rank {rank}: put_signal from {left} differs"
        dist.barrier()
        win.put(data + 2, right, 3, True)
        win.flush(right)
        back = torch.zeros(n)
        win.get(back, right, 3)
        assert torch.equal(back, data + 2), f"rank {rank}: get after flush from {right} differs"
        win.tensor_deregister()
    # The line the script counts (and shows); the paths tell the test which ways were used.
    # One write: the ranks of a host share its log, and print writes the newline apart.
    sys.stdout.flush()
    os.write(1, f"multihost ok rank {rank} host {socket.gethostname()} paths {sorted(paths)}\n".encode())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
