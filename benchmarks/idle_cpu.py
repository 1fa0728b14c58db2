"""CPU a rank burns while blocked in recv, and while idle, for ucx and gloo in one run.

    torchrun --standalone --nproc-per-node=2 benchmarks/idle_cpu.py [--seconds 3]

Rank 1 posts a blocking recv that rank 0 satisfies only after sleeping; rank 1 measures
its own process CPU time (all threads: progress threads included) across the recv.
"""

import argparse
import resource
import time

import torch
import torch.distributed as dist

import commux


def cpu_seconds() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def blocked_recv_cpu(group, seconds: float) -> float:
    buf = torch.zeros(4)
    dist.barrier(group=group)
    if dist.get_rank() == 0:
        time.sleep(seconds)
        dist.send(buf, dst=1, group=group)
        return 0.0
    c0 = cpu_seconds()
    dist.recv(buf, src=0, group=group)
    return cpu_seconds() - c0


def idle_cpu(group, seconds: float) -> float:
    dist.barrier(group=group)
    c0 = cpu_seconds()
    time.sleep(seconds)
    used = cpu_seconds() - c0
    dist.barrier(group=group)
    return used


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    commux.register()
    dist.init_process_group("ucx")
    groups = {"ucx": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    results = {}
    for name, group in groups.items():
        results[name] = (blocked_recv_cpu(group, args.seconds), idle_cpu(group, args.seconds))
    if dist.get_rank() == 1:
        print(f"CPU-seconds used by rank 1 over {args.seconds:.0f} s (all threads):")
        print(f"{'backend':8} {'blocked in recv':>16} {'idle':>8}")
        for name, (blocked, idle) in results.items():
            print(f"{name:8} {blocked:16.4f} {idle:8.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
