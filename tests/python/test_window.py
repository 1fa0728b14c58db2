"""One-sided windows through torch's own c10d API (dist._new_window): put, signal,
wait_signal, map_remote_tensor, get_attr, registration, on every path a put can take.

Paths (commux/window_ucx.hpp): "cma" (same host, ordinary tensors: process_vm_writev),
"mapped" (same host, tensors in shared memory: a copy into the mapping), "messages"
(COMMUX_SHM=0: UCX messages, what another host gets). Every result is checked exactly.
"""

import datetime
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest
import torch
import torch.distributed as dist
import torch._C._distributed_c10d as _c10d

if not hasattr(_c10d, "WindowAccessType"):
    pytest.skip(f"torch {torch.__version__} has no c10d Window API (torch 2.15 or newer)",
                allow_module_level=True)
from torch._C._distributed_c10d import PutOptions, WaitSignalOptions, WindowAccessType  # noqa: E402

from harness import assert_group_works, expect_error, run_ranks

# name: (environment, tensor made with share_memory_(), the path puts take)
PATHS = {
    # COMMUX_WINDOW_SHARE=0 keeps an ordinary tensor where it is: CMA on one host.
    "cma": ({"COMMUX_WINDOW_SHARE": "0"}, False, "cma"),
    "mapped": ({}, True, "mapped"),
    "messages": ({"COMMUX_SHM": "0"}, False, "messages"),
    # By default registration moves an ordinary tensor's storage into shared memory in place.
    "moved": ({}, False, "mapped"),
}


def _window_tensor(n, dtype, shared):
    t = torch.zeros(n, dtype=dtype)
    return t.share_memory_() if shared else t


def _pattern(rank, n, dtype, salt=0):
    # Values that survive every dtype exactly (int8 wraps alike on both sides).
    v = (torch.arange(n, dtype=torch.int64) * 7 + rank * 13 + salt) % 97
    return v.to(dtype)


def _ring(rank, world_size, counts, dtypes, shared, path):
    assert dist._supports_window()
    for dtype in dtypes:
        for n in counts:
            buf = _window_tensor(n + 5, dtype, shared)
            win = dist._new_window(buf)
            right, left = (rank + 1) % world_size, (rank - 1) % world_size
            assert win.path(right) == path and win.path(rank) == "self", win.path(right)
            win.put(_pattern(rank, n, dtype), right, 5, False)
            win.signal(right, False)
            win.wait_signal(left, False)
            want = _pattern(left, n, dtype)
            assert torch.equal(buf[5:], want), f"{dtype} x {n}: wrong data from rank {left}"
            assert torch.equal(buf[:5], torch.zeros(5, dtype=dtype)), "put wrote before offset"
            win.tensor_deregister()
    return True


@pytest.mark.parametrize("path", sorted(PATHS))
def test_ring_put_signal_wait_exact(path):
    env, shared, path = PATHS[path]
    run_ranks(_ring, 3, timeout=180, env=env, counts=[1, 3, 2048, 2049, 100_003, 1_000_003],
              dtypes=[torch.float32, torch.int64, torch.bfloat16, torch.int8], shared=shared,
              path=path)


def _semantics(rank, world_size, shared, path):
    peer = 1 - rank
    buf = _window_tensor(64, torch.float32, shared)
    win = dist._new_window(buf)
    assert win.path(peer) == path, win.path(peer)
    # get_attr: UNIFIED where the window can be loaded and stored directly.
    assert win.get_attr(rank).access_type == WindowAccessType.UNIFIED
    want = WindowAccessType.UNIFIED if path == "mapped" else WindowAccessType.SEPARATE
    assert win.get_attr(peer).access_type == want, (shared, win.get_attr(peer).access_type)

    # Many puts, then one signal: all of them are visible when the wait returns.
    if rank == 0:
        works = [win.put(torch.full((4,), float(i)), 1, 4 * i, True) for i in range(16)]
        win.signal(1, False)
        for w in works:
            w.wait()
    else:
        win.wait_signal(0, False)
        assert torch.equal(buf, torch.arange(16.0).repeat_interleave(4)), buf
    dist.barrier()

    # Counting: k signals satisfy k waits, no more.
    if rank == 0:
        for _ in range(3):
            win.signal(1, False)
    else:
        for _ in range(3):
            win.wait_signal(0, False)
        extra = win.wait_signal(0, True)
        time.sleep(0.2)
        assert not extra.is_completed(), "a fourth wait was satisfied by three signals"
    dist.barrier()
    if rank == 0:
        win.signal(1, False)  # the one the pending wait needs
    else:
        extra.wait()
    dist.barrier()

    # A wait posted before the put works (async wait, then the data comes).
    if rank == 1:
        w = win.wait_signal(0, True)
        dist.barrier()
        w.wait()
        assert torch.equal(buf[:8], torch.full((8,), 42.0)), buf[:8]
    else:
        dist.barrier()
        time.sleep(0.1)
        win.put(torch.full((8,), 42.0), 1, 0, False)
        win.signal(1, False)
    dist.barrier()

    # A wait that times out raises and leaves the window usable.
    if rank == 1:
        opts = WaitSignalOptions()
        opts.timeout = datetime.timedelta(milliseconds=200)
        expect_error(lambda: win.wait_signal(0, False, opts), "Timed out", "wait_signal timeout")
        dist.barrier()
        win.wait_signal(0, False)
        assert torch.equal(buf[8:12], torch.full((4,), 7.0)), buf[8:12]
    else:
        dist.barrier()
        win.put(torch.full((4,), 7.0), 1, 8, False)
        win.signal(1, False)
    dist.barrier()

    # Async Works: futures complete, waits in another order.
    a = win.put(torch.full((2,), float(rank)), peer, 20, True)
    b = win.signal(peer, True)
    c = win.wait_signal(peer, True)
    c.get_future().wait()
    b.wait()
    a.wait()
    assert torch.equal(buf[20:22], torch.full((2,), float(peer)))
    # Every put's Work behaves as any other, also one that finished in the call (a copy).
    for w in (a, win.put(torch.ones(1), peer, 30, True), win.flush(peer, True)):
        w.get_future().wait()
        assert w.wait() and w.is_completed() and w.is_success() and w.exception() is None

    # get and flush (commux's extensions): a get sees this rank's earlier puts to that
    # window, and a flush returns once they are in the peer's memory.
    big_put = torch.arange(5000.0) + rank
    win.put(torch.full((4,), 3.0 + rank), peer, 40, False)
    got = torch.zeros(4)
    win.get(got, peer, 40)
    assert torch.equal(got, torch.full((4,), 3.0 + rank)), got
    dist.barrier()
    mine = torch.zeros(64)
    win.get(mine, rank)
    assert torch.equal(mine, buf), "a get from this rank's own window"
    dist.barrier()
    win.flush(peer)
    tail = torch.zeros(2)
    win.get(tail, peer, 62, async_op=True).wait()
    # Rank 1's window still holds rank 0's many puts there; rank 0's was never written.
    want = torch.full((2,), 15.0) if peer == 1 else torch.zeros(2)
    assert torch.equal(tail, want), tail
    dist.barrier()
    del big_put

    # The same through c10d's own put: PutOptions.hints["signal"] = "1".
    opts = PutOptions()
    opts.hints = {"signal": "1", "another_backends_hint": "x"}
    win.put(torch.full((2,), 8.0 + rank), peer, 50, False, opts)
    win.wait_signal(peer, False)
    assert torch.equal(buf[50:52], torch.full((2,), 8.0 + peer)), buf[50:52]
    opts.hints = {"signal": "yes"}
    expect_error(lambda: win.put(torch.ones(1), peer, 0, False, opts), "signal", "a bad hint",
                 exc_types=(ValueError,))
    dist.barrier()

    # put_signal (commux's extension): small (one message) and large (data, then signal).
    for n, value in ((3, 5.0), (3000, 6.0)):
        big = _window_tensor(n, torch.float32, shared)
        w = dist._new_window(big)
        w.put_signal(torch.full((n,), value + rank), peer, 0)
        w.wait_signal(peer, False)
        assert torch.equal(big, torch.full((n,), value + peer)), (n, big[:4])
        dist.barrier()  # the peer's next put_signal would overwrite what was checked
        w.put_signal(torch.full((n,), -value), peer, 0, async_op=True).wait()
        w.wait_signal(peer, False)
        assert torch.equal(big, torch.full((n,), -value)), (n, big[:4])
        w.tensor_deregister()
    win.tensor_deregister()

    # Several windows at once, each with its own dtype.
    w1 = dist._new_window(_window_tensor(4, torch.int64, shared))
    t2 = _window_tensor(4, torch.float64, shared)
    w2 = dist._new_window(t2)
    w2.put(torch.full((4,), 2.5, dtype=torch.float64), peer, 0, False)
    w1.put(torch.full((4,), 9, dtype=torch.int64), peer, 0, False)
    w2.signal(peer, False)
    w2.wait_signal(peer, False)
    assert torch.equal(t2, torch.full((4,), 2.5, dtype=torch.float64))
    w1.tensor_deregister()
    w2.tensor_deregister()
    assert_group_works(world_size)
    return True


@pytest.mark.parametrize("path", sorted(PATHS))
def test_window_semantics(path):
    env, shared, path = PATHS[path]
    run_ranks(_semantics, 2, timeout=120, env=env, shared=shared, path=path)


def _mapping(rank, world_size):
    peer = 1 - rank
    shared = _window_tensor(8, torch.float32, True)
    win = dist._new_window(shared)
    view = win.map_remote_tensor(peer)
    assert view.dtype == torch.float32 and view.numel() == 8
    if rank == 0:
        view[3] = 11.0  # a store straight into rank 1's tensor
        win.signal(1, False)
    else:
        win.wait_signal(0, False)
        assert shared[3].item() == 11.0, shared
    mine = win.map_remote_tensor(rank)
    assert mine.data_ptr() == shared.data_ptr()
    win.tensor_deregister()

    # An ordinary tensor moves to shared memory at an owning registration (the default),
    # and the caller's tensor object follows it.
    plain = torch.zeros(8)
    moved = dist._new_window(plain)
    assert moved.path(peer) == "mapped", moved.path(peer)
    moved.map_remote_tensor(peer)[rank] = 5.0 + rank
    moved.signal(peer, False)
    moved.wait_signal(peer, False)
    assert plain[peer].item() == 5.0 + peer, plain
    moved.tensor_deregister()
    # What stays where it is: a tensor registered without ownership, and memory torch did
    # not allocate (torch.from_numpy: the array would keep reading the old memory).
    array = torch.zeros(8).numpy()
    for what, tensor, owning in (("owning=False", torch.zeros(8), False),
                                 ("from_numpy", torch.from_numpy(array), True)):
        win = dist._new_window()
        win.tensor_register(tensor, owning)
        assert win.path(peer) == "cma", (what, win.path(peer))
        expect_error(lambda: win.map_remote_tensor(peer), "not mappable", f"map of {what}")
        win.put(torch.full((8,), 2.0 + rank), peer, 0, False)
        win.signal(peer, False)
        win.wait_signal(peer, False)
        assert torch.equal(tensor, torch.full((8,), 2.0 + peer)), (what, tensor)
        win.tensor_deregister()
    assert array[0] == 2.0 + peer, "the numpy array no longer sees the window"
    assert_group_works(world_size)
    return True


def test_map_remote_tensor_on_one_host():
    run_ranks(_mapping, 2, timeout=60)


def _bad_input(rank, world_size):
    peer = 1 - rank
    win = dist._new_window()
    expect_error(lambda: win.put(torch.ones(2), peer, 0, False), "no tensor is registered",
                 "put before register")
    expect_error(lambda: win.signal(peer, False), "no tensor is registered",
                 "signal before register")
    buf = torch.zeros(10)
    win.tensor_register(buf)
    expect_error(lambda: win.tensor_register(buf), "registered already", "double register")
    cases = [
        (lambda: win.put(torch.ones(4), peer, 8, False), ("do not fit", "10 elements"),
         "put past the end"),
        (lambda: win.put(torch.ones(1), peer, -1, False), "offset -1", "negative offset"),
        (lambda: win.put(torch.ones(1), 5, 0, False), "invalid peer rank 5", "rank too large"),
        (lambda: win.signal(-1, False), "invalid peer rank -1", "negative rank"),
        (lambda: win.wait_signal(2, False), "invalid peer rank 2", "wait on a bad rank"),
        (lambda: win.put(torch.ones(2, dtype=torch.int32), peer, 0, False), "Int",
         "dtype mismatch"),
        (lambda: win.put(torch.ones(4, 4).t(), peer, 0, False), "contiguous", "non-contiguous"),
        (lambda: win.map_remote_tensor(7), "invalid peer rank 7", "map of a bad rank"),
        (lambda: win.get(torch.ones(11), peer, 0), "do not fit", "get past the end"),
        (lambda: win.get(torch.ones(1, dtype=torch.int64), peer, 0), "Long", "get dtype"),
        (lambda: win.flush(3), "invalid peer rank 3", "flush of a bad rank"),
    ]
    for fn, keywords, what in cases:
        expect_error(fn, keywords, what, exc_types=(ValueError,))
    if not torch.cuda.is_available():
        cuda = torch.ones(2, device="meta")
        expect_error(lambda: win.put(cuda, peer, 0, False), ("meta", "cpu"), "meta tensor")
    # The window still works after every refusal.
    win.put(torch.full((10,), float(rank + 3)), peer, 0, False)
    win.signal(peer, False)
    win.wait_signal(peer, False)
    assert torch.equal(buf, torch.full((10,), float(peer + 3)))
    win.tensor_deregister()
    expect_error(lambda: win.put(torch.ones(2), peer, 0, False), "no tensor is registered",
                 "put after deregister")
    expect_error(lambda: win.tensor_deregister(), "no tensor is registered", "double deregister")
    # Registered again: a fresh registration works.
    again = torch.zeros(3, dtype=torch.int64)
    win.tensor_register(again)
    win.put(torch.tensor([1, 2, 3]) * (rank + 1), peer, 0, False)
    win.signal(peer, False)
    win.wait_signal(peer, False)
    assert torch.equal(again, torch.tensor([1, 2, 3]) * (peer + 1))
    win.tensor_deregister()
    assert_group_works(world_size)
    return True


def test_window_bad_input_is_refused_and_the_window_still_works():
    run_ranks(_bad_input, 2, timeout=60)


def _subgroup(rank, world_size):
    members = [1, 2]
    sub = dist.new_group(members)
    if rank in members:
        me = members.index(rank)
        other = 1 - me
        buf = torch.zeros(4)
        win = dist._new_window(buf, group=sub)
        win.put(torch.full((4,), float(rank)), other, 0, False)
        win.signal(other, False)
        win.wait_signal(other, False)
        assert torch.equal(buf, torch.full((4,), float(members[other])))
        win.tensor_deregister()
    dist.barrier()
    return True


def test_window_on_a_subgroup():
    run_ranks(_subgroup, 3, timeout=60)


def _dead_peer(rank, world_size, path):
    win = dist._new_window(torch.zeros(300_000))
    assert win.path(1 - rank) == path, win.path(1 - rank)
    dist.barrier()
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    expect_error(lambda: win.wait_signal(1, False), "rank 1", "wait on a dead peer")
    took = time.monotonic() - start
    assert took < 30, f"the dead peer took {took:.1f} s to notice"
    # Every later operation with it fails at once, naming it, on every path.
    for what, fn in (("small put", lambda: win.put(torch.ones(4), 1, 0, False)),
                     ("large put", lambda: win.put(torch.ones(300_000), 1, 0, False)),
                     ("put_signal", lambda: win.put_signal(torch.ones(4), 1, 0)),
                     ("signal", lambda: win.signal(1, False)),
                     ("get", lambda: win.get(torch.ones(4), 1, 0))):
        expect_error(fn, "rank 1", f"{what} to a dead peer")
    # Deregistering (collective) fails too, and lets the memory go all the same.
    expect_error(lambda: win.tensor_deregister(), "rank 1", "deregister with a dead peer")
    expect_error(lambda: win.put(torch.ones(4), 1, 0, False), "no tensor is registered",
                 "put after the failed deregister")
    del win
    return True


@pytest.mark.parametrize("path", ["cma", "messages", "moved"])
def test_a_killed_peer_fails_wait_put_signal_get_naming_it(path):
    env, _, want = PATHS[path]
    run_ranks(_dead_peer, 2, timeout=90, env=env, killed=(1,), path=want)


def _halo(rank, world_size, n, steps):
    """docs/windows.md's halo exchange, checked against the same stencil run serially."""
    world = world_size
    full = torch.arange(world * n, dtype=torch.float64) ** 2 % 17
    u = torch.zeros(n + 2, dtype=torch.float64)
    u[1 : n + 1] = full[rank * n : (rank + 1) * n]
    win = dist._new_window(u)
    left, right = (rank - 1) % world, (rank + 1) % world
    for _ in range(steps):
        win.put(u[1:2].clone(), left, n + 1, False)
        win.put(u[n : n + 1].clone(), right, 0, False)
        win.signal(left, False)
        win.signal(right, False)
        win.wait_signal(left, False)
        win.wait_signal(right, False)
        u[1 : n + 1] = 0.5 * (u[0:n] + u[2 : n + 2])
        dist.barrier()
    win.tensor_deregister()
    for _ in range(steps):
        full = 0.5 * (torch.roll(full, 1) + torch.roll(full, -1))
    assert torch.equal(u[1 : n + 1], full[rank * n : (rank + 1) * n]), "halo result differs"
    return True


@pytest.mark.parametrize("path", ["cma", "messages"])
def test_readme_halo_exchange_matches_a_serial_run(path):
    env, _, _ = PATHS[path]
    run_ranks(_halo, 3, timeout=60, env=env, n=5, steps=20)


def _get_after_large_puts(rank, world_size, n):
    """Gets of a window that other ranks fill with large and small puts, after a flush."""
    peer = 1 - rank
    buf = torch.zeros(n)
    win = dist._new_window(buf)
    for salt in range(3):
        data = torch.arange(n, dtype=torch.float32) + 1000 * salt + rank
        win.put(data[: n // 2], peer, 0, True)
        win.put(data[n // 2 :], peer, n // 2, True)
        win.flush(peer)
        back = torch.zeros(n)
        win.get(back, peer, 0)
        assert torch.equal(back, data), f"salt {salt}: get after flush differs"
        dist.barrier()
        assert torch.equal(buf, torch.arange(n, dtype=torch.float32) + 1000 * salt + peer)
        dist.barrier()
    win.tensor_deregister()
    return True


@pytest.mark.parametrize("path", ["cma", "messages"])
def test_get_sees_flushed_puts(path):
    env, _, _ = PATHS[path]
    run_ranks(_get_after_large_puts, 2, timeout=60, env=env, n=300_001)


SMALL_SHM_JOB = r'''
import os, socket, sys
import torch, torch.distributed as dist, torch.multiprocessing as mp

def rank_main(rank, port):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("ucx", rank=rank, world_size=2)
    peer = 1 - rank
    big = torch.zeros(48 << 20)          # 192 MiB: more than this /dev/shm holds
    win = dist._new_window(big)
    assert win.path(peer) == "cma", win.path(peer)
    data = torch.arange(1 << 20, dtype=torch.float32) + rank
    win.put(data, peer, (48 << 20) - (1 << 20), False)
    win.signal(peer, False)
    win.wait_signal(peer, False)
    assert torch.equal(big[-(1 << 20):], torch.arange(1 << 20, dtype=torch.float32) + peer)
    win.tensor_deregister()
    small = dist._new_window(torch.zeros(1000))   # this one still fits
    assert small.path(peer) == "mapped", small.path(peer)
    small.tensor_deregister()
    dist.destroy_process_group()
    if rank == 0:
        print("small shm ok", flush=True)

if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(port,), nprocs=2)
'''


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                    reason="needs root and unshare (a mount namespace with its own /dev/shm)")
@pytest.mark.timeout(150)
def test_a_tensor_that_does_not_fit_dev_shm_stays_in_place(tmp_path):
    """A container's 64 MiB /dev/shm: registration cannot move a 192 MiB tensor there, warns,
    leaves it where it is (CMA between ranks of the host) and the window works."""
    script = tmp_path / "small_shm_job.py"
    script.write_text(SMALL_SHM_JOB)
    r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                        'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$0" "$1"',
                        sys.executable, str(script)],
                       capture_output=True, text=True, timeout=140, stdin=subprocess.DEVNULL)
    assert r.returncode == 0 and "small shm ok" in r.stdout, \
        f"exit {r.returncode}\n{r.stdout[-3000:]}\n{r.stderr[-5000:]}"
    assert "could not move the tensor" in r.stderr, r.stderr[-3000:]


def _plan(seed, world, rounds, region):
    """Every rank's operations, the same on every rank (drawn from the shared seed): per
    round and source, a list of (kind, target, offset, count, value) where kind is put,
    put_signal or get, and each target's window is cut in one region per source, so the
    expected contents follow from the plan alone."""
    import random

    rng = random.Random(seed)
    # Sizes on both sides of every limit: inline (8 KiB), the CMA start (256 KiB), a slot.
    sizes = [1, 2, 7, 2047, 2048, 2049, 65_536, 65_537, 70_000, region]
    plan = []
    for _ in range(rounds):
        ops = {}
        for src in range(world):
            mine = []
            for _ in range(rng.randrange(1, 7)):
                dst = rng.randrange(world)
                count = min(rng.choice(sizes), region)
                offset = rng.randrange(0, region - count + 1)
                kind = rng.choice(["put", "put", "put_signal", "get"])
                mine.append((kind, dst, offset, count, rng.randrange(1, 1 << 20)))
            ops[src] = mine
        plan.append(ops)
    return plan


def _random_ops(rank, world_size, seed, rounds, region):
    """A seeded mix of puts, put_signals, gets, flushes, signals and waits between every
    pair (and to self), with exact contents checked after every get and every round."""
    plan = _plan(seed, world_size, rounds, region)
    buf = torch.zeros(world_size * region, dtype=torch.float64)
    win = dist._new_window(buf)
    done = []  # (round, ops) already applied, for the expected contents
    for rnd, ops in enumerate(plan):
        works = []
        unflushed = {}  # dst -> [(start, end)] put since the last flush to it
        for i, (kind, dst, offset, count, value) in enumerate(ops[rank]):
            at = rank * region + offset  # this rank's region in dst's window
            # Overlapping puts may land in either order unless a flush separates them
            # (docs/windows.md, as MPI): flush when this one overlaps an earlier one.
            spans = unflushed.setdefault(dst, [])
            if kind != "get" and any(a < at + count and at < b for a, b in spans):
                win.flush(dst)
                spans.clear()
            if kind == "get":
                win.flush(dst)
                spans.clear()
                got = torch.zeros(count, dtype=torch.float64)
                win.get(got, dst, at)
                # Only this rank writes its region of dst's window: what it put so far.
                mine = [o[rank] for o in plan[:rnd]] + [ops[rank][:i]]
                want = _expected(mine, dst, rank, region, world_size)[at : at + count]
                assert torch.equal(got, want), f"seed {seed} round {rnd}: get {i} from {dst}"
                continue
            spans.append((at, at + count))
            data = torch.arange(count, dtype=torch.float64) + value
            if kind == "put_signal":
                win.put_signal(data, dst, at)
            else:
                works.append(win.put(data, dst, at, True))
        for w in works:
            w.wait()
        # One signal to every rank this rank made a plain put to, after all of them.
        for dst in sorted({d for k, d, *_ in ops[rank] if k == "put"}):
            win.signal(dst, False)
        # Every signal meant for this rank this round: then every put to it has landed.
        for src in range(world_size):
            fused = sum(1 for k, d, *_ in ops[src] if k == "put_signal" and d == rank)
            plain = any(k == "put" and d == rank for k, d, *_ in ops[src])
            for _ in range(fused + int(plain)):
                win.wait_signal(src, False)
        done.append(ops)
        want = torch.zeros(world_size * region, dtype=torch.float64)
        for src in range(world_size):
            mine = _expected([o[src] for o in done], rank, src, region, world_size)
            want[src * region : (src + 1) * region] = mine[src * region : (src + 1) * region]
        bad = (buf != want).nonzero().flatten()[:5].tolist()
        assert not bad, f"seed {seed} round {rnd}: rank {rank}'s window differs at {bad}"
        dist.barrier()  # nobody's next round overwrites what another still checks
    win.tensor_deregister()
    return True


def _expected(op_lists, target, source, region, world):
    """`target`'s window after `source`'s operations `op_lists` (lists of plan entries)."""
    want = torch.zeros(world * region, dtype=torch.float64)
    for ops in op_lists:
        for kind, dst, offset, count, value in ops:
            if kind != "get" and dst == target:
                at = source * region + offset
                want[at : at + count] = torch.arange(count, dtype=torch.float64) + value
    return want


@pytest.mark.parametrize("path", ["moved", "cma", "messages"])
def test_seeded_random_window_operations(path):
    """Puts of every size class (inline, large, CMA), put_signals, gets after flushes, to
    peers and to self, counted signals; the seed is printed on failure (COMMUX_WINDOW_SEED
    replays one)."""
    env, _, _ = PATHS[path]
    seed = int(os.environ.get("COMMUX_WINDOW_SEED", "0")) or int.from_bytes(os.urandom(3), "big")
    print(f"window random seed {seed} (COMMUX_WINDOW_SEED={seed} replays it)")
    run_ranks(_random_ops, 3, timeout=180, env=env, seed=seed, rounds=12, region=300_000)


def _registration_and_transfers(rank, world_size):
    peer = 1 - rank
    # A tensor under an irecv still in flight is not moved (its old memory would be freed
    # under the receive): refused by name, and registered once the receive is done.
    buf = torch.zeros(1000)
    if rank == 0:
        work = dist.irecv(buf, src=1, tag=9)
        expect_error(lambda: dist._new_window(buf), "in use by an operation still in flight",
                     "a register under an irecv", exc_types=(ValueError,))
        dist.send(torch.ones(1), dst=1, tag=10)  # now rank 1 sends
        work.wait()
        assert buf.eq(3.0).all()
    else:
        dist.recv(torch.empty(1), src=0, tag=10)
        dist.send(torch.full((1000,), 3.0), dst=0, tag=9)
    win = dist._new_window(buf)
    assert win.path(peer) == "mapped", win.path(peer)
    win.tensor_deregister()
    # A view registers what it covers and leaves its storage where it is (moving it would
    # copy and expose the whole storage).
    big = torch.zeros(10_000)
    view = big[100:200]
    win = dist._new_window(view)
    assert not big.is_shared(), "registering a view moved the whole storage"
    assert win.path(peer) == "cma", win.path(peer)
    win.put(torch.full((100,), 1.0 + rank), peer, 0, False)
    win.signal(peer, False)
    win.wait_signal(peer, False)
    assert view.eq(1.0 + peer).all() and big[:100].eq(0).all() and big[200:].eq(0).all()
    win.tensor_deregister()
    assert_group_works(world_size)
    return True


def test_registration_never_moves_memory_under_a_transfer_nor_a_views_whole_storage():
    assert all(run_ranks(_registration_and_transfers, 2, timeout=90))


def _registration_and_collective_inputs(rank, world_size):
    # A tensor a collective still in flight reads (its input, which a peer may read in
    # place) is not moved either: the collective would read freed memory.
    src = torch.arange(2 * 1000, dtype=torch.float32) + 10_000 * rank
    out = torch.empty(2 * 1000)
    if rank == 0:
        work = dist.all_to_all_single(out, src, async_op=True)  # rank 1 has not called yet
        expect_error(lambda: dist._new_window(src), "in use by an operation still in flight",
                     "a register under an all_to_all that reads it", exc_types=(ValueError,))
        dist.send(torch.ones(1), dst=1, tag=11)  # now rank 1 calls
        work.wait()
    else:
        dist.recv(torch.empty(1), src=0, tag=11)
        dist.all_to_all_single(out, src)
    want = torch.cat([torch.arange(1000 * rank, 1000 * (rank + 1), dtype=torch.float32) + 10_000 * q
                      for q in range(world_size)])
    assert torch.equal(out, want), "all_to_all result"
    win = dist._new_window(src)  # done: it may move now
    win.tensor_deregister()
    assert_group_works(world_size)
    return True


# With shared memory (the default), where a registration moves the tensor into a segment;
# with COMMUX_SHM=0 nothing moves, and the registration (a collective) just waits for rank 1.
def test_registration_never_moves_the_input_of_a_collective_in_flight():
    assert all(run_ranks(_registration_and_collective_inputs, 2, timeout=90))


def _dropped_window(rank, world_size):
    import gc
    peer = 1 - rank
    n = 1 << 20  # 4 MiB: malloc maps it (MALLOC_MMAP_THRESHOLD_), free unmaps it
    plain = torch.zeros(n)
    win = dist._new_window(plain)
    ptr = plain.data_ptr()
    dist.barrier()
    if rank == 0:
        # Dropped without tensor_deregister: rank 1 may still put into it.
        del win, plain
        gc.collect()
        # Were the memory freed, a new mapping of the same size would take its place, and
        # the put below would land in it (process_vm_writev into an unmapped range would
        # fail the put instead): another rank writing into this process's unrelated data.
        fresh = torch.zeros(n)
        dist.barrier()
        dist.barrier()  # rank 1 has put
        assert fresh.data_ptr() != ptr, "the dropped window's memory was reused at once"
        assert fresh.eq(0).all(), "a put landed in memory reused after the drop"
    else:
        dist.barrier()
        win.put(torch.full((n,), 9.0), peer, 0, False)
        dist.barrier()
    return True


# Over messages the dropped window's receives are cancelled: nothing lands in its memory
# (a put to it then waits for a receiver, as a send to a rank that never receives does).
@pytest.mark.parametrize("path", ["cma", "moved"])
def test_a_window_dropped_without_deregister_keeps_its_memory_while_peers_may_write(path):
    env, _, _ = PATHS[path]
    env = dict(env, MALLOC_MMAP_THRESHOLD_="65536")  # fixed: glibc's moving one varies
    assert all(run_ranks(_dropped_window, 2, timeout=90, env=env))


def _dies_before_registering(rank, world_size):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    start = time.monotonic()
    try:
        dist._new_window(torch.zeros(16))
    except dist.DistError as e:
        assert "rank 1 died" in str(e), e
    else:
        raise AssertionError("a window registered although rank 1 was killed")
    took = time.monotonic() - start
    assert took < 10, f"the death took {took:.1f} s to notice (group timeout 300 s)"
    if rank == 0:
        # Rank 0 hosts the store: leaving at once would take the store from a rank that has
        # not heard of the death yet (it then sees the store lost, not the death).
        time.sleep(3)
    return True


def test_a_death_before_a_window_registration_is_found_in_seconds():
    run_ranks(_dies_before_registering, 3, timeout=90, killed=(1,),
              pg_timeout=datetime.timedelta(seconds=300))
