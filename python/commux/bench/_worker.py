"""One rank of one benchmark world: ``python -m commux.bench._worker SPEC.json``.

The parent (runner.py) starts every rank with RANK, WORLD_SIZE, MASTER_ADDR and
MASTER_PORT set (or, for a ``--mpi`` run, under mpirun, which gives the rank) and waits
with a hard timeout. The default group runs on ucx; a gloo group over the same ranks is
both the comparison backend and the control channel (calibration agreement, gathering
times), so even a ucx-only run has one. In a ``--mpi`` run, mpi4py's blocks join ucx's
and gloo's at every point (mpi_ops.py).

Rank 0 rewrites ``result.json`` after every point, so a world that dies or times out
still leaves the points it finished. Every rank rewrites ``state.<rank>`` before every
block: when the parent has to kill a hung world, these say which op, size, backend and
block each rank was in. SIGUSR1 dumps every thread's Python stack to stderr.
"""

from __future__ import annotations

import datetime
import faulthandler
import json
import os
import signal
import subprocess
import sys


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _floor(spec: dict, rank: int, ctrl) -> dict:
    """Rank 0 measures the floors while the other ranks wait in a gloo barrier."""
    import torch.distributed as dist

    from . import floor

    result: dict = {}
    try:
        group = floor.fake_group()  # collective: every rank creates it
        fake_error = None
    except Exception as error:  # noqa: BLE001 - fall back to a separate fake world
        group, fake_error = None, repr(error)
    if rank == 0:
        if group is not None:
            result.update(floor.fake_p2p_us(group))
            result.update(floor.fake_ops_us(group))
            result["fake_source"] = "fake subgroup of the ucx world"
        else:
            result["fake_source"] = f"separate fake world (subgroup failed: {fake_error})"
            try:
                out = subprocess.run(
                    [sys.executable, "-m", "commux.bench.floor", str(dist.get_world_size())],
                    capture_output=True, text=True, timeout=120, check=True,
                )
                result.update(json.loads(out.stdout.strip().splitlines()[-1]))
            except (subprocess.SubprocessError, ValueError, IndexError) as error:
                # The floor is context, not the measurement: report it missing, go on.
                result["fake_source"] += f"; that failed too: {error!r}"
        for nbytes in spec["memcpy_sizes"]:
            result[f"memcpy_gbps_{nbytes}"] = floor.memcpy_gbps(nbytes)
    dist.barrier(group=ctrl)
    return result


def main(argv: list[str]) -> int:
    with open(argv[0]) as f:
        spec = json.load(f)
    workdir = spec["workdir"]
    comm = None
    if spec.get("mpi"):
        # Under mpirun (runner.py): the rank comes from Open MPI, and stderr goes to the
        # rank's own file as it does for the ranks runner.py starts itself. MPI starts
        # before torch and commux, as an MPI program's would.
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["LOCAL_RANK"] = os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK", os.environ["RANK"])
        log = os.open(os.path.join(workdir, f"rank{os.environ['RANK']}.stderr"),
                      os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 2)
        os.close(log)
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    _write_atomic(os.path.join(workdir, f"pid.{rank}"), str(os.getpid()))
    faulthandler.register(signal.SIGUSR1, all_threads=True)

    import torch
    import torch.distributed as dist

    import commux

    from . import mpi_ops, measure, sizes

    torch.set_num_threads(1)
    commux.register()
    timeout = datetime.timedelta(seconds=spec["pg_timeout_s"])
    dist.init_process_group("ucx", timeout=timeout)
    gloo = dist.new_group(backend="gloo", timeout=timeout)
    groups = {name: {"ucx": dist.group.WORLD, "gloo": gloo}[name] for name in spec["backends"]}
    sync = measure.TorchSync(gloo)
    if comm is not None:
        groups.update((name, name) for name in mpi_ops.BACKENDS)
        sync = mpi_ops.MpiBesideTorchSync(gloo, comm)
    state_path = os.path.join(workdir, f"state.{rank}")

    def state(text: str) -> None:
        _write_atomic(state_path, text + "\n")

    result = {"world_size": world_size, "points": [], "complete": False}
    result_path = os.path.join(workdir, "result.json")

    # How the ranks were launched, as the kernel has it: the CPUs each rank may run on.
    affinity = [None] * world_size
    dist.all_gather_object(affinity, sorted(os.sched_getaffinity(0)), group=gloo)
    result["affinity"] = affinity

    state("floor: fake-backend p2p and memcpy")
    result["floor"] = _floor(spec, rank, gloo)
    if rank == 0:
        _write_atomic(result_path, json.dumps(result, indent=1))

    for op, requested in spec["points"]:
        nbytes = sizes.input_bytes(op, requested, world_size)
        fn = measure.make_op(op, requested, rank, world_size)
        if comm is not None:
            fn = mpi_ops.beside(fn, {name: mpi_ops.make_op(op, requested, rank, world_size, name, comm)
                                         for name in mpi_ops.BACKENDS})
        where = f"op={op} bytes={nbytes}"
        stats = measure.measure_point(
            fn, groups, gloo, spec["rounds"], spec["block_seconds"], spec["max_iters"],
            on_block=lambda backend, block: state(f"{where} backend={backend} block={block}"), sync=sync,
        )
        del fn
        if rank != 0:
            continue
        line = []
        for backend, s in stats.items():
            # p2p times a round trip per iteration; report one way.
            scale = 0.5 if op == "p2p" else 1.0
            result["points"].append({
                "op": op, "ranks": world_size, "bytes": nbytes, "requested_bytes": requested,
                "backend": backend,
                "median_us": s["median_s"] * scale * 1e6, "min_us": s["min_s"] * scale * 1e6,
                "iterations": s["iterations"], "warmup": s["warmup"], "blocks": s["blocks"],
            })
            line.append(f"{backend} {s['median_s'] * scale * 1e6:10.1f} us")
        if "gloo" in stats and "ucx" in stats:
            line.append(f"gloo/ucx {stats['gloo']['median_s'] / stats['ucx']['median_s']:5.2f}x")
        _write_atomic(result_path, json.dumps(result, indent=1))
        if spec.get("progress", True):
            print(f"  [{world_size} ranks] {op:<14} {sizes.format_size(nbytes):>9}  " + "  ".join(line),
                  flush=True)

    state("destroy_process_group")
    dist.barrier(group=gloo)
    dist.destroy_process_group()
    if rank == 0:
        result["complete"] = True
        _write_atomic(result_path, json.dumps(result, indent=1))
    state("done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
