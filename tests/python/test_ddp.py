"""DistributedDataParallel on CPU over the backend under test, each run checked
against a single-process reference trained on the full batch.

Every rank builds the same model (same seed), trains it with DDP on its
1/world_size slice of each global batch, and also trains a plain copy of the
model on the whole batch in the same process.  With a mean loss and equal
slices, DDP's averaged gradients equal the full-batch gradients, so after a
few SGD steps the parameters must match the reference (allclose; looser for
the fp16 compression hook) and be bitwise identical across ranks.

Covered: the default (built-in C++) allreduce hook incl. the initial
parameter broadcast from rank 0, several buckets (small ``bucket_cap_mb``),
``find_unused_parameters=True`` with a branch that leaves parameters unused,
``no_sync()`` gradient accumulation, and the ``fp16_compress_hook``.
"""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from harness import run_ranks

IN, HID, OUT = 8, 16, 2
GLOBAL_BATCH = 12  # divisible by 1, 2, 3 and 4
STEPS = 4
LR = 0.1
TOL = dict(rtol=1e-4, atol=1e-5)
FP16_TOL = dict(rtol=1e-2, atol=2e-3)


class BranchyMLP(nn.Module):
    """An MLP with several layers; ``use_extra`` selects whether ``extra`` takes
    part in the forward pass, and ``never_used`` (only with ``with_unused``)
    never does."""

    def __init__(self, with_unused=False):
        super().__init__()
        self.l1 = nn.Linear(IN, HID)
        self.l2 = nn.Linear(HID, HID)
        self.l3 = nn.Linear(HID, HID)
        self.extra = nn.Linear(HID, HID)
        self.head = nn.Linear(HID, OUT)
        if with_unused:
            self.never_used = nn.Linear(HID, HID)

    def forward(self, x, use_extra=True):
        h = torch.tanh(self.l1(x))
        h = torch.tanh(self.l2(h))
        h = torch.tanh(self.l3(h))
        if use_extra:
            h = torch.tanh(self.extra(h))
        return self.head(h)


def _batch(step, micro=0):
    g = torch.Generator().manual_seed(1000 * step + micro)
    return torch.randn(GLOBAL_BATCH, IN, generator=g), torch.randn(GLOBAL_BATCH, OUT, generator=g)


def _local(t, rank, ws):
    n = GLOBAL_BATCH // ws
    return t[rank * n:(rank + 1) * n]


def _loss(model, x, y, **kw):
    return nn.functional.mse_loss(model(x, **kw), y)


def _compare(ref, ddp_module, tol, what):
    for (name, p_ref), (_, p) in zip(ref.named_parameters(), ddp_module.named_parameters()):
        assert torch.allclose(p, p_ref, **tol), (
            f"{what}: parameter {name} differs from the single-process reference; "
            f"max abs diff {(p - p_ref).abs().max().item():.3e}"
        )


def _ddp_train(rank, ws, mode):
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = BranchyMLP(with_unused=(mode == "unused"))
    ref = copy.deepcopy(model)
    if rank != 0:
        # DDP must broadcast rank 0's parameters at construction.
        with torch.no_grad():
            for p in model.parameters():
                p.add_(float(rank))

    kwargs = {}
    if mode == "buckets":
        kwargs["bucket_cap_mb"] = 0.0015  # ~1.5 KiB: the 16x16 layers land in separate buckets
    if mode == "unused":
        kwargs["find_unused_parameters"] = True
    ddp = DDP(model, **kwargs)
    if mode == "fp16":
        from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook

        ddp.register_comm_hook(state=None, hook=fp16_compress_hook)

    for (name, p_ref), (_, p) in zip(ref.named_parameters(), ddp.module.named_parameters()):
        assert torch.equal(p, p_ref), f"parameter {name} was not broadcast from rank 0 by DDP"

    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    micro_batches = 3 if mode == "no_sync" else 1

    for step in range(STEPS):
        # "unused": ``extra`` takes part only in odd steps (same choice on every rank).
        fwd_kw = {"use_extra": step % 2 == 1} if mode == "unused" else {}
        opt.zero_grad(set_to_none=True)
        ref_opt.zero_grad(set_to_none=True)
        for micro in range(micro_batches):
            x, y = _batch(step, micro)
            _loss(ref, x, y, **fwd_kw).backward()
            xl, yl = _local(x, rank, ws), _local(y, rank, ws)
            if micro < micro_batches - 1:
                with ddp.no_sync():
                    _loss(ddp, xl, yl, **fwd_kw).backward()
                # Inside no_sync the gradients stay local (not averaged yet).
                local_grad = ddp.module.l1.weight.grad.clone()
            else:
                _loss(ddp, xl, yl, **fwd_kw).backward()
        if mode == "no_sync":
            assert not torch.equal(local_grad, ddp.module.l1.weight.grad), "the synced step did not change grads"
        if mode == "unused":
            assert ddp.module.never_used.weight.grad is None, "never_used got a gradient"
            if step % 2 == 0:
                g = ddp.module.extra.weight.grad
                assert g is None or not g.any(), "extra was unused in this step but got a non-zero gradient"
        tol = FP16_TOL if mode == "fp16" else TOL
        for (name, p_ref), (_, p) in zip(ref.named_parameters(), ddp.module.named_parameters()):
            if p_ref.grad is None:
                continue
            assert p.grad is not None, f"step {step}: {name} has no gradient under DDP"
            assert torch.allclose(p.grad, p_ref.grad, **tol), (
                f"step {step}: gradient of {name} differs from the full-batch reference; "
                f"max abs diff {(p.grad - p_ref.grad).abs().max().item():.3e}"
            )
        opt.step()
        ref_opt.step()

    _compare(ref, ddp.module, FP16_TOL if mode == "fp16" else TOL, f"mode={mode}")

    if mode == "buckets":
        info = ddp._get_ddp_logging_data()
        sizes = str(info.get("rebuilt_bucket_sizes", "")).split(",")
        assert len(sizes) > 1, f"expected several buckets, logging data says {info.get('rebuilt_bucket_sizes')!r}"
        assert info.get("num_buckets_reduced", 0) > 1, f"num_buckets_reduced={info.get('num_buckets_reduced')}"

    return [p.detach().clone() for p in ddp.module.parameters()]


def _check_identical_across_ranks(results):
    for r, params in enumerate(results[1:], start=1):
        for i, (a, b) in enumerate(zip(results[0], params)):
            assert torch.equal(a, b), (
                f"parameter {i} differs between rank 0 and rank {r} after training "
                f"(max abs diff {(a - b).abs().max().item():.3e}): allreduce results "
                f"are not identical on all ranks"
            )


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_default_hook(world_size):
    _check_identical_across_ranks(run_ranks(_ddp_train, world_size, timeout=150, mode="default"))


@pytest.mark.parametrize("world_size", [2])
def test_ddp_multiple_buckets(world_size):
    _check_identical_across_ranks(run_ranks(_ddp_train, world_size, timeout=150, mode="buckets"))


@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_find_unused_parameters(world_size):
    _check_identical_across_ranks(run_ranks(_ddp_train, world_size, timeout=150, mode="unused"))


@pytest.mark.parametrize("world_size", [2])
def test_ddp_no_sync_accumulation(world_size):
    _check_identical_across_ranks(run_ranks(_ddp_train, world_size, timeout=150, mode="no_sync"))


@pytest.mark.parametrize("world_size", [2])
def test_ddp_fp16_compress_hook(world_size):
    _check_identical_across_ranks(run_ranks(_ddp_train, world_size, timeout=150, mode="fp16"))
