"""Would `commux.register_buffer(tensor)` pay? It would map a tensor once so that large
sends and receives from it skip UCX's per-operation memory registration. This measures the
most it could save: a ping-pong of rendezvous-size messages from the same buffers every
time (after the first, UCX's registration cache has them: what a registered buffer would
give) against buffers never sent before (written before timing, so no page faults; each
pays whatever registration the transports need). Same processes, blocks alternating.

    python3 benchmarks/register_buffer.py [--sizes 262144,1048576,16777216,67108864]

Also prints which of UCX's memory domains register host memory at all (ucx_info -d): on
shared memory, CMA and TCP none does, so nothing is there to save.
"""

import argparse
import os
import statistics
import subprocess
import time

import torch
import torch.distributed as dist

from commux.bench.window import spawn_pair


def _rank(rank, port, sizes, blocks, fresh_count, env, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **env)
    dist.init_process_group("ucx", rank=rank, world_size=2)
    pg = dist.group.WORLD
    peer = 1 - rank
    rows = []
    for nbytes in sizes:
        n = nbytes // 4
        same = torch.ones(n)
        pool = [torch.full((n,), float(i)) for i in range(fresh_count * blocks)]  # written

        def pingpong(buf):
            if rank == 0:
                pg.send([buf], peer, 0).wait()
                pg.recv([buf], peer, 0).wait()
            else:
                pg.recv([buf], peer, 0).wait()
                pg.send([buf], peer, 0).wait()

        pingpong(same)
        times = {"reused": [], "fresh": []}
        for b in range(blocks):
            for name in times:
                dist.barrier()
                t0 = time.perf_counter()
                for i in range(fresh_count):
                    pingpong(same if name == "reused" else pool[b * fresh_count + i])
                took = torch.tensor([time.perf_counter() - t0])
                dist.all_reduce(took, op=dist.ReduceOp.MAX)
                times[name].append(took.item() / fresh_count / 2)
        rows.append((nbytes, {k: statistics.median(v) for k, v in times.items()}))
        del pool
    if rank == 0:
        out.put(rows)
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", default="262144,1048576,16777216,67108864")
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--per-block", type=int, default=6, help="messages per block (fresh buffers each)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    try:
        import libucx

        root = os.path.dirname(libucx.__file__)
        env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(root, "lib"))
        info = subprocess.run([os.path.join(root, "bin", "ucx_info"), "-d"], capture_output=True,
                              text=True, timeout=60, env=env).stdout
        domain = None
        for line in info.splitlines():
            if "Memory domain:" in line:
                domain = line.split(":", 1)[1].strip()
            elif "register:" in line and domain:
                print(f"memory domain {domain}: {line.split(':', 1)[1].strip()}")
        print("(a domain not listed here registers no host memory)")
    except (ImportError, OSError, subprocess.SubprocessError) as e:
        print(f"ucx_info not available: {e}")
    print("| transport | bytes | reused buffer us | fresh buffer us | fresh / reused |")
    print("|---|---:|---:|---:|---:|")
    for label, env in (("shared memory (default)", {}), ("tcp (UCX_TLS=tcp,self)", {"UCX_TLS": "tcp,self"})):
        rows = spawn_pair(_rank, (sizes, args.blocks, args.per_block, env), timeout=1200)
        for nbytes, t in rows:
            print(f"| {label} | {nbytes} | {t['reused'] * 1e6:.1f} | {t['fresh'] * 1e6:.1f} | "
                  f"{t['fresh'] / t['reused']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
