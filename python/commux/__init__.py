"""commux: a UCX backend for torch.distributed with MPI-style (sender, tag) matching.

``import commux; commux.register()`` makes the backend available as ``"ucx"`` (alias
``"commux"``) for CPU and CUDA devices. The package also registers itself through the
``torch.backends`` entry point, so ``init_process_group(backend="ucx")`` works without
importing it. This module stays import-light on purpose: torch imports it while torch
itself is loading, and UCX is only loaded when a process group is first created.

Neither importing nor registering changes ``os.environ``. Registering wraps torch's
``env://`` rendezvous so that a commux group's ``init_process_group`` (and only a commux
group's) reads the variables that ``mpirun`` (Open MPI, MPICH/Hydra), PMIx and ``srun`` set
and fills in the unset ones of ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT`` then, so that the default
``env://`` rendezvous works without torchrun (``commux.launcher`` lists what is read;
``commux.launcher.apply()`` fills them earlier on request; ``COMMUX_LAUNCHER=0`` turns it
off).
"""

from __future__ import annotations

import atexit
import os
import threading
import warnings

__version__ = "0.1.0"
__all__ = [
    "register",
    "preferred_backend",
    "load_extension",
    "health",
    "config",
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

            if os.environ.get("COMMUX_UCX_HOME"):
                _load_site_ucx(os.environ["COMMUX_UCX_HOME"])
            elif _build_config.UCX_PROVIDER == "wheel":
                # The PyPI UCX wheel keeps its libraries in its own folder; load them so
                # the extension's libucp dependency resolves without LD_LIBRARY_PATH.
                import libucx

                libucx.load_library()
            from . import _C

            atexit.register(_C._shutdown)
            _extension = _C
    return _extension


#: The oldest UCX commux runs on (Debian 12's libucx0); libcommux checks it too.
OLDEST_UCX = (1, 13)


def _load_site_ucx(home: str) -> None:
    """Loads the UCX installed under ``home`` (COMMUX_UCX_HOME: a cluster's UCX with its
    InfiniBand/RoCE transports) before the extension, whose libucp/libucs dependencies then
    resolve to it by soname instead of to the wheel's UCX."""
    import ctypes

    candidates = [home, os.path.join(home, "lib"), os.path.join(home, "lib64"),
                  os.path.join(home, "lib", "x86_64-linux-gnu"), os.path.join(home, "lib", "aarch64-linux-gnu")]
    libdir = next((d for d in candidates if os.path.isfile(os.path.join(d, "libucp.so.0"))), None)
    if libdir is None:
        raise ImportError(f"commux: COMMUX_UCX_HOME={home}: no libucp.so.0 in any of {candidates}")
    loaded = {}
    # Dependencies first, each by full path; RTLD_LOCAL as libucx does (no symbol clashes).
    for name in ("libucs.so.0", "libucm.so.0", "libuct.so.0", "libucp.so.0"):
        path = os.path.join(libdir, name)
        if os.path.isfile(path):
            loaded[name] = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
    major, minor, release = ctypes.c_uint(), ctypes.c_uint(), ctypes.c_uint()
    loaded["libucp.so.0"].ucp_get_version(ctypes.byref(major), ctypes.byref(minor), ctypes.byref(release))
    if (major.value, minor.value) < OLDEST_UCX:
        raise ImportError(
            f"commux: COMMUX_UCX_HOME={home} holds UCX {major.value}.{minor.value}.{release.value}; "
            f"commux needs UCX {OLDEST_UCX[0]}.{OLDEST_UCX[1]} or newer")


def _create_backend(dist_options, backend_options=None):
    """torch.distributed's factory hook (extended API): one backend per process group."""
    _C = load_extension()
    return _C.ProcessGroupUCX(
        dist_options.store,
        dist_options.group_rank,
        dist_options.group_size,
        dist_options.timeout,
        not _store_is_python(dist_options.store),
        # torch >= 2.15: init_process_group(enable_reconfigure=True) makes the group wait
        # for dist._reconfigure to give it its members.
        bool(getattr(dist_options, "enable_reconfigure", False)),
    )


def _store_is_python(store) -> bool:
    """True when `store` (under any PrefixStore) is a dist.Store subclass written in Python.

    Its every call needs the GIL, so the group's set-up cannot run on a thread of its own:
    the group's destructor, which waits for that thread, runs with the GIL held.
    """
    import torch.distributed as dist

    while isinstance(store, dist.PrefixStore):
        store = store.underlying_store
    return type(store).__module__ != dist.TCPStore.__module__


def _skip_torch_flight_recorder() -> None:
    """Keeps torch's per-op flight-recorder hook off commux groups unless asked for.

    From torch 2.15 on, every group of a third-party backend gets torch's FlightRecorderHook,
    which captures a Python traceback on every operation: about 5 us per call, more than
    doubling the latency of a small send. Gloo and the fake backend are exempt (listed as
    recording themselves). commux joins that list by default; set
    ``COMMUX_TORCH_FLIGHT_RECORDER=1`` to keep torch's hook (hang forensics, dumps).
    """
    import torch.distributed.distributed_c10d as c10d

    exempt = getattr(c10d, "_FR_SELF_RECORDING_BACKENDS", None)
    if exempt is None:
        return
    if _keep_torch_flight_recorder():
        exempt.difference_update(BACKEND_NAMES)
    else:
        exempt.update(BACKEND_NAMES)


_launcher_hooked = False


def _hook_launcher() -> None:
    """Wraps torch's env:// rendezvous so that a commux group's fills RANK, WORLD_SIZE,
    LOCAL_RANK, ... from mpirun's or srun's variables (commux.launcher), once per process.
    Changes nothing in os.environ. Never raises: registering must not fail over it."""
    global _launcher_hooked
    if _launcher_hooked:
        return
    _launcher_hooked = True
    try:
        from . import launcher

        launcher._install_rendezvous_hook()
    except Exception as error:  # noqa: BLE001 - a torch whose rendezvous module differs
        warnings.warn(
            f"commux: torch's env:// rendezvous could not be wrapped ({error}); under mpirun "
            "or srun call commux.launcher.apply() before init_process_group, or set RANK, "
            "WORLD_SIZE, MASTER_ADDR and MASTER_PORT yourself",
            RuntimeWarning,
            stacklevel=3,
        )


def register() -> None:
    """Registers the ``ucx`` and ``commux`` backends with torch.distributed (idempotent),
    and has a commux group's env:// rendezvous fill its variables from the launcher's
    (commux.launcher); nothing in os.environ changes here."""
    import torch.distributed as dist

    with _lock:
        _hook_launcher()
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


def config() -> dict:
    """Every ``COMMUX_*`` setting as this process reads it (name -> value), from the one
    table that also reads them and prints docs/settings.md's table of settings
    (``python3 -m commux.info --settings-table``): the C++ core's (read once per process; a
    value out of its range raises ``ValueError`` naming the variable) and the Python
    package's own (``COMMUX_LAUNCHER``, ``COMMUX_TORCH_FLIGHT_RECORDER``,
    ``COMMUX_UCX_HOME``)."""
    from . import launcher

    _C = load_extension()
    values = dict(_C.config())
    python_side = {
        "COMMUX_LAUNCHER": lambda: not launcher._disabled(os.environ),
        "COMMUX_TORCH_FLIGHT_RECORDER": _keep_torch_flight_recorder,
        "COMMUX_UCX_HOME": lambda: os.environ.get("COMMUX_UCX_HOME", ""),
    }
    ordered = {}
    for name, _default, _meaning, read_by_core in _C.settings_table():
        ordered[name] = values[name] if read_by_core else python_side[name]()
    return ordered


def _keep_torch_flight_recorder() -> bool:
    """COMMUX_TORCH_FLIGHT_RECORDER as a boolean; anything else raises naming it."""
    from . import _env

    return _env.boolean(os.environ, "COMMUX_TORCH_FLIGHT_RECORDER", False)


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
