"""The job every rank of scripts/multihost_check.sh runs (torchrun, N hosts x L ranks).

Ranks h*L .. h*L+L-1 run on host h (torchrun's node rank). Between ranks of one host commux
may use shared memory; between hosts everything goes over UCX (TCP over the hosts' veth).
Every check compares exact values and fails with an AssertionError naming the rank and
what was wrong; the last line of a rank that passed everything is
``multihost ok rank R host H``.

Checks, in order: (a) tagged point-to-point with the partner rank on the next host, the
receives posted in the reverse tag order of the sends, before and after the sends; (b)
receives from any source, one message from every other rank; (c) every collective at 8 and
1<<18 elements on the whole world (both hosts, UCX): all_reduce SUM/MAX/AVG, broadcast from
the last rank, reduce to rank 1, all_gather, all_gather_into_tensor, reduce_scatter_tensor,
all_to_all_single with uneven splits, gather, scatter, barrier (one line per host gives
each one's time in ms); (d) one subgroup per host (shared memory) and one per local rank
(across hosts), an all_reduce in each, and with commux exactly one shared-memory channel in
every rank, the host group's (the world and the cross-host groups must stay on UCX); (e)
DDP steps of a tiny CPU model, after which every rank holds the same parameters; (f) a
commux.halo exchange on a periodic 2-D grid of every rank, diagonals included, checked cell
by cell; (g) with commux, test_halo.py's seeded cases (every ghost cell against the global
array).

Environment (set by the script): MULTIHOST_BACKEND (default ucx), MULTIHOST_PG_TIMEOUT
(seconds, default 60), MULTIHOST_BREAK_DIR (the --break mode: after the first collective
each rank writes ready.<rank> there and waits for ``broken``, which the script creates once
it has cut host 1's link; the checks that follow must then fail), MULTIHOST_KILL (the
--kill mode: after the first collective the last rank (not its host's leader, unless
--nproc 1) is SIGKILLed;
every rank of the other hosts must fail its next all_reduce naming a rank of that host
within KILL_LIMIT_S, and prints ``multihost kill ok rank R: <the error>``).
"""

import os
import signal
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

from harness import shm_threads

BACKEND = os.environ.get("MULTIHOST_BACKEND", "ucx")
if BACKEND in ("ucx", "commux"):
    import commux  # noqa: F401  (torch's backend autoload registers it as well)

RANK = int(os.environ["RANK"])
WORLD = int(os.environ["WORLD_SIZE"])
L = int(os.environ["LOCAL_WORLD_SIZE"])
NODE = int(os.environ["GROUP_RANK"])
NHOSTS = WORLD // L
HOST = socket.gethostname()
assert WORLD % L == 0 and RANK // L == NODE, (
    f"rank {RANK}: expected ranks numbered host by host (world {WORLD}, "
    f"{L} per host, node {NODE})"
)

SIZES = (8, 1 << 18)  # one message / recursive steps; chunked rings and chains
K = 1 << 20           # value scale: element values are (rank * K + index), exact in int64


def check(cond, what):
    if not cond:
        raise AssertionError(f"rank {RANK} on {HOST}: {what}")


def check_equal(got, want, what):
    if got.dtype != want.dtype or got.shape != want.shape or not torch.equal(got, want):
        bad = ""
        if got.shape == want.shape:
            diff = (got != want).nonzero()
            if diff.numel():
                i = tuple(diff[0].tolist())
                bad = (f"; {diff.shape[0]} elements differ, first at {list(i)}: "
                       f"got {got[i].item()} want {want[i].item()}")
        raise AssertionError(
            f"rank {RANK} on {HOST}: {what}: got {got.dtype}{list(got.shape)} "
            f"want {want.dtype}{list(want.shape)}{bad}"
        )


TIMES = {}  # (what, n) -> seconds, printed per rank after the collectives


class timed:
    """``with timed("op", n): ...`` adds the block's wall time to TIMES."""

    def __init__(self, what, n):
        self.key = (what, n)

    def __enter__(self):
        self.t = time.perf_counter()

    def __exit__(self, *exc):
        TIMES[self.key] = TIMES.get(self.key, 0.0) + time.perf_counter() - self.t


def shm_channels(expected):
    """Channels (commux-shm threads) in this process; waits briefly for a new thread to have
    set its name."""
    deadline = time.monotonic() + 2.0
    while True:
        n = shm_threads()
        if n == expected or time.monotonic() > deadline:
            return n
        time.sleep(0.05)


def ramp(n, base=0):
    return torch.arange(n, dtype=torch.int64) + base


# --------------------------------------------------------------------------------------
# (a) tagged point-to-point across hosts, receives in reverse tag order
# --------------------------------------------------------------------------------------
NTAGS = 8


def p2p_value(src, dst, tag, n):
    return ramp(n, src * 100 * K + dst * 10 * K + tag * K)


def check_tagged_p2p():
    dst = (RANK + L) % WORLD  # same local rank on the next host
    src = (RANK - L) % WORLD  # same local rank on the previous host
    check(dst // L != NODE and src // L != NODE, "p2p partners must be on other hosts")
    for n in SIZES:
        for receives_first in (True, False):
            sends, recvs, bufs = [], [], {}

            def post_recvs():
                for tag in reversed(range(NTAGS)):  # reverse of the send order
                    bufs[tag] = torch.full((n,), -1, dtype=torch.int64)
                    recvs.append((tag, dist.irecv(bufs[tag], src=src, tag=tag)))

            def post_sends():
                for tag in range(NTAGS):
                    sends.append(dist.isend(p2p_value(RANK, dst, tag, n), dst=dst, tag=tag))

            if receives_first:
                post_recvs()
                dist.barrier()  # every receive is posted before any message leaves
                post_sends()
            else:
                post_sends()
                dist.barrier()  # the messages are (or may be) there before the receives
                post_recvs()
            for tag, w in recvs:
                w.wait()
                check_equal(bufs[tag], p2p_value(src, RANK, tag, n),
                            f"tagged irecv from rank {src} tag {tag} n={n} "
                            f"(receives {'before' if receives_first else 'after'} sends)")
            for w in sends:
                w.wait()
    dist.barrier()


# --------------------------------------------------------------------------------------
# (b) receives from any source
# --------------------------------------------------------------------------------------
def check_any_source():
    for tag, n in ((0, 4), (1, SIZES[1])):
        sends = [
            dist.isend(ramp(n, (RANK * 16 + r) * K), dst=r, tag=tag)
            for r in range(WORLD) if r != RANK
        ]
        seen = []
        for _ in range(WORLD - 1):
            t = torch.full((n,), -1, dtype=torch.int64)
            sender = dist.recv(t, tag=tag)  # no src: any source, returns the sender
            check(sender is not None and 0 <= sender < WORLD and sender != RANK,
                  f"any-source recv (tag {tag}) returned sender {sender!r}")
            check_equal(t, ramp(n, (sender * 16 + RANK) * K),
                        f"any-source recv tag {tag} n={n}: payload does not match the "
                        f"reported sender {sender}")
            seen.append(sender)
        check(sorted(seen) == [r for r in range(WORLD) if r != RANK],
              f"any-source recv tag {tag}: senders {sorted(seen)}, want every other rank")
        for w in sends:
            w.wait()
    dist.barrier()


# --------------------------------------------------------------------------------------
# (c) every collective, exact values, on the whole world
# --------------------------------------------------------------------------------------
def check_collectives():
    W = WORLD
    for n in SIZES:
        idx = ramp(n)
        # all_reduce SUM (int64): sum_r (r*K + i)
        t = ramp(n, RANK * K)
        with timed("all_reduce SUM", n):
            dist.all_reduce(t, op=dist.ReduceOp.SUM)
        check_equal(t, idx * W + K * W * (W - 1) // 2, f"all_reduce SUM n={n}")
        # all_reduce MAX: each element has a different winner
        t = ((idx + RANK) % W) * K + idx
        with timed("all_reduce MAX", n):
            dist.all_reduce(t, op=dist.ReduceOp.MAX)
        check_equal(t, (W - 1) * K + idx, f"all_reduce MAX n={n}")
        # all_reduce SUM and AVG on float32 (integer values below 2^24: exact sums)
        f = (idx % 1000).to(torch.float32) * 4 + RANK
        s = f.clone()
        with timed("all_reduce SUM f32", n):
            dist.all_reduce(s, op=dist.ReduceOp.SUM)
        fsum = (idx % 1000).to(torch.float32) * 4 * W + W * (W - 1) / 2
        check_equal(s, fsum, f"all_reduce SUM float32 n={n}")
        a = f.clone()
        with timed("all_reduce AVG f32", n):
            dist.all_reduce(a, op=dist.ReduceOp.AVG)
        favg = ((idx % 1000).to(torch.float64) * 4 * W + W * (W - 1) / 2) / W
        if W & (W - 1) == 0:  # power of two: the mean is exact whatever the order
            check_equal(a, favg.to(torch.float32), f"all_reduce AVG float32 n={n}")
        else:  # 1/W is rounded: allow float32 rounding, nothing more
            err = (a.double() - favg).abs().max().item()
            check(err <= 1e-6 * favg.abs().max().item(),
                  f"all_reduce AVG float32 n={n}: max error {err}")
        # broadcast from the last rank (on the last host)
        root = W - 1
        t = ramp(n, 7 * K) if RANK == root else torch.full((n,), -1, dtype=torch.int64)
        with timed("broadcast", n):
            dist.broadcast(t, src=root)
        check_equal(t, ramp(n, 7 * K), f"broadcast from {root} n={n}")
        # reduce (SUM) to rank 1
        t = ramp(n, RANK * K)
        with timed("reduce", n):
            dist.reduce(t, dst=1, op=dist.ReduceOp.SUM)
        if RANK == 1:
            check_equal(t, idx * W + K * W * (W - 1) // 2, f"reduce SUM to 1 n={n}")
        # all_gather
        outs = [torch.full((n,), -1, dtype=torch.int64) for _ in range(W)]
        with timed("all_gather", n):
            dist.all_gather(outs, ramp(n, RANK * K))
        for r in range(W):
            check_equal(outs[r], ramp(n, r * K), f"all_gather n={n}: block of rank {r}")
        # all_gather_into_tensor
        out = torch.full((W * n,), -1, dtype=torch.int64)
        with timed("all_gather_into_tensor", n):
            dist.all_gather_into_tensor(out, ramp(n, RANK * K))
        want = torch.cat([ramp(n, r * K) for r in range(W)])
        check_equal(out, want, f"all_gather_into_tensor n={n}")
        # reduce_scatter_tensor (SUM): input block j = j*K*1000 + rank*K + i
        inp = torch.cat([ramp(n, j * 1000 * K + RANK * K) for j in range(W)])
        out = torch.full((n,), -1, dtype=torch.int64)
        with timed("reduce_scatter_tensor", n):
            dist.reduce_scatter_tensor(out, inp, op=dist.ReduceOp.SUM)
        check_equal(out, idx * W + RANK * 1000 * K * W + K * W * (W - 1) // 2,
                    f"reduce_scatter_tensor n={n}")
        # all_to_all_single, uneven splits: rank s sends c(s, d) elements to rank d
        unit = 1 if n == SIZES[0] else n // (2 * W)

        def c(s, d):
            return unit * ((s + 2 * d) % 3 + 1) if (s + d) % 4 else 0  # some empty pieces

        in_splits = [c(RANK, d) for d in range(W)]
        out_splits = [c(s, RANK) for s in range(W)]
        inp = torch.cat([ramp(c(RANK, d), RANK * 100 * K + d * K) for d in range(W)])
        out = torch.full((sum(out_splits),), -1, dtype=torch.int64)
        with timed("all_to_all_single", n):
            dist.all_to_all_single(out, inp, out_splits, in_splits)
        want = torch.cat([ramp(c(s, RANK), s * 100 * K + RANK * K) for s in range(W)])
        check_equal(out, want, f"all_to_all_single uneven n={n} splits in {in_splits} "
                               f"out {out_splits}")
        # gather to rank 1
        dst = 1
        glist = [torch.full((n,), -1, dtype=torch.int64) for _ in range(W)] if RANK == dst else None
        with timed("gather", n):
            dist.gather(ramp(n, RANK * K), gather_list=glist, dst=dst)
        if RANK == dst:
            for r in range(W):
                check_equal(glist[r], ramp(n, r * K), f"gather to {dst} n={n}: block {r}")
        # scatter from the last rank
        src = W - 1
        slist = [ramp(n, r * 3 * K) for r in range(W)] if RANK == src else None
        t = torch.full((n,), -1, dtype=torch.int64)
        with timed("scatter", n):
            dist.scatter(t, scatter_list=slist, src=src)
        check_equal(t, ramp(n, RANK * 3 * K), f"scatter from {src} n={n}")
        with timed("barrier", n):
            dist.barrier()
    print_times()
    if BACKEND != "gloo":
        # The world group spans hosts: one channel among this host's ranks (host-aware
        # collectives), none across hosts.
        hosts = dist.distributed_c10d._get_default_group()._get_backend(
            torch.device("cpu")).hosts()
        want = [list(range(h * L, (h + 1) * L)) for h in range(NHOSTS)] if L > 1 else []
        check(hosts == want, f"the world group's hosts are {hosts}, expected {want}")
        got = shm_channels(1 if L > 1 else 0)
        check(got == (1 if L > 1 else 0),
              f"the world group spans hosts; expected one shared-memory channel per host "
              f"with several ranks, found {got}")


def print_times():
    if RANK % L:
        return  # one rank per host is enough
    for n in SIZES:
        row = ", ".join(f"{w} {t * 1e3:.1f}" for (w, m), t in TIMES.items() if m == n)
        print(f"rank {RANK} on {HOST}: ms at n={n}: {row}", flush=True)


# --------------------------------------------------------------------------------------
# (d) subgroups: one per host (shared memory) and one per local rank (across hosts)
# --------------------------------------------------------------------------------------
def check_subgroups():
    # Every rank creates every group, in the same order.
    per_host = [dist.new_group(list(range(h * L, (h + 1) * L))) for h in range(NHOSTS)]
    per_local = [dist.new_group(list(range(l, WORLD, L))) for l in range(L)]
    mine, across = per_host[NODE], per_local[RANK % L]
    for n in SIZES:
        t = ramp(n, RANK * K)
        dist.all_reduce(t, group=mine)
        members = range(NODE * L, (NODE + 1) * L)
        check_equal(t, ramp(n) * L + K * sum(members), f"all_reduce in host group {NODE} n={n}")
        t = ramp(n, RANK * K)
        dist.all_reduce(t, group=across)
        members = range(RANK % L, WORLD, L)
        check_equal(t, ramp(n) * NHOSTS + K * sum(members),
                    f"all_reduce in cross-host group of local rank {RANK % L} n={n}")
    dist.barrier(group=mine)
    if BACKEND != "gloo" and L > 1:
        got = shm_channels(2)
        check(got == 2, f"expected exactly two shared-memory channels (the world group's and "
                        f"this host's group's, both among this host's ranks), found {got}")
    dist.barrier()


# --------------------------------------------------------------------------------------
# (e) DDP
# --------------------------------------------------------------------------------------
def check_ddp():
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(1000 + RANK)  # different initial weights: DDP must broadcast rank 0's
    model = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4)
    )
    ddp = DDP(model, bucket_cap_mb=0.001)  # several buckets
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(RANK)  # different data on every rank
    before = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    for _ in range(4):
        x, y = torch.randn(8, 16, generator=gen), torch.randn(8, 4, generator=gen)
        opt.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        opt.step()
    vec = torch.nn.utils.parameters_to_vector(model.parameters()).detach().clone()
    check(not torch.equal(vec, before), "DDP: the parameters did not change")
    outs = [torch.empty_like(vec) for _ in range(WORLD)]
    dist.all_gather(outs, vec)
    for r in range(WORLD):
        check_equal(outs[r], outs[0], f"DDP: parameters of rank {r} differ from rank 0's")


def check_halo():
    """(f) commux.halo across hosts: a periodic 2-D grid of every rank (27-point, so edges and
    corners cross hosts too), two fields of two dtypes; after each of two steps every ghost
    cell holds the global array's value across its face. On gloo the same exchange runs as
    torch p2p calls."""
    import commux.halo as halo

    grid = halo.CartGrid(ndim=2, periodic=True, diagonals=True)
    nx, ny = 5, 3
    gx, gy = nx * grid.dims[0], ny * grid.dims[1]
    cx, cy = grid.coords
    fields = [torch.full((nx + 2, ny + 2), -1.0, dtype=torch.float64),
              torch.full((nx + 2, ny + 2), -1, dtype=torch.int32)]
    ex = halo.HaloExchange(fields, widths=1, grid=grid)
    check(ex.native == (BACKEND in ("ucx", "commux")), f"halo: native path {ex.native}")

    def value(f, step, x, y):
        return (f * 100000 + step * 1000 + (x % gx) * gy + (y % gy))

    for step in range(3):
        for f, t in enumerate(fields):
            for i in range(1, nx + 1):
                for j in range(1, ny + 1):
                    t[i, j] = value(f, step, cx * nx + i - 1, cy * ny + j - 1)
        ex.exchange()
        for f, t in enumerate(fields):
            for i in range(nx + 2):
                for j in range(ny + 2):
                    want = value(f, step, cx * nx + i - 1, cy * ny + j - 1)
                    check(t[i, j].item() == want,
                          f"halo: step {step} field {f} cell ({i}, {j}) is {t[i, j].item()}, "
                          f"not {want} (grid {grid.dims})")
    try:
        with open("/proc/sys/kernel/yama/ptrace_scope") as f:
            readable = f.read().strip() == "0"  # else sibling ranks cannot read each other
    except OSError:
        readable = True
    if ex.native and readable and os.environ.get("COMMUX_SHM") != "0":
        # From the second step on, the other rank of this host (ranks 2h and 2h+1 share
        # host h) goes through shared memory, the other hosts' ranks through UCX.
        sharing = ex.sharing()
        partner = RANK ^ 1
        check(sharing.get(partner) == (True, True) and
              not any(s or r for peer, (s, r) in sharing.items() if peer // 2 != RANK // 2),
              f"halo: neighbours through shared memory {sharing} (this rank {RANK})")


def check_halo_cases():
    """(g) test_halo's seeded cases across hosts (1-3-D grids, periodic or not, uneven
    splits, widths 0-2, several dtypes and fields, partitioned steps), each checked against
    the global array: the neighbours on this host through shared memory, the others over
    TCP. The seed is rank 0's, printed for a replay."""
    import random

    import test_halo

    seed = [random.randrange(1 << 30)]
    dist.broadcast_object_list(seed, src=0)
    print(f"rank {RANK}: halo cases seed {seed[0]}", flush=True)
    test_halo._exchange_cases(RANK, WORLD, seed[0], cases=4, one_host=False)


def wait_for_break(break_dir):
    """--break mode: say we are past the first collective, then wait until the script has
    cut host 1's link (bounded: the script's own timeout is the backstop)."""
    open(os.path.join(break_dir, f"ready.{RANK}"), "w").close()
    deadline = time.monotonic() + 120
    while not os.path.exists(os.path.join(break_dir, "broken")):
        check(time.monotonic() < deadline, "--break: the link was never cut")
        time.sleep(0.1)
    print(f"rank {RANK} on {HOST}: link cut, continuing (this must fail)", flush=True)


KILL_LIMIT_S = 10.0


def say_line(line):
    """One write for the whole line: the ranks of a host share its log, the script greps
    whole lines, and unbuffered print writes the text and the newline apart (two ranks'
    lines then run together, and the script misses one)."""
    sys.stdout.flush()
    os.write(1, (line + "\n").encode())


def check_kill():
    """--kill mode. No rank of the other hosts watches the victim (only its own host's
    ranks do, by pidfd): they learn of the death from their hosts' leaders, who hear it from
    the victim's leader over UCX. torchrun then stops the victim's host, so the error may
    name its leader instead, which the leaders before it watch through UCX's error handling."""
    victim = WORLD - 1
    dist.all_reduce(torch.ones(1000))  # the host layout, the relay, the routes in use
    dist.barrier()
    if RANK == victim:
        time.sleep(0.3)
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1000))
    except dist.DistBackendError as e:
        elapsed = time.monotonic() - start
        msg = str(e)
    else:
        check(False, f"--kill: the all_reduce completed although rank {victim} was killed")
    named = [r for r in range(WORLD) if f"rank {r} died" in msg]
    check(len(named) == 1 and named[0] // L == victim // L,
          f"--kill: the error does not name a rank of host {victim // L}: {msg}")
    check(elapsed < KILL_LIMIT_S, f"--kill: took {elapsed:.2f} s to see the death: {msg}")
    if NODE == victim // L:
        # Alive until torchrun stops this host: the others must learn of the victim from
        # this host's leader, not from the leader's own exit.
        time.sleep(60)
        return
    # The survivors leave together: a group torn down closes its connections.
    store = dist.distributed_c10d._get_default_store()
    store.set(f"kill-checked/{RANK}", "1")
    store.wait([f"kill-checked/{r}" for r in range(WORLD) if r // L != victim // L])
    dist.destroy_process_group()
    say_line(f"multihost kill ok rank {RANK} ({elapsed:.2f}s): {msg}")


def main():
    pg_timeout = timedelta(seconds=float(os.environ.get("MULTIHOST_PG_TIMEOUT", "60")))
    t0 = time.monotonic()
    dist.init_process_group(BACKEND, timeout=pg_timeout)
    check(dist.get_rank() == RANK and dist.get_world_size() == WORLD,
          f"init gave rank/world {dist.get_rank()}/{dist.get_world_size()}")
    # The hosts really differ: every rank publishes its host name.
    names = [None] * WORLD
    dist.all_gather_object(names, HOST)
    check(all(names[r] == names[NODE * L] for r in range(NODE * L, (NODE + 1) * L)),
          f"host names within host {NODE} differ: {names}")
    check(len(set(names)) == NHOSTS, f"expected {NHOSTS} distinct host names, got {names}")

    if os.environ.get("MULTIHOST_KILL"):
        check_kill()
        return
    break_dir = os.environ.get("MULTIHOST_BREAK_DIR")
    if break_dir:
        wait_for_break(break_dir)

    steps = [
        ("tagged p2p", check_tagged_p2p),
        ("any-source", check_any_source),
        ("collectives", check_collectives),
        ("subgroups", check_subgroups),
        ("ddp", check_ddp),
        ("halo", check_halo),
    ]
    if BACKEND in ("ucx", "commux"):
        steps.append(("halo cases", check_halo_cases))
    for name, fn in steps:
        t = time.monotonic()
        fn()
        print(f"rank {RANK} on {HOST}: {name} ok ({time.monotonic() - t:.2f}s)", flush=True)
    dist.barrier()
    dist.destroy_process_group()
    say_line(f"multihost ok rank {RANK} host {HOST} ({time.monotonic() - t0:.1f}s)")


if __name__ == "__main__":
    try:
        main()
    except BaseException:
        # Print first, then leave without tearing the group down: peers may be blocked on us.
        import traceback

        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)
