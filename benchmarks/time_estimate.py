"""How close commux's time estimates (torch's dist._time_estimator) come to measured times.

    COMMUX_SHM=1 torchrun --standalone --nproc-per-node=2 benchmarks/time_estimate.py
    COMMUX_SHM=0 torchrun --standalone --nproc-per-node=2 benchmarks/time_estimate.py

For each collective and size, rank 0 prints the estimate (the models of
collectives/estimate.hpp, on the path the call takes), the measured time per call (the
median of --blocks blocks, each the max over ranks of the block's mean, every call
synchronous as a training step would make it) and their ratio. Every buffer is written
before it is timed.
"""

import argparse
import statistics
import time

import torch
import torch.distributed as dist

import commux  # noqa: F401  (registers the backend)

OPS = ["allreduce", "broadcast", "allgather", "reduce_scatter", "alltoall", "barrier", "p2p"]


def calls(op, n, ws, rank):
    t = torch.full((n,), float(rank + 1))
    o = torch.full((n,), 0.5)
    rs = torch.full((n // ws,), 0.5)
    ag = torch.full((n * ws,), 0.5)
    peer = rank ^ 1
    def p2p():
        if peer >= ws:
            return
        if rank % 2 == 0:
            dist.send(t, peer)
            dist.recv(o, peer)
        else:
            dist.recv(o, peer)
            dist.send(t, peer)
    return {
        "allreduce": lambda: dist.all_reduce(t),
        "broadcast": lambda: dist.broadcast(t, 0),
        "allgather": lambda: dist.all_gather_into_tensor(ag, t),
        "reduce_scatter": lambda: dist.reduce_scatter_tensor(rs, t),
        "alltoall": lambda: dist.all_to_all_single(o, t),
        "barrier": dist.barrier,
        # One round trip: each rank's send and receive, as its estimate adds them.
        "p2p": p2p,
    }[op]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ops", default=",".join(OPS))
    p.add_argument("--sizes", default="8,1024,65536,1048576,16777216",
                   help="bytes of each rank's tensor (float32)")
    p.add_argument("--blocks", type=int, default=5)
    p.add_argument("--block-ms", type=float, default=40.0, help="target length of a block")
    args = p.parse_args()
    dist.init_process_group("ucx")
    ws, rank = dist.get_world_size(), dist.get_rank()
    if rank == 0:
        print("| op | ranks | bytes | estimate us | measured us | estimate / measured |")
        print("|---|---|---|---|---|---|")
    ratios = []
    for op in args.ops.split(","):
        for size in [int(s) for s in args.sizes.split(",")]:
            if op == "barrier" and size != 8:
                continue
            n = max(size // 4, ws)
            n -= n % ws
            call = calls(op, n, ws, rank)
            for _ in range(3):
                call()
            with dist._time_estimator() as e:
                call()
            estimate = torch.tensor([e.estimated_time], dtype=torch.float64)
            dist.all_reduce(estimate, op=dist.ReduceOp.MAX)
            # Calls per block: about --block-ms by the first timed calls.
            t0 = time.perf_counter()
            for _ in range(3):
                call()
            once = max((time.perf_counter() - t0) / 3, 1e-6)
            iters = torch.tensor([max(3, int(args.block_ms / 1e3 / once))])
            dist.all_reduce(iters, op=dist.ReduceOp.MAX)
            blocks = []
            for _ in range(args.blocks):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(int(iters)):
                    call()
                mean = torch.tensor([(time.perf_counter() - t0) / int(iters) * 1e6],
                                    dtype=torch.float64)
                dist.all_reduce(mean, op=dist.ReduceOp.MAX)
                blocks.append(float(mean))
            measured = statistics.median(blocks)
            ratio = float(estimate) / measured
            ratios.append(ratio)
            if rank == 0:
                print(f"| {op} | {ws} | {n * 4} | {float(estimate):.1f} | {measured:.1f} | "
                      f"{ratio:.2f} |", flush=True)
    if rank == 0:
        ratios.sort()
        print(f"estimate / measured over {len(ratios)} points: median {statistics.median(ratios):.2f}, "
              f"range {ratios[0]:.2f}-{ratios[-1]:.2f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
