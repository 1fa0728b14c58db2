"""A standalone loop of one collective, for the questions commux.bench's short interleaved
blocks cannot answer on an oversubscribed machine: per-call time over long blocks, and
each rank's CPU time per call (process_time, every thread of the process).

    torchrun --standalone --nproc-per-node=4 benchmarks/collective_loop.py \
        --op broadcast --bytes 8 --iters 2000 --blocks 5

Prints, on rank 0, the best and the median block (each rank's, then the max over ranks)
and the largest CPU time per call of any rank. Run it alternately with the builds or
settings being compared (COMMUX_CHECK_COLLECTIVES, COMMUX_SHM_SPIN_US, PYTHONPATH): the
machine's speed drifts by 2x within minutes, so only neighbouring runs compare.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import commux  # noqa: F401  (registers the backend)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--op", default="broadcast",
                   choices=["broadcast", "allreduce", "allgather", "barrier", "alltoall", "reduce_scatter"])
    p.add_argument("--bytes", type=int, default=8, help="bytes per rank's tensor (float32)")
    p.add_argument("--iters", type=int, default=2000, help="calls per block")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--warmup", type=int, default=200)
    p.add_argument("--backend", default="ucx")
    args = p.parse_args()
    dist.init_process_group(args.backend)
    ws = dist.get_world_size()
    n = max(args.bytes // 4, ws)
    t, o, rs, ag = torch.zeros(n), torch.zeros(n), torch.zeros(n // ws), torch.zeros(n * ws)
    call = {
        "broadcast": lambda: dist.broadcast(t, 0),
        "allreduce": lambda: dist.all_reduce(t),
        "allgather": lambda: dist.all_gather_into_tensor(ag, t),
        "barrier": dist.barrier,
        "alltoall": lambda: dist.all_to_all_single(o, t),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(rs, t),
    }[args.op]
    for _ in range(args.warmup):
        call()
    per_call, cpu = [], []
    for _ in range(args.blocks):
        dist.barrier()
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.iters):
            call()
        per_call.append((time.perf_counter() - t0) / args.iters * 1e6)
        cpu.append((time.process_time() - c0) / args.iters * 1e6)
    x = torch.tensor([min(per_call), statistics.median(per_call), statistics.median(cpu)],
                     dtype=torch.float64)
    dist.all_reduce(x, op=dist.ReduceOp.MAX)
    if dist.get_rank() == 0:
        print(f"{args.op} {ws} ranks {n * 4} B: best block {x[0]:.1f} us, median block "
              f"{x[1]:.1f} us per call; CPU per call and rank (max) {x[2]:.1f} us", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
