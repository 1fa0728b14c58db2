"""A rank that dies is an error on every survivor within seconds, naming it.

Every victim here is killed for real (SIGKILL, as the OOM killer does). The survivors must
raise DistBackendError naming the dead rank well before the group timeout (30 min), must
see it in ``commux.health()``, and must then get through ``destroy_process_group()`` and
interpreter exit (the harness fails a rank that hangs there).
"""

from __future__ import annotations

import datetime
import os
import signal
import time

import pytest

from harness import is_ucx, run_ranks, side_barrier, skip_reason_unless_ucx

pytestmark = pytest.mark.skipif(not is_ucx(), reason=skip_reason_unless_ucx("fault handling"))

# Seconds a survivor may take to see the death (documented bound: 10 s; pidfd takes ms).
DETECT_LIMIT_S = 5.0


def _die_after(seconds: float) -> None:
    time.sleep(seconds)
    os.kill(os.getpid(), signal.SIGKILL)


def _expect_death(work_or_fn, victim: int, what: str) -> float:
    """Waits on a Work (or calls fn); it must fail naming `victim`. Returns the seconds."""
    import torch.distributed as dist

    start = time.monotonic()
    try:
        if callable(work_or_fn):
            work_or_fn()
        else:
            work_or_fn.wait()
    except dist.DistBackendError as e:
        elapsed = time.monotonic() - start
        assert f"rank {victim} died" in str(e), f"{what}: error does not name the dead rank: {e}"
        return elapsed
    raise AssertionError(f"{what}: completed although rank {victim} was killed")


def _health_says_dead(victim: int, limit: float = DETECT_LIMIT_S) -> dict:
    import commux

    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        h = commux.health()
        if victim in h["dead_ranks"]:
            assert not h["healthy"] and f"rank {victim} died" in h["reason"], h
            return h
        time.sleep(0.01)
    raise AssertionError(f"commux.health() did not report rank {victim} dead within {limit} s")


def _blocked_on_victim(rank, world_size, scenario):
    import torch
    import torch.distributed as dist

    victim = world_size - 1
    # Everyone is connected and every rank's record is read before the kill.
    dist.all_reduce(torch.ones(1))
    if rank == victim:
        _die_after(0.3)
    if scenario == "recv":
        work = dist.irecv(torch.empty(4), src=victim, tag=5)
    elif scenario == "recv_any":
        work = dist.irecv(torch.empty(4), tag=5)
    elif scenario == "send_rendezvous":
        # Far above every eager threshold: the send waits for a receive that never comes.
        work = dist.isend(torch.ones(16 << 20), dst=victim, tag=5)
    elif scenario == "allreduce":
        work = dist.all_reduce(torch.ones(1000), async_op=True)
    elif scenario == "allreduce_chunked":
        work = dist.all_reduce(torch.ones(1 << 20), async_op=True)
    elif scenario == "broadcast":
        work = dist.broadcast(torch.ones(1000), src=victim, async_op=True)
    else:
        raise ValueError(scenario)
    elapsed = _expect_death(work, victim, scenario)
    assert elapsed < DETECT_LIMIT_S, f"{scenario}: took {elapsed:.2f} s to see the death"
    _health_says_dead(victim)
    # No survivor leaves before all have checked: with UCX's peer error handling a survivor
    # that tears down its group closes its connections, which the others see as a failure.
    store = dist.distributed_c10d._get_default_store()
    store.set(f"checked/{rank}", "1")
    store.wait([f"checked/{r}" for r in range(world_size) if r != victim])
    return elapsed


@pytest.mark.parametrize(
    "scenario,shm",
    [
        ("recv", "0"),
        ("recv_any", "0"),
        ("send_rendezvous", "0"),
        ("allreduce", "0"),
        ("allreduce", "1"),
        ("allreduce_chunked", "1"),
        ("broadcast", "0"),
    ],
)
def test_wait_on_dead_peer_fails_fast(scenario, shm):
    env = {"COMMUX_SHM": shm, "COMMUX_SHM_SLOT_BYTES": 8192}
    run_ranks(_blocked_on_victim, 3, timeout=90, env=env, killed=(2,), scenario=scenario)


def _after_death(rank, world_size):
    import torch
    import torch.distributed as dist

    import commux

    victim = 2
    dist.all_reduce(torch.ones(1))
    if rank == victim:
        _die_after(0.1)
    _health_says_dead(victim)
    # Posted after the death: fail at once, naming the rank.
    for what, call in [
        ("send", lambda: dist.send(torch.ones(4), dst=victim)),
        ("recv", lambda: dist.recv(torch.empty(4), src=victim)),
        ("all_reduce", lambda: dist.all_reduce(torch.ones(4))),
        ("barrier", lambda: dist.barrier()),
    ]:
        elapsed = _expect_death(call, victim, what + " after the death")
        assert elapsed < 1.0, f"{what} posted after the death took {elapsed:.2f} s to fail"
    # Before the survivors' last exchange: once done, a survivor may leave, which the other
    # sees (a member that left is in dead_ranks too).
    h = commux.health()
    assert h["dead_ranks"] == [victim] and not h["healthy"], h
    # The survivors still talk to each other, tags matched as before.
    other = 1 - rank
    if rank == 0:
        dist.send(torch.full((3,), 7.0), dst=other, tag=11)
        got = torch.empty(3)
        dist.recv(got, src=other, tag=12)
    else:
        got = torch.empty(3)
        dist.recv(got, src=other, tag=11)
        dist.send(torch.full((3,), 8.0), dst=other, tag=12)
    assert got.tolist() == ([8.0] * 3 if rank == 0 else [7.0] * 3)


def test_operations_after_death_fail_at_once_and_survivors_go_on():
    run_ranks(_after_death, 3, timeout=90, killed=(2,))


def _last_words(rank, world_size):
    """A rank that sends and exits: what it sent before dying still arrives."""
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))
    if rank == 1:
        dist.send(torch.full((8,), 3.0), dst=0, tag=1)
        dist.broadcast(torch.full((8,), 4.0), src=1)
        side_barrier("sent")
        _die_after(0.0)
    side_barrier("sent")
    _health_says_dead(1)
    got = torch.empty(8)
    dist.recv(got, src=1, tag=1)  # posted after the death: the message is already here
    assert got.tolist() == [3.0] * 8
    b = torch.empty(8)
    dist.broadcast(b, src=1)
    assert b.tolist() == [4.0] * 8


def test_messages_sent_before_death_are_still_received():
    run_ranks(_last_words, 2, timeout=60, env={"COMMUX_SHM": "0"}, killed=(1,))


def _ucx_detection(rank, world_size):
    return _blocked_on_victim(rank, world_size, "recv")


def test_ucx_peer_error_handling_detects_death():
    """COMMUX_FAILURE_DETECTION=ucx: UCX's own peer failure handling, as across hosts."""
    env = {"COMMUX_FAILURE_DETECTION": "ucx", "COMMUX_SHM": "0"}
    run_ranks(_ucx_detection, 3, timeout=90, env=env, killed=(2,))


def _no_detection(rank, world_size):
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))
    if rank == 1:
        _die_after(0.1)
    work = dist.irecv(torch.empty(4), src=1)
    try:
        work.wait(timeout=datetime.timedelta(seconds=2))
    except dist.DistBackendError as e:
        assert "Timed out" in str(e), e
        return
    raise AssertionError("a receive from a dead rank completed")


def test_detection_off_is_a_timeout():
    """The test above would pass with detection broken; this one shows the difference."""
    env = {"COMMUX_FAILURE_DETECTION": "off", "COMMUX_SHM": "0"}
    run_ranks(_no_detection, 2, timeout=60, env=env, killed=(1,))


def _abort_from_thread(rank, world_size, how):
    import threading

    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.ones(1))
    group = dist.group.WORLD
    store = dist.distributed_c10d._get_default_store()  # torch's abort forgets the group

    def abort():
        time.sleep(0.5)
        if how == "torch":
            dist.distributed_c10d._abort_process_group(group)
        else:
            group.abort()

    t = threading.Thread(target=abort)
    t.start()
    start = time.monotonic()
    try:
        dist.recv(torch.empty(4), src=1 - rank, tag=99)  # nobody sends this
    except (dist.DistBackendError, RuntimeError) as e:
        assert "abort" in str(e).lower(), e
    else:
        raise AssertionError("a receive on an aborted group completed")
    t.join()
    took = time.monotonic() - start - 0.5
    # Neither rank leaves before both receives raised: a peer that exits first fails the
    # other's receive with its death instead of the abort (once, under a CPU hog).
    store.set(f"aborted/{rank}", "1")
    store.wait([f"aborted/{r}" for r in range(world_size)])
    assert took < 1.0, f"the blocked receive took {took:.2f} s to raise after abort"
    if how == "group":
        # torch's _abort_process_group also forgets the group; the backend's abort keeps
        # it, refusing everything.
        try:
            dist.all_reduce(torch.ones(4))
        except (dist.DistBackendError, RuntimeError) as e:
            assert "abort" in str(e).lower(), e
        else:
            raise AssertionError("all_reduce on an aborted group completed")
    return True


@pytest.mark.parametrize("how", ["torch", "group"])
def test_abort_from_another_thread_unblocks_waits(how):
    """The harness then checks that each rank exits (destroy after abort must not hang)."""
    run_ranks(_abort_from_thread, 2, timeout=60, how=how)


def _resources():
    fds = len(os.listdir("/proc/self/fd"))
    threads = len(os.listdir("/proc/self/task"))
    shm = len([n for n in os.listdir("/dev/shm") if "commux" in n])
    with open("/proc/self/statm") as f:
        rss_mib = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    return fds, threads, shm, rss_mib


def _cycles(rank, world_size, scratch, cycles):
    import datetime

    import torch
    import torch.distributed as dist

    import commux

    commux.register()
    seen = []
    for cycle in range(cycles):
        store = dist.FileStore(os.path.join(scratch, f"store{cycle}"), world_size)
        dist.init_process_group(
            "ucx", store=store, rank=rank, world_size=world_size,
            timeout=datetime.timedelta(seconds=60),
        )
        t = torch.full((1000,), float(rank + cycle))
        dist.all_reduce(t)  # shared memory
        assert t[0].item() == sum(r + cycle for r in range(world_size))
        big = torch.ones(300_000)
        dist.all_reduce(big)
        assert big[0].item() == world_size
        peer = (rank + 1) % world_size
        src = (rank - 1) % world_size
        got = torch.empty(5)
        reqs = [dist.isend(torch.full((5,), float(cycle)), dst=peer, tag=cycle),
                dist.irecv(got, src=src, tag=cycle)]
        for r in reqs:
            r.wait()
        assert got[0].item() == cycle
        dist.barrier()
        dist.destroy_process_group()
        del store
        seen.append(_resources())
    return seen


def test_twenty_init_destroy_cycles_leave_nothing_behind():
    cycles = 20
    results = run_ranks(_cycles, 2, timeout=240, init="none", cycles=cycles)
    for rank, seen in enumerate(results):
        # From the third cycle on (allocator and UCX caches warm) nothing may grow.
        base = seen[2]
        last = seen[-1]
        assert last[0] <= base[0], f"rank {rank}: file descriptors grew {base[0]} -> {last[0]}"
        assert last[1] <= base[1], f"rank {rank}: threads grew {base[1]} -> {last[1]}"
        assert last[2] == 0, f"rank {rank}: {last[2]} commux segments left in /dev/shm"
        grown = last[3] - base[3]
        assert grown < 24, f"rank {rank}: resident memory grew {grown:.1f} MiB in {cycles - 3} cycles"


def _thread_names():
    names = []
    for tid in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return names


def _orphan(rank, world_size, scratch):
    import torch
    import torch.distributed as dist

    import commux

    commux.register()
    store = dist.FileStore(os.path.join(scratch, "store"), world_size)
    dist.init_process_group("ucx", store=store, rank=rank, world_size=world_size)
    dist.all_reduce(torch.ones(1))
    orphan = dist.irecv(torch.empty(4), src=1 - rank, tag=42)  # nobody sends it
    dist.destroy_process_group()
    try:
        orphan.wait()
    except (dist.DistBackendError, RuntimeError) as e:
        assert "destroyed" in str(e), e
    else:
        raise AssertionError("an orphaned receive completed")
    del orphan
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        left = [n for n in _thread_names() if n.startswith("commux")]
        if not left:
            return True
        time.sleep(0.05)
    raise AssertionError(f"commux threads still running after the group was destroyed: {left}")


def test_destroyed_group_fails_orphaned_receives_and_lets_the_engine_go():
    run_ranks(_orphan, 2, timeout=60, init="none")


def _store_host_gone(rank, world_size):
    """Rank 0 hosts the group's TCPStore (torch's tcp:// rendezvous) and is killed; ranks 1
    and 2 never talked to each other, so a send between them must read the peer's record
    from the store that is gone."""
    import socket

    import torch
    import torch.distributed as dist

    store = dist.distributed_c10d._get_default_store()
    tcp = store
    while hasattr(tcp, "underlying_store"):  # PrefixStore("default_pg", TCPStore)
        tcp = tcp.underlying_store
    host, port = tcp.host, tcp.port
    side_barrier("created")  # every rank's record is published
    if rank == 0:
        # Dies only once the survivors are done with the store (their sets have arrived).
        store.wait([f"survivor/{r}" for r in range(1, world_size)], datetime.timedelta(seconds=60))
        _die_after(0.0)
    store.set(f"survivor/{rank}", "1")
    deadline = time.monotonic() + 10
    while True:  # until nothing listens at the store's port: rank 0's process is gone
        try:
            socket.create_connection((host, port), timeout=1).close()
        except OSError:
            break
        assert time.monotonic() < deadline, "the store still answers 10 s after rank 0's kill"
        time.sleep(0.05)
    peer = 3 - rank  # 1 <-> 2
    try:
        dist.send(torch.ones(4), dst=peer, tag=3)
    except (dist.DistNetworkError, dist.DistBackendError) as e:
        message = str(e)
    else:
        raise AssertionError("a send to a rank whose record was never read worked without the store")
    assert f"peer record of rank {peer}" in message, message
    assert f"{host}:{port}" in message and "store" in message, message
    assert "rank 0" in message and "send" in message, message


@pytest.mark.timeout(120)
def test_store_host_gone_is_named_at_the_first_send_to_a_new_peer():
    """Without a wrapper the survivor's send raised torch's bare "DistNetworkError: Broken
    pipe"; it must say whose record could not be read, for what, and which store."""
    run_ranks(_store_host_gone, 3, timeout=60, init="tcp", killed=(0,))
