"""What commux opens to the network: on a one-host job, nothing on an outside interface."""

from __future__ import annotations

import os

import pytest

from harness import is_ucx, run_ranks, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("exposure"))


def _listening_addresses():
    """(address, port) of the TCP sockets this process listens on."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            next(f)
            for line in f:
                cols = line.split()
                local, state, inode = cols[1], cols[3], cols[9]
                if state != "0A" or inode not in inodes:  # 0A = LISTEN
                    continue
                addr_hex, port_hex = local.split(":")
                found.append((addr_hex, int(port_hex, 16)))
    return found


def _is_loopback(addr_hex: str) -> bool:
    if len(addr_hex) == 8:  # IPv4, little endian: 0100007F = 127.0.0.1
        return addr_hex.endswith("7F")
    # IPv6 ::1, or ::ffff:127.x.x.x
    return addr_hex == "00000000000000000000000001000000" or (
        addr_hex.startswith("0000000000000000FFFF0000") and addr_hex.endswith("7F"))


def _exposure(rank, world_size, store_port):
    import torch
    import torch.distributed as dist

    import commux

    assert commux.load_extension().config()["COMMUX_LOOPBACK_ONLY"] is True
    dist.all_reduce(torch.ones(1000))  # groups, endpoints and transports are all up
    t = torch.ones(1 << 20)
    if rank == 0:
        dist.send(t, dst=1)
    else:
        dist.recv(t, src=0)
    outside = [(a, p) for a, p in _listening_addresses() if not _is_loopback(a) and p != store_port]
    assert not outside, f"listening on outside interfaces: {outside}"
    return True


def test_one_host_job_listens_on_loopback_only():
    """torchrun's one-host environment (WORLD_SIZE == LOCAL_WORLD_SIZE): UCX is kept to the
    loopback device. The rendezvous store (torch's, on rank 0) is not commux's."""
    from harness import free_port

    port = free_port()
    env = {"WORLD_SIZE": 2, "LOCAL_WORLD_SIZE": 2, "MASTER_ADDR": "127.0.0.1",
           "MASTER_PORT": port}
    run_ranks(_exposure, 2, timeout=60, init="env", env=env, store_port=port)
