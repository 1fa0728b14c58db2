"""One rank of the MPI peer: ``mpirun -n R python -m commux.bench._mpi_worker SPEC.json``.

The same points, timing rules and calibration as the torch ranks (measure.py), through
mpi4py on two kinds of buffer, interleaved block by block in the same processes:
``mpi4py-torch`` (torch tensors, what a torch user calling MPI directly gets) and
``mpi4py-numpy`` (numpy arrays, mpi4py's home ground). Buffers are written before timing:
numpy's zeros are calloc'ed, whose untouched pages all read as the kernel's zero page.
Rank 0 writes ``mpi_result.json`` after every point.
"""

from __future__ import annotations

import json
import os
import sys


class MpiSync:
    def __init__(self, comm):
        self.comm = comm

    def barrier(self, group) -> None:
        self.comm.Barrier()

    def max_over_ranks(self, values):
        from mpi4py import MPI

        self.comm.Allreduce(MPI.IN_PLACE, values.numpy(), op=MPI.MAX)
        return values


def make_op(op: str, nbytes: int, rank: int, world_size: int, kind: str, comm):
    import numpy as np
    import torch
    from mpi4py import MPI

    from .sizes import element_count

    n = element_count(op, nbytes, world_size)

    def full(count: int):
        if kind == "torch":
            return torch.zeros(count, dtype=torch.float32)
        a = np.empty(count, dtype=np.float32)
        a.fill(0)
        return a

    if op == "p2p":
        buf = full(n)
        if rank == 0:
            def fn(_):
                comm.Send(buf, 1)
                comm.Recv(buf, 1)
        elif rank == 1:
            def fn(_):
                comm.Recv(buf, 0)
                comm.Send(buf, 0)
        else:
            def fn(_):
                pass
        return fn
    if op == "allreduce":
        buf = full(n)
        return lambda _: comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    if op == "allgather":
        inp, out = full(n), full(n * world_size)
        return lambda _: comm.Allgather(inp, out)
    if op == "reduce_scatter":
        inp, out = full(n), full(n // world_size)
        return lambda _: comm.Reduce_scatter_block(inp, out, op=MPI.SUM)
    if op == "broadcast":
        buf = full(n)
        return lambda _: comm.Bcast(buf, root=0)
    if op == "alltoall":
        inp, out = full(n), full(n)
        return lambda _: comm.Alltoall(inp, out)
    raise ValueError(f"unknown op {op!r}")


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    import torch
    from mpi4py import MPI

    from . import measure, sizes

    torch.set_num_threads(1)
    comm = MPI.COMM_WORLD
    rank, world_size = comm.Get_rank(), comm.Get_size()
    sync = MpiSync(comm)
    result = {"world_size": world_size, "points": [], "complete": False}
    path = os.path.join(spec["workdir"], "mpi_result.json")
    for op, requested in spec["points"]:
        nbytes = sizes.input_bytes(op, requested, world_size)
        fns = {f"mpi4py-{kind}": make_op(op, requested, rank, world_size, kind, comm)
               for kind in ("torch", "numpy")}
        groups = {name: name for name in fns}
        stats = measure.measure_point(lambda g: fns[g](g), groups, None, spec["rounds"],
                                      spec["block_seconds"], spec["max_iters"], sync=sync)
        if rank != 0:
            continue
        scale = 0.5 if op == "p2p" else 1.0
        for backend, s in stats.items():
            result["points"].append({
                "op": op, "ranks": world_size, "bytes": nbytes, "requested_bytes": requested,
                "backend": backend, "median_us": s["median_s"] * scale * 1e6,
                "min_us": s["min_s"] * scale * 1e6, "iterations": s["iterations"],
                "warmup": s["warmup"], "blocks": s["blocks"],
            })
        with open(path + ".tmp", "w") as f:
            json.dump(result, f)
        os.replace(path + ".tmp", path)
        if spec.get("progress", True):
            print(f"  [{world_size} ranks] {op:<14} {sizes.format_size(nbytes):>9}  "
                  + "  ".join(f"{b} {s['median_s'] * scale * 1e6:10.1f} us" for b, s in stats.items()),
                  flush=True)
    if rank == 0:
        result["complete"] = True
        with open(path, "w") as f:
            json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
