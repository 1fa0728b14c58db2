"""A DDP training job that survives losing a rank (tests/python/test_survive.py).

Four processes train a small float64 model with DDP over a commux group made with
enable_reconfigure=True. One of them (any, the store lives in the test's own process) is
killed at the start of a random step; the survivors' step fails, they put their parameters
back as they were before it, reconfigure to themselves and do the step again, three of
them. A few steps later a replacement process joins: everyone reconfigures to four again,
and DDP's construction broadcasts rank 0's parameters to it (its own start from other
values, so a replacement that was not healed fails the check). Each process returns its
final parameters and the steps' memberships; the test compares them with a serial run of
the same schedule.

Run as a script (scripts/multihost_check.sh --exec, one copy per rank, COMMUX_RANK,
COMMUX_SIZE=4 and COMMUX_BOOTSTRAP=host:port set), rank 0 serves the store there and starts
the replacement beside it, the victim (a rank of the second host) runs its training in a
child it expects to see killed, and every process checks its own result against the serial
run before it says "survive ok"."""

from __future__ import annotations

import datetime
import os
import random
import signal
import sys
import time

import torch
import torch.distributed as dist

STEPS = 10
LR = 0.05
REPLACEMENT = 4  # the replacement's id; the first four are 0..3


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(),
                               torch.nn.Linear(16, 1)).double()


def batch(step: int, slot: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of member `slot` (its rank in the step's membership) at `step`."""
    g = torch.Generator().manual_seed(1000 * step + slot)
    x = torch.randn(6, 8, generator=g, dtype=torch.float64)
    return x, x.sum(dim=1, keepdim=True).sin()


def reference(plan: list[int]) -> list[torch.Tensor]:
    """The parameters after the steps, serially: step s averages the gradients of
    plan[s] members, as DDP does."""
    net = model(0)
    params = list(net.parameters())
    for step, members in enumerate(plan):
        grads = [torch.zeros_like(p) for p in params]
        for slot in range(members):
            net.zero_grad()
            x, y = batch(step, slot)
            torch.nn.functional.mse_loss(net(x), y).backward()
            for g, p in zip(grads, params):
                g += p.grad
        with torch.no_grad():
            for g, p in zip(grads, params):
                p -= LR * g / members
    return [p.detach().clone() for p in params]


def _handles(store, epoch: int, members: list[int], me: int) -> list[str]:
    store.set(f"handle/{epoch}/{me}", dist._get_reconfigure_handle())
    return [store.get(f"handle/{epoch}/{m}").decode() for m in members]


def _join(store, epoch: int, members: list[int], me: int, net: torch.nn.Module):
    """Reconfigures the default group to `members` (global ids, in rank order) and wraps
    `net` in a new DDP, whose construction gives every member rank 0's parameters."""
    dist._reconfigure(uuid=epoch, handles=_handles(store, epoch, members, me)).wait()
    assert dist.get_world_size() == len(members) and dist.get_rank() == members.index(me)
    return torch.nn.parallel.DistributedDataParallel(net)


def run(me: int, port: int, victim: int, kill_at: int, grow_at: int, shm: str,
        host: str = "127.0.0.1") -> dict:
    if shm is not None:
        os.environ["COMMUX_SHM"] = shm
    import commux

    commux.register()
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore(host, port, is_master=False, timeout=timeout)
    members = [0, 1, 2, 3]
    epoch = 1
    if me == REPLACEMENT:
        store.wait(["grow"], timeout)
        step = int(store.get("grow").decode())
        members = [m for m in members if m != victim] + [REPLACEMENT]
        epoch = 3
        net = model(12345)  # not the others' values: it must be healed
    else:
        step = 0
        net = model(0)
    dist.init_process_group("ucx", store=store, rank=members.index(me), world_size=len(members),
                            timeout=timeout, enable_reconfigure=True)
    ddp = _join(store, epoch, members, me, net)
    opt = torch.optim.SGD(net.parameters(), lr=LR)
    plan: dict[int, int] = {}
    failures = 0
    while step < STEPS:
        if step == kill_at and me == victim:
            os.kill(os.getpid(), signal.SIGKILL)
        if step == grow_at and REPLACEMENT not in members:
            if members.index(me) == 0:
                store.set("grow", str(step))
            members = members + [REPLACEMENT]
            epoch = 3
            ddp = _join(store, epoch, members, me, net)
        before = [p.detach().clone() for p in net.parameters()]
        try:
            opt.zero_grad()
            x, y = batch(step, members.index(me))
            torch.nn.functional.mse_loss(ddp(x), y).backward()
            opt.step()
        except Exception as error:  # noqa: BLE001 - the victim's death, whatever DDP wraps it in
            failures += 1
            assert failures == 1, f"a second failure at step {step}: {error}"
            assert "died" in str(error) or "left the group" in str(error), str(error)
            with torch.no_grad():
                for p, b in zip(net.parameters(), before):
                    p.copy_(b)
            deadline = time.monotonic() + 10
            while members.index(victim) not in commux.health()["dead_ranks"]:
                assert time.monotonic() < deadline, "the victim's death was not seen in 10 s"
                time.sleep(0.01)
            members = [m for m in members if m != victim]
            epoch = 2
            ddp = _join(store, epoch, members, me, net)
            continue  # the same step again, with the survivors
        plan[step] = len(members)
        step += 1
    # Every member holds the same values, bit for bit: their largest and smallest agree.
    params = [p.detach().clone() for p in net.parameters()]
    agree = True
    for p in params:
        hi, lo = p.clone(), p.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        agree = agree and torch.equal(hi, lo) and torch.equal(hi, p)
    dist.barrier()
    dist.destroy_process_group()
    return {"plan": plan, "params": params, "failures": failures, "agree": agree}


# float64 throughout: the distributed sums add in another order than the serial one.
BOUND = 1e-12


def schedule(seed: int, victims: list[int]) -> tuple[int, int, int]:
    """The victim (one of `victims`), the step it is killed at, the step the replacement
    joins at."""
    rng = random.Random(seed)
    victim = rng.choice(victims)
    kill_at = rng.randrange(1, 6)
    return victim, kill_at, rng.randrange(kill_at + 1, STEPS - 1)


def check(me: int, result: dict, victim: int, kill_at: int, grow_at: int, why: str) -> None:
    """`me`'s result against a serial run of the same memberships."""
    plan = [4 if step < kill_at or step >= grow_at else 3 for step in range(STEPS)]
    first = 0 if me != REPLACEMENT else grow_at
    assert result["plan"] == {s: plan[s] for s in range(first, STEPS)}, (why, me, result["plan"])
    assert result["failures"] == (1 if me != REPLACEMENT else 0), (why, me)
    assert result["agree"], f"{why}: the members' parameters differ"
    for got, expected in zip(result["params"], reference(plan)):
        diff = (got - expected).abs().max().item()
        assert diff <= BOUND, f"{why}: process {me}'s parameters are {diff} off the serial run"


def _child(me, port, victim, kill_at, grow_at, host, why):
    check(me, run(me, port, victim, kill_at, grow_at, None, host), victim, kill_at, grow_at, why)


def main() -> None:
    import multiprocessing

    me, size = int(os.environ["COMMUX_RANK"]), int(os.environ["COMMUX_SIZE"])
    assert size == 4, f"the job is made for 4 ranks, not {size}"
    host, port = os.environ["COMMUX_BOOTSTRAP"].rsplit(":", 1)
    port = int(port)
    # Every rank must draw the same schedule: without a seed, the run's store port is one.
    seed = int(os.environ.get("COMMUX_SURVIVE_SEED", port))
    # A rank of the second host (ranks 2 and 3 with 2 per host): its death crosses hosts.
    victim, kill_at, grow_at = schedule(seed, [2, 3])
    why = f"seed {seed} (COMMUX_SURVIVE_SEED): victim {victim}, killed at {kill_at}, replaced at {grow_at}"
    print(f"survive rank {me}: {why}", file=sys.stderr, flush=True)
    spawn = multiprocessing.get_context("spawn")
    args = (port, victim, kill_at, grow_at, host, why)
    store = None
    replacement = None
    if me == 0:
        store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False,
                              timeout=datetime.timedelta(seconds=120))
        replacement = spawn.Process(target=_child, args=(REPLACEMENT, *args))
        replacement.start()
    if me == victim:
        worker = spawn.Process(target=_child, args=(me, *args))
        worker.start()
        worker.join(120)
        assert worker.exitcode == -signal.SIGKILL, f"{why}: the victim ended with {worker.exitcode}"
    else:
        _child(me, *args)
    if replacement is not None:
        replacement.join(120)
        assert replacement.exitcode == 0, f"{why}: the replacement ended with {replacement.exitcode}"
    print(f"survive ok rank {me} ({why})", flush=True)
    del store


if __name__ == "__main__":
    sys.exit(main())
