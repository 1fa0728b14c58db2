"""The core's reduction kernels (src/core/reduce.cpp, no torch) against ATen itself: every
(dtype, operation) commux reduces, on random data with the edges that tell implementations
apart (NaN and infinities, signed zeros, integer overflow, half and bfloat16 rounding),
through commux._C._core_reduce. A mismatch prints the seed, which replays it."""
import os

import pytest
import torch

import commux

_C = commux.load_extension()

DTYPES = [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.complex64,
          torch.complex128]
OPS = {"sum": torch.add, "product": torch.mul, "min": torch.minimum, "max": torch.maximum,
       "band": torch.bitwise_and, "bor": torch.bitwise_or, "bxor": torch.bitwise_xor}


def _sample(n, dtype, gen):
    if dtype.is_complex:
        part = torch.float32 if dtype == torch.complex64 else torch.float64
        return torch.complex(_sample(n, part, gen), _sample(n, part, gen))
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=gen).bool()
    if dtype.is_floating_point:
        # Wide magnitudes (overflow and subnormals of the narrow types) plus special values.
        x = torch.randn(n, generator=gen, dtype=torch.float64) * 10.0 ** torch.randint(
            -9, 6, (n,), generator=gen).double()
        special = torch.tensor([float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 65504.0,
                                65520.0, 1.0, 2.0 ** -11, 2.0 ** -24, 2.0 ** -25, 3.0e38],
                               dtype=torch.float64)
        at = torch.randint(0, n, (n // 8,), generator=gen)
        x[at] = special[torch.randint(0, len(special), (len(at),), generator=gen)]
        return x.to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, (n,), generator=gen, dtype=torch.int64).to(dtype)


def _complex_pairs(a, b, name):
    """What the core computes for complex numbers, in torch, one rounding per operation:
    (a + c, b + d) and (ac - bd, ad + bc). ATen's own complex ops differ from it on purpose
    in two places, so commux leaves torch's complex folds to ATen (src/c10d/aten_fold.cpp): its
    add is a + 1 * b, and inf * (1 + 0i) has a NaN part; its vectorised product uses fused
    multiply-adds where the CPU has them (one rounding less)."""
    x, y = torch.view_as_real(a), torch.view_as_real(b)
    if name == "sum":
        return torch.view_as_complex(x + y)
    re = x[..., 0] * y[..., 0] - x[..., 1] * y[..., 1]
    im = x[..., 0] * y[..., 1] + x[..., 1] * y[..., 0]
    return torch.view_as_complex(torch.stack([re, im], dim=-1))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_core_kernels_equal_aten(dtype):
    seed = int(os.environ.get("COMMUX_REDUCE_SEED", int.from_bytes(os.urandom(2), "little")))
    gen = torch.Generator().manual_seed(seed)
    for n in (1, 7, 64, 1000, 70_001):
        a, b = _sample(n, dtype, gen), _sample(n, dtype, gen)
        for name, aten in OPS.items():
            if (name in ("band", "bor", "bxor") and (dtype.is_floating_point or dtype.is_complex)
                    or name in ("min", "max") and dtype.is_complex):
                refused = a.clone()
                assert not _C._core_reduce(refused, a, b, name), (dtype, name)
                assert torch.equal(refused.view(torch.uint8), a.view(torch.uint8)), (dtype, name)
                continue
            out = torch.empty_like(a)
            assert _C._core_reduce(out, a, b, name), (dtype, name)
            want = aten(a, b) if not dtype.is_complex else _complex_pairs(a, b, name)
            # Complex numbers compare as their (real, imaginary) pairs, NaN matching NaN.
            o, w = (torch.view_as_real(out), torch.view_as_real(want)) if dtype.is_complex \
                else (out, want)
            if o.dtype.is_floating_point:
                differ = (o != w) & ~(o.isnan() & w.isnan())
            else:
                differ = o != w
            if differ.dim() > 1:
                differ = differ.any(dim=-1)
            if differ.any():
                bad = differ.nonzero()[:5].flatten()
                pytest.fail(f"seed {seed} (COMMUX_REDUCE_SEED replays): {dtype} {name} n={n}: "
                            f"at {bad.tolist()}: a={a[bad].tolist()} b={b[bad].tolist()} "
                            f"core={out[bad].tolist()} aten={want[bad].tolist()}")
            # In place, as the engine folds: out is one of the inputs.
            acc = a.clone()
            assert _C._core_reduce(acc, acc, b, name)
            assert torch.equal(acc.view(torch.uint8) if dtype != torch.bool else acc,
                               out.view(torch.uint8) if dtype != torch.bool else out), (seed, dtype, name)
