"""FSDP2 (``fully_shard``) and DTensor on CPU device meshes over the backend
under test, each checked against a single-process reference.

* FSDP2 on a 1-D mesh ``init_device_mesh("cpu", (ws,))``: every rank trains a
  sharded copy of the model on its slice of each global batch, and a plain copy
  on the full batch; the local shards of gradients and parameters must match
  the reference's chunks after every step (compared without a collective, so
  that a failure points at FSDP, not at ``full_tensor()``), and so must the
  output of a final forward pass.  FSDP2 all-gathers parameters into flat tensors and
  reduce-scatters gradients with ``ReduceOp.AVG``; with world size 3 the
  shards are uneven (padded).  A custom gradient divide factor makes it
  reduce-scatter with ``PREMUL_SUM``.
* A 2-D mesh (2, 2) with named dims ("dp", "tp") at world size 4: Shard ->
  Replicate (all_gather), Partial -> Replicate (all_reduce), Partial -> Shard
  (reduce_scatter), Shard(0) -> Shard(1) (all_to_all), and sharded matmuls
  (colwise- and rowwise-sharded weight) compared with ``torch.matmul`` on the
  full tensors.
"""

import copy

import pytest
import torch
import torch.distributed as dist
import torch.nn as nn

from harness import BACKEND, run_ranks

GLOBAL_BATCH = 12
STEPS = 3
LR = 0.1
TOL = dict(rtol=1e-4, atol=1e-5)


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3)
    )


def _batch(step):
    g = torch.Generator().manual_seed(77 + step)
    return torch.randn(GLOBAL_BATCH, 8, generator=g), torch.randn(GLOBAL_BATCH, 3, generator=g)


def _fsdp_train(rank, ws, reshard_after_forward=True, divide_factor=None):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import FSDPModule, fully_shard

    mesh = init_device_mesh("cpu", (ws,))
    model = _mlp()
    ref = copy.deepcopy(model)
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)
    loss_scale = 1.0
    if divide_factor is not None:
        # Gradients are reduce-scattered as sum(g_i) / divide_factor (PREMUL_SUM
        # unless divide_factor == ws); scaling the loss compensates.
        for m in model.modules():  # the factor is per FSDP module (param group)
            if isinstance(m, FSDPModule):
                m.set_gradient_divide_factor(float(divide_factor))
        loss_scale = divide_factor / ws

    _check_shards(ref, model, rank, ws, "after fully_shard", exact=True)

    opt = torch.optim.SGD(model.parameters(), lr=LR)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=LR)
    n = GLOBAL_BATCH // ws
    for step in range(STEPS):
        x, y = _batch(step)
        opt.zero_grad()
        ref_opt.zero_grad()
        nn.functional.mse_loss(ref(x), y).backward()
        out = model(x[rank * n:(rank + 1) * n])
        (loss_scale * nn.functional.mse_loss(out, y[rank * n:(rank + 1) * n])).backward()
        _check_shards(ref, model, rank, ws, f"step {step}", grads=True)
        opt.step()
        ref_opt.step()

    _check_shards(ref, model, rank, ws, f"after {STEPS} steps")
    # A forward pass after training (parameters all-gathered by FSDP) agrees too.
    x, _ = _batch(99)
    with torch.no_grad():
        assert torch.allclose(model(x), ref(x), **TOL), "outputs of the trained models differ"
    return True


def _check_shards(ref, model, rank, ws, when, grads=False, exact=False):
    """Each rank's local shard (FSDP2 shards dim 0 like ``torch.chunk``) equals
    the matching chunk of the reference.  Compared locally, without a
    collective, so that this checks FSDP rather than ``full_tensor()``."""
    for (name, p_ref), (_, p) in zip(ref.named_parameters(), model.named_parameters()):
        want, got = (p_ref.grad, p.grad) if grads else (p_ref, p)
        what = f"{when}: {'gradient of ' if grads else ''}{name}"
        assert got is not None, f"{what} is None"
        chunks = torch.chunk(want, ws, dim=0)
        want = chunks[rank] if rank < len(chunks) else want.new_empty((0,) + want.shape[1:])
        got = got.to_local()
        assert got.shape == want.shape, f"{what}: local shard has shape {tuple(got.shape)}, expected {tuple(want.shape)}"
        ok = torch.equal(got, want) if exact else torch.allclose(got, want, **TOL)
        assert ok, (
            f"{what}: local shard differs from the reference; max abs diff "
            f"{(got - want).abs().max().item():.3e}"
        )


@pytest.mark.parametrize("world_size", [2, 3])
def test_fsdp2_fully_shard_training(world_size):
    assert all(run_ranks(_fsdp_train, world_size, timeout=180))


@pytest.mark.parametrize("world_size", [2])
def test_fsdp2_no_reshard_after_forward(world_size):
    assert all(run_ranks(_fsdp_train, world_size, timeout=180, reshard_after_forward=False))


@pytest.mark.skipif(BACKEND == "gloo", reason="gloo: Cannot use ReduceOp.PREMUL_SUM with Gloo")
@pytest.mark.parametrize("world_size", [2])
def test_fsdp2_premul_sum_divide_factor(world_size):
    assert all(run_ranks(_fsdp_train, world_size, timeout=180, divide_factor=2.0 * world_size))


# --------------------------------------------------------------------------
# DTensor on a 2-D mesh
# --------------------------------------------------------------------------


def _mesh_2d():
    from torch.distributed.device_mesh import init_device_mesh

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    rank = dist.get_rank()
    # Row-major layout: dp groups are {0,2},{1,3}, tp groups are {0,1},{2,3}.
    coord = mesh.get_coordinate()
    assert list(coord) == [rank // 2, rank % 2], f"rank {rank} got mesh coordinate {coord}"
    for dim, peers in (("dp", [rank % 2, rank % 2 + 2]), ("tp", [rank - rank % 2, rank - rank % 2 + 1])):
        g = mesh.get_group(dim)
        assert dist.get_process_group_ranks(g) == peers, f"{dim} group ranks {dist.get_process_group_ranks(g)}"
        t = torch.tensor([float(rank)])
        dist.all_reduce(t, group=g)
        assert t.item() == float(sum(peers)), f"all_reduce on the {dim} subgroup gave {t.item()}"
    return mesh


def _full(shape, seed):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _dtensor_shard_replicate(rank, ws):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = _mesh_2d()
    full = _full((8, 6), 1)
    for placements in ([Shard(0), Shard(0)], [Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Replicate()]):
        dt = distribute_tensor(full, mesh, placements)
        # The local shard is the expected chunk of the full tensor.
        want = full
        for mesh_dim, pl in enumerate(placements):
            if isinstance(pl, Shard):
                want = want.chunk(2, dim=pl.dim)[mesh.get_coordinate()[mesh_dim]]
        assert torch.equal(dt.to_local(), want), f"{placements}: wrong local shard on rank {rank}"
        rep = dt.redistribute(mesh, [Replicate(), Replicate()])
        assert torch.equal(rep.to_local(), full), f"{placements} -> Replicate gave a wrong tensor"
        assert torch.equal(dt.full_tensor(), full), f"{placements}: full_tensor() is wrong"
    # Shard(0) -> Shard(1) on the tp dim (all_to_all).
    dt = distribute_tensor(full, mesh, [Replicate(), Shard(0)])
    s1 = dt.redistribute(mesh, [Replicate(), Shard(1)])
    assert torch.equal(s1.to_local(), full.chunk(2, dim=1)[rank % 2]), "Shard(0) -> Shard(1) gave a wrong shard"
    assert torch.equal(s1.full_tensor(), full)
    return True


def _dtensor_partial_replicate(rank, ws):
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    mesh = _mesh_2d()
    contrib = [_full((4, 6), 10 + r) for r in range(ws)]
    total = sum(contrib)

    dt = DTensor.from_local(contrib[rank], mesh, [Partial(), Partial()], run_check=False)
    rep = dt.redistribute(mesh, [Replicate(), Replicate()])
    assert torch.allclose(rep.to_local(), total, **TOL), "Partial x Partial -> Replicate is not the sum over all ranks"
    assert torch.allclose(dt.full_tensor(), total, **TOL)

    # Partial only on tp: the sum runs over the tp group.
    tp_peers = [rank - rank % 2, rank - rank % 2 + 1]
    dt = DTensor.from_local(contrib[rank], mesh, [Replicate(), Partial()], run_check=False)
    got = dt.redistribute(mesh, [Replicate(), Replicate()]).to_local()
    assert torch.allclose(got, contrib[tp_peers[0]] + contrib[tp_peers[1]], **TOL), "Partial on tp -> Replicate"

    # Partial -> Shard(0) is a reduce_scatter.
    dt = DTensor.from_local(contrib[rank], mesh, [Partial(), Partial()], run_check=False)
    sh = dt.redistribute(mesh, [Shard(0), Shard(1)])
    want = total.chunk(2, dim=0)[rank // 2].chunk(2, dim=1)[rank % 2]
    assert torch.allclose(sh.to_local(), want, **TOL), "Partial -> Shard gave a wrong shard"

    # Partial("avg").
    dt = DTensor.from_local(contrib[rank], mesh, [Partial("avg"), Partial("avg")], run_check=False)
    got = dt.redistribute(mesh, [Replicate(), Replicate()]).to_local()
    assert torch.allclose(got, total / ws, **TOL), "Partial(avg) -> Replicate is not the mean over all ranks"
    return True


def _dtensor_matmul(rank, ws):
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    mesh = _mesh_2d()
    x = _full((8, 6), 20)
    w = _full((6, 10), 21)
    want = torch.matmul(x, w)

    # Colwise: weight sharded on its output dim over tp, input replicated.
    xd = distribute_tensor(x, mesh, [Replicate(), Replicate()])
    wd = distribute_tensor(w, mesh, [Replicate(), Shard(1)])
    y = torch.matmul(xd, wd)
    assert tuple(y.placements) == (Replicate(), Shard(1)), f"colwise matmul placements {y.placements}"
    assert torch.allclose(y.full_tensor(), want, **TOL), "colwise-sharded matmul differs from torch.matmul"

    # Rowwise: input sharded on its inner dim, weight on its input dim; the
    # result is Partial over tp, and the batch is sharded over dp.
    xd = distribute_tensor(x, mesh, [Shard(0), Shard(1)])
    wd = distribute_tensor(w, mesh, [Replicate(), Shard(0)])
    y = torch.matmul(xd, wd)
    assert torch.allclose(y.full_tensor(), want, **TOL), "rowwise-sharded matmul differs from torch.matmul"
    rep = y.redistribute(mesh, [Replicate(), Replicate()])
    assert torch.allclose(rep.to_local(), want, **TOL)

    # A DTensor linear layer forward + backward: gradient of the sharded
    # weight equals the full one.
    wd = distribute_tensor(w, mesh, [Replicate(), Shard(1)]).requires_grad_()
    xd = distribute_tensor(x, mesh, [Shard(0), Replicate()])
    torch.matmul(xd, wd).sum().backward()
    w_full = w.clone().requires_grad_()
    torch.matmul(x, w_full).sum().backward()
    assert torch.allclose(wd.grad.full_tensor(), w_full.grad, **TOL), "gradient of the sharded weight is wrong"
    return True


def test_dtensor_2d_shard_to_replicate():
    assert all(run_ranks(_dtensor_shard_replicate, 4, timeout=180))


def test_dtensor_2d_partial_to_replicate():
    assert all(run_ranks(_dtensor_partial_replicate, 4, timeout=180))


def test_dtensor_2d_sharded_matmul():
    assert all(run_ranks(_dtensor_matmul, 4, timeout=180))
