"""One rank of a job started by Open MPI's mpirun with no RANK / WORLD_SIZE / MASTER_*:
commux (loaded by torch's backend autoload, not imported here) derives them from the
OMPI_COMM_WORLD_* variables when the ucx group's env:// rendezvous runs, not at import.
With ``--apply`` the job asks for them before init_process_group
(``commux.launcher.apply()``, to have LOCAL_RANK for a device). Run by test_launcher.py
(under mpirun, or under its stand-in that sets the same variables); prints
"mpirun ok rank R"."""

import os
import sys

before = dict(os.environ)

import torch
import torch.distributed as dist

expected_rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
expected_size = int(os.environ["OMPI_COMM_WORLD_SIZE"])
FILLED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# Importing torch (which loads commux) changes nothing in the environment.
assert dict(os.environ) == before, {k: v for k, v in os.environ.items() if before.get(k) != v}
assert not any(name in os.environ for name in FILLED), {n: os.environ.get(n) for n in FILLED}

if "--apply" in sys.argv[1:]:
    import commux.launcher

    launch = commux.launcher.apply()
    assert launch.launcher == "Open MPI", launch
    assert os.environ.get("LOCAL_RANK") == os.environ["OMPI_COMM_WORLD_LOCAL_RANK"], dict(os.environ)

dist.init_process_group("ucx")
# Filled by the ucx group's rendezvous, and left set as torchrun's are.
assert os.environ.get("LOCAL_RANK") == os.environ["OMPI_COMM_WORLD_LOCAL_RANK"], dict(os.environ)
assert os.environ.get("LOCAL_WORLD_SIZE") == os.environ["OMPI_COMM_WORLD_LOCAL_SIZE"]
assert os.environ.get("MASTER_ADDR") == "127.0.0.1", os.environ.get("MASTER_ADDR")
port = int(os.environ["MASTER_PORT"])
assert 20000 <= port < 32000, port
rank, size = dist.get_rank(), dist.get_world_size()
assert rank == expected_rank, (rank, expected_rank)
assert size == expected_size, (size, expected_size)
assert dist.get_backend() == "ucx", dist.get_backend()

# Every rank derived the same port (else it could not have joined, but say so plainly).
ports = torch.tensor([port, -port], dtype=torch.int64)
dist.all_reduce(ports, op=dist.ReduceOp.MAX)
assert ports.tolist() == [port, -port], (ports.tolist(), port)

t = torch.arange(8, dtype=torch.float64) + rank
dist.all_reduce(t)
expected = torch.arange(8, dtype=torch.float64) * size + size * (size - 1) / 2
assert torch.equal(t, expected), (t.tolist(), expected.tolist())

# A tagged pair between neighbours (0<->1, 2<->3, ...): receives posted in the other order.
if size % 2 == 0:
    peer = rank ^ 1
    if rank % 2 == 0:
        dist.send(torch.full((4,), 7.0 + rank), peer, tag=7)
        dist.send(torch.full((4,), 3.0 + rank), peer, tag=3)
    else:
        a, b = torch.zeros(4), torch.zeros(4)
        w3 = dist.irecv(b, peer, tag=3)
        w7 = dist.irecv(a, peer, tag=7)
        w3.wait()
        w7.wait()
        assert a.eq(7.0 + peer).all() and b.eq(3.0 + peer).all(), (a, b)

dist.barrier()
print(f"mpirun ok rank {rank}", flush=True)
dist.destroy_process_group()
