"""A DDP training job that survives losing a rank (tests/python/test_survive.py).

Four processes train a small float64 model with DDP over a commux group made with
enable_reconfigure=True. One of them (any, the store lives in the test's own process) is
killed at the start of a random step; the survivors' step fails, they put their parameters
back as they were before it, reconfigure to themselves and do the step again, three of
them. A few steps later a replacement process joins: everyone reconfigures to four again,
and DDP's construction broadcasts rank 0's parameters to it (its own start from other
values, so a replacement that was not healed fails the check). Each process returns its
final parameters and the steps' memberships; the test compares them with a serial run of
the same schedule."""

from __future__ import annotations

import datetime
import os
import signal
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


def run(me: int, port: int, victim: int, kill_at: int, grow_at: int, shm: str) -> dict:
    os.environ["COMMUX_SHM"] = shm
    import commux

    commux.register()
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
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
    dist.barrier()
    params = [p.detach().clone() for p in net.parameters()]
    dist.destroy_process_group()
    return {"plan": plan, "params": params, "failures": failures}
