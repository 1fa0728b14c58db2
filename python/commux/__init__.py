"""commux: a UCX backend for torch.distributed with MPI-style (sender, tag) matching.

``import commux; commux.register()`` makes the backend available as ``"ucx"`` (alias
``"commux"``) for CPU and CUDA devices. The package also registers itself through the
``torch.backends`` entry point, so ``init_process_group(backend="ucx")`` works without
importing it. This module stays import-light on purpose: torch imports it while torch
itself is loading, and UCX is only loaded when a process group is first created.
"""

from __future__ import annotations

import atexit
import threading

__version__ = "0.1.0"
__all__ = [
    "register",
    "preferred_backend",
    "load_extension",
    "health",
    "BACKEND_NAMES",
    "__version__",
]

#: Names under which the backend is registered with torch.distributed.
BACKEND_NAMES = ("ucx", "commux")
_DEVICES = ["cpu", "cuda"]

# Re-entrant: importing torch.distributed runs torch's backend autoload, which calls
# register() on this thread (see load_extension).
_lock = threading.RLock()
_extension = None


def load_extension():
    """Loads UCX and the compiled extension ``commux._C`` (once) and returns it."""
    global _extension
    # torch.distributed first, outside the lock: its import runs the torch.backends entry
    # point, which registers commux (register() takes the lock too).
    import torch.distributed  # noqa: F401  (the Backend base class lives there)

    with _lock:
        if _extension is None:
            from . import _build_config

            if _build_config.UCX_PROVIDER == "wheel":
                # The PyPI UCX wheel keeps its libraries in its own folder; load them so
                # the extension's libucp dependency resolves without LD_LIBRARY_PATH.
                import libucx

                libucx.load_library()
            from . import _C

            atexit.register(_C._shutdown)
            _extension = _C
    return _extension


def _create_backend(dist_options, backend_options=None):
    """torch.distributed's factory hook (extended API): one backend per process group."""
    _C = load_extension()
    return _C.ProcessGroupUCX(
        dist_options.store,
        dist_options.group_rank,
        dist_options.group_size,
        dist_options.timeout,
    )


def _skip_torch_flight_recorder() -> None:
    """Keeps torch's per-op flight-recorder hook off commux groups unless asked for.

    From torch 2.15 on, every group of a third-party backend gets torch's FlightRecorderHook,
    which captures a Python traceback on every operation: about 5 us per call, more than
    doubling the latency of a small send. Gloo and the fake backend are exempt (listed as
    recording themselves). commux joins that list by default; set
    ``COMMUX_TORCH_FLIGHT_RECORDER=1`` to keep torch's hook (hang forensics, dumps).
    """
    import os

    import torch.distributed.distributed_c10d as c10d

    exempt = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if exempt is None:
        return
    value = os.environ.get("COMMUX_TORCH_FLIGHT_RECORDER", "0").strip().lower()
    if value in ("1", "true", "on", "yes"):
        exempt.difference_update(BACKEND_NAMES)
    elif value in ("0", "false", "off", "no", ""):
        exempt.update(BACKEND_NAMES)
    else:
        raise ValueError(
            f"COMMUX_TORCH_FLIGHT_RECORDER={value!r} is not a boolean (use 0 or 1)"
        )


def register() -> None:
    """Registers the ``ucx`` and ``commux`` backends with torch.distributed (idempotent)."""
    import torch.distributed as dist

    with _lock:
        for name in BACKEND_NAMES:
            if name in dist.Backend.backend_list:
                continue
            dist.Backend.register_backend(
                name, _create_backend, extended_api=True, devices=list(_DEVICES)
            )
        _skip_torch_flight_recorder()


def preferred_backend() -> str:
    """Registers commux and returns the backend name to pass to init_process_group."""
    register()
    return "ucx"


def health(group=None) -> dict:
    """What this rank knows of a commux group's health (the default group when None).

    Returns ``{"healthy": bool, "dead_ranks": [int], "reason": str}``. ``healthy`` turns
    False once the group can run no more collectives: a member died, a collective failed
    on this rank (a timeout, an abort), or the group was aborted or shut down. The way back
    is a new group: ``destroy_process_group()`` and ``init_process_group()`` again (or
    torchrun's restart). Raises ValueError for a group that is not a commux group.
    """
    import torch
    import torch.distributed as dist

    _C = load_extension()
    if group is None:
        group = dist.group.WORLD
        if group is None:
            raise ValueError("commux.health: no default process group; call init_process_group first")
    backend = None
    for device in ("cpu", "cuda"):
        try:
            backend = group._get_backend(torch.device(device))
        except (RuntimeError, ValueError):
            continue
        if isinstance(backend, _C.ProcessGroupUCX):
            return backend.health()
    raise ValueError(
        f"commux.health: this group's backend is {type(backend).__name__}, not commux's ucx"
    )
