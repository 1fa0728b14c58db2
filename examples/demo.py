"""commux demo: a correctness check and a latency comparison against gloo in one job.

    torchrun --standalone --nproc-per-node=2 examples/demo.py                  # commux (UCX)
    torchrun --standalone --nproc-per-node=2 examples/demo.py --backend gloo   # without commux

1. The default process group runs on the chosen backend (``ucx`` = commux).
2. A distributed heat-equation stencil (examples/halo_exchange.py) exercises tagged
   isend/irecv, all_reduce, broadcast and barrier and must match a serial solve to
   1e-12; the job exits non-zero otherwise.
3. A gloo group is created next to it and examples/latency_table.py times both groups
   interleaved in the same run, so the comparison is not skewed by machine noise.

With ``--backend gloo`` the same steps run without commux (for debugging the demo
itself, or before commux is built); the table then compares the default gloo group
with the new one, an A/A run whose ratio column shows the measurement noise.
"""

from __future__ import annotations

import argparse
import sys

import torch.distributed as dist

from halo_exchange import format_stats, run
from latency_table import print_latencies


def register_commux() -> None:
    """Make the ``ucx``/``commux`` backend known to torch.distributed, or exit with a hint."""
    try:
        import commux
    except ImportError as e:
        sys.exit(
            f"error: cannot import commux ({e}).\n"
            "Build and install it first: run `pip install .` in the commux repository root,\n"
            "or run this demo with `--backend gloo` to use torch's built-in backend."
        )
    commux.register()


def main() -> int:
    parser = argparse.ArgumentParser(description="commux demo: halo-exchange check and latency vs gloo")
    parser.add_argument(
        "--backend", default="ucx", choices=("ucx", "commux", "gloo"), help="backend of the default group"
    )
    args = parser.parse_args()

    if args.backend != "gloo":
        register_commux()
    dist.init_process_group(backend=args.backend)
    rank = dist.get_rank()
    if rank == 0:
        print(f"commux demo: {dist.get_world_size()} ranks, default backend {args.backend!r}\n", flush=True)

    stats = run()
    if rank == 0:
        print(format_stats(stats) + "\n", flush=True)
    if not stats["ok"]:
        dist.destroy_process_group()
        return 1

    # The world group keeps the backend's name unless that would clash with the new gloo group.
    world_name = args.backend if args.backend != "gloo" else "gloo-world"
    groups = {world_name: dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
    print_latencies(groups)

    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
