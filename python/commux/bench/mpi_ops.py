"""mpi4py's blocks inside the torch ranks of a ``--mpi`` run: the same points through
mpi4py on torch tensors (what a torch program calling MPI directly gets) and on numpy
arrays (mpi4py's home ground), interleaved block by block with ucx and gloo in the same
processes (runner.py starts them under mpirun), so that every column of a point is taken
side by side on this drifting machine.

Buffers are written before timing: numpy's zeros are calloc'ed, whose untouched pages all
read as the kernel's zero page.
"""

from __future__ import annotations

from .measure import TorchSync

BACKENDS = ("mpi4py-torch", "mpi4py-numpy")


class MpiSync:
    """measure_point's barriers and max over ranks for a world of MPI blocks only."""

    def __init__(self, comm):
        self.comm = comm

    def barrier(self, group) -> None:
        self.comm.Barrier()

    def max_over_ranks(self, values):
        from mpi4py import MPI

        self.comm.Allreduce(MPI.IN_PLACE, values.numpy(), op=MPI.MAX)
        return values


class MpiBesideTorchSync(TorchSync):
    """An MPI block (its group is its backend's name) starts after an MPI barrier, a torch
    block after its own group's barrier; the max over ranks stays on the gloo group."""

    def __init__(self, ctrl, comm):
        super().__init__(ctrl)
        self.comm = comm

    def barrier(self, group) -> None:
        if isinstance(group, str):
            self.comm.Barrier()
        else:
            super().barrier(group)


def beside(torch_fn, mpi_fns: dict):
    """One ``fn(group)`` for measure_point: MPI's for an MPI block, torch's otherwise."""
    return lambda group: mpi_fns[group]() if isinstance(group, str) else torch_fn(group)


def make_op(op: str, nbytes: int, rank: int, world_size: int, backend: str, comm):
    """One iteration of ``op`` through mpi4py as ``fn()``, buffers allocated and written."""
    import numpy as np
    import torch
    from mpi4py import MPI

    from .sizes import element_count

    n = element_count(op, nbytes, world_size)

    def full(count: int):
        if backend == "mpi4py-torch":
            return torch.zeros(count, dtype=torch.float32)
        a = np.empty(count, dtype=np.float32)
        a.fill(0)
        return a

    if op == "p2p":
        buf = full(n)
        if rank == 0:
            def fn():
                comm.Send(buf, 1)
                comm.Recv(buf, 1)
        elif rank == 1:
            def fn():
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
        else:
            def fn():
                pass
        return fn
    if op == "allreduce":
        buf = full(n)
        return lambda: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    if op == "allgather":
        inp, out = full(n), full(n * world_size)
        return lambda: comm.Allgather(inp, out)
    if op == "reduce_scatter":
        inp, out = full(n), full(n // world_size)
        return lambda: comm.Reduce_scatter_block(inp, out, op=MPI.SUM)
    if op == "broadcast":
        buf = full(n)
        return lambda: comm.Bcast(buf, root=0)
    if op == "alltoall":
        inp, out = full(n), full(n)
        return lambda: comm.Alltoall(inp, out)
    raise ValueError(f"unknown op {op!r}")
