"""Train a small MLP with DistributedDataParallel over commux (backend ``ucx``) on CPU.

    torchrun --standalone --nproc-per-node=2 examples/ddp_train.py
    torchrun --standalone --nproc-per-node=2 examples/ddp_train.py --backend gloo   # without commux

Every rank reads its own part of a synthetic regression dataset (DistributedSampler),
DDP averages the gradients with all_reduce, and rank 0 prints the mean loss of each
epoch.  At the end the ranks all_gather their parameters: the job prints PASS and exits
0 only if every rank holds exactly the same parameters and the loss went down.
"""

from __future__ import annotations

import argparse
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def make_dataset(n: int = 2048, dim: int = 16) -> TensorDataset:
    """y = x @ w + 0.5 sin(2 x_0) + noise, the same on every rank (fixed seed)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, dim, generator=g)
    w = torch.randn(dim, 1, generator=g) / dim**0.5
    y = x @ w + 0.5 * torch.sin(2 * x[:, :1]) + 0.05 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="ucx", choices=("ucx", "commux", "gloo"))
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=32, help="per rank")
    args = parser.parse_args()

    if args.backend != "gloo":
        import commux  # registers the "ucx"/"commux" backend (also autoloaded by torch)

        commux.register()
    dist.init_process_group(args.backend)  # rank, world size, address: from torchrun (env://)
    rank, world_size = dist.get_rank(), dist.get_world_size()

    dataset = make_dataset()
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler)

    torch.manual_seed(0)  # same initial model everywhere (DDP also broadcasts rank 0's)
    model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    ddp_model = DDP(model)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.02, momentum=0.9)

    if rank == 0:
        print(f"backend={dist.get_backend()} world_size={world_size} "
              f"samples/rank={len(sampler)} steps/epoch={len(loader)}")
    epoch_losses = []
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)  # a different shuffle each epoch
        stats = torch.zeros(2, dtype=torch.float64)  # [sum of losses, number of samples]
        for x, y in loader:
            loss = nn.functional.mse_loss(ddp_model(x), y)
            opt.zero_grad()
            loss.backward()  # DDP all_reduces (averages) the gradients here
            opt.step()
            stats += torch.tensor([loss.item() * len(x), len(x)], dtype=torch.float64)
        dist.all_reduce(stats)  # the mean over all ranks' samples
        epoch_losses.append((stats[0] / stats[1]).item())
        if rank == 0:
            print(f"epoch {epoch}: loss {epoch_losses[-1]:.5f}")

    # Every rank must hold bitwise identical parameters.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    gathered = [torch.empty_like(flat) for _ in range(world_size)]
    dist.all_gather(gathered, flat)
    differing = [r for r in range(world_size) if not torch.equal(gathered[r], gathered[0])]
    learned = epoch_losses[-1] < 0.5 * epoch_losses[0]
    dist.destroy_process_group()

    if rank == 0:
        if differing:
            print(f"FAIL: parameters of ranks {differing} differ from rank 0's")
        if not learned:
            print(f"FAIL: the loss did not go down enough ({epoch_losses[0]:.5f} -> {epoch_losses[-1]:.5f})")
        if not differing and learned:
            print(f"PASS: {world_size} ranks hold identical parameters ({flat.numel()} values)")
    return 1 if differing or not learned else 0


if __name__ == "__main__":
    sys.exit(main())
