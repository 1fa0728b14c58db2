"""Rank, size and rendezvous address from the launcher that started the job.

torch's default ``env://`` rendezvous reads ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
``MASTER_PORT``, which torchrun sets and ``mpirun`` / ``srun`` do not. This module reads what
the launcher did set and fills in ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``,
``LOCAL_WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``, so that
``torch.distributed.init_process_group("ucx")`` works under ``mpirun`` and ``srun`` as under
torchrun. It does so at two moments only, never at import:

* When a commux group is initialised through ``env://`` (``init_process_group("ucx")``, also
  ``"commux"`` or a device map naming one of them, e.g. ``"cpu:ucx,cuda:nccl"``): commux wraps
  torch's ``env://`` rendezvous handler when it registers, and in that call only the wrapper
  fills the variables in ``os.environ``, just before torch's handler reads them. They stay set
  afterwards, as torchrun's do (code after ``init_process_group`` may read ``LOCAL_RANK``).
  The rendezvous of other backends (``gloo``, ``nccl``, ...) and other users of ``env://``
  pass through untouched, and importing torch (which loads commux through its
  ``torch.backends`` entry point) or commux changes nothing in ``os.environ``: frameworks
  that tell "am I distributed?" from ``RANK`` or ``WORLD_SIZE`` behave as without commux.
* When the program calls :func:`apply` itself, e.g. to have ``LOCAL_RANK`` to choose a device
  before ``init_process_group``: ``commux.launcher.apply()``.

* Only variables that are unset (or empty) are filled: an explicit setting always wins.
* Nothing at all is done under torchrun (any ``TORCHELASTIC_*`` variable), when ``RANK`` and
  ``WORLD_SIZE`` are both set already, when no launcher is recognised, or with
  ``COMMUX_LAUNCHER=0``.
* ``python3 -m commux.launcher`` (e.g. ``mpirun -np 2 python3 -m commux.launcher``) prints
  what would be set.

Launchers, tried in this order (the first that applies is used):

Open MPI (``mpirun``/``mpiexec``), recognised by ``OMPI_COMM_WORLD_RANK`` and ``_SIZE``:
    ``RANK`` <- ``OMPI_COMM_WORLD_RANK``, ``WORLD_SIZE`` <- ``OMPI_COMM_WORLD_SIZE``,
    ``LOCAL_RANK`` <- ``OMPI_COMM_WORLD_LOCAL_RANK``, ``LOCAL_WORLD_SIZE`` <-
    ``OMPI_COMM_WORLD_LOCAL_SIZE``. One host when the local size equals the size (else
    ``OMPI_MCA_orte_num_nodes`` == 1). Job id: ``PMIX_NAMESPACE``, ``OMPI_MCA_ess_base_jobid``
    or ``OMPI_MCA_orte_ess_jobid``.
Slurm (``srun``), recognised by ``SLURM_PROCID`` with ``SLURM_STEP_ID`` (a job step; the
batch script itself has no step id and is not a launch):
    ``RANK`` <- ``SLURM_PROCID``, ``WORLD_SIZE`` <- ``SLURM_STEP_NUM_TASKS`` (else
    ``SLURM_NTASKS``, ``SLURM_NPROCS``), ``LOCAL_RANK`` <- ``SLURM_LOCALID``,
    ``LOCAL_WORLD_SIZE`` <- this node's entry of ``SLURM_STEP_TASKS_PER_NODE`` (``2(x3),1``;
    the node found by ``SLURMD_NODENAME`` in the node list, or ``SLURM_NODEID``), else
    ``SLURM_NTASKS_PER_NODE``. Hosts: ``SLURM_STEP_NODELIST`` (else ``SLURM_JOB_NODELIST``,
    ``SLURM_NODELIST``) in Slurm's compressed syntax, e.g. ``node[01-04,07],gpu-a[1-2]``;
    one host when ``SLURM_STEP_NUM_NODES`` is 1. Job id: ``SLURM_JOB_ID`` (``SLURM_JOBID``)
    and ``SLURM_STEP_ID``. Skipped when ``PMI_RANK``, ``PMIX_RANK`` or ``PMI_SIZE`` disagree:
    those are then another launcher's ranks that inherited an outer step's variables
    (``mpiexec.hydra`` starts its proxies through srun).
MPICH / Hydra / Intel MPI (PMI), recognised by ``PMI_RANK`` (or ``PMI_ID``) and ``PMI_SIZE``:
    ``RANK`` and ``WORLD_SIZE`` from those, ``LOCAL_RANK`` <- ``MPI_LOCALRANKID``,
    ``LOCAL_WORLD_SIZE`` <- ``MPI_LOCALNRANKS``. Job id: ``PMI_JOBID``, ``PMIX_NAMESPACE``, else
    the batch system's (``SLURM_JOB_ID`` + ``SLURM_STEP_ID``, ``PBS_JOBID``, ``LSB_JOBID``,
    ``FLUX_JOB_ID``, ``COBALT_JOBID``).
PMIx alone, recognised by ``PMIX_RANK``:
    ``RANK`` <- ``PMIX_RANK``. PMIx keeps the size in its server, not in the environment, so
    ``WORLD_SIZE`` has to be set by hand (``PMI_SIZE`` and ``MPI_LOCAL*`` are used if set).
    Job id: ``PMIX_NAMESPACE``.

``MASTER_ADDR`` is ``127.0.0.1`` when the job runs on one host (local size == world size;
for Slurm, a step on one node), and on several hosts under Slurm the first host of the
step's node list. Open MPI, Hydra and PMIx do not say where rank 0 runs, so a job of theirs
on several hosts must set ``MASTER_ADDR`` (``mpirun -x MASTER_ADDR=<rank 0's host>``,
``mpiexec -genv MASTER_ADDR <host>``). Without it, ``init_process_group`` of a commux group
with ``env://`` (or of any group after an explicit :func:`apply`) raises a
:class:`LauncherError` (a ``ValueError``, like torch's own) saying what to set, in place of
torch's "environment variable MASTER_ADDR expected, but not set".

``MASTER_PORT`` comes from the job id, so that all ranks agree without talking and
concurrent jobs take different ports: ``20000 + (id * 17 + step) % 12000`` for a numeric id
(Slurm jobs with nearby ids never share a port), ``20000 + crc32(id) % 12000`` for a textual
one (Open MPI 5's ``PMIX_NAMESPACE``): unprivileged, and below Linux's ephemeral range
(32768-60999) from which UCX and outgoing connections take theirs. Without a job id (Hydra
outside a batch system) it is torch's default, 29500: set ``MASTER_PORT`` to run several
such jobs on one host at once.
"""

from __future__ import annotations

import os
import re
import zlib
from dataclasses import dataclass, field
from typing import Dict, List, Mapping, MutableMapping, Optional, Tuple

from . import _env

__all__ = [
    "Launch",
    "LauncherError",
    "detect",
    "launcher_environment",
    "apply",
    "expand_hostlist",
    "expand_tasks_per_node",
    "port_for_job",
]

PORT_BASE = 20000
PORT_SPAN = 12000  # [20000, 32000): unprivileged, below Linux's ephemeral range (32768-60999)
DEFAULT_PORT = 29500  # torch's own default, when the launcher gives no job id
LOOPBACK = "127.0.0.1"


class LauncherError(ValueError):
    """The launcher's variables do not say enough (or are malformed) for env:// rendezvous.
    A ValueError, as torch's own "environment variable ... expected" error is."""


@dataclass(frozen=True)
class Launch:
    """What :func:`detect` found. ``values``: the variables to set (only those unset in the
    environment). ``error``: why the rest cannot be derived and what to set, with
    ``missing`` the variables it is about; None when nothing is missing."""

    launcher: Optional[str] = None
    values: Dict[str, str] = field(default_factory=dict)
    error: Optional[str] = None
    missing: Tuple[str, ...] = ()


# --------------------------------------------------------------------------------------
# Slurm's compressed lists
# --------------------------------------------------------------------------------------


def _split_top_level(text: str) -> List[str]:
    """Splits at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {text!r}")
        elif c == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth != 0:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _expand_range(spec: str, text: str) -> List[str]:
    out = []
    for piece in spec.split(","):
        piece = piece.strip()
        if not piece:
            continue
        if "-" in piece:
            lo, hi = piece.split("-", 1)
            if not (lo.isdigit() and hi.isdigit()) or int(hi) < int(lo):
                raise ValueError(f"bad range {piece!r} in host list {text!r}")
            width = len(lo)  # Slurm pads to the lower bound's width: [08-10] -> 08 09 10
            out.extend(str(n).zfill(width) for n in range(int(lo), int(hi) + 1))
        else:
            if not piece.isdigit():
                raise ValueError(f"bad index {piece!r} in host list {text!r}")
            out.append(piece)
    return out


def _expand_one(item: str, text: str) -> List[str]:
    open_at = item.find("[")
    if open_at < 0:
        if "]" in item:
            raise ValueError(f"unbalanced ']' in host list {text!r}")
        return [item]
    close_at = item.find("]", open_at)
    if close_at < 0:
        raise ValueError(f"unbalanced '[' in host list {text!r}")
    prefix, spec, rest = item[:open_at], item[open_at + 1:close_at], item[close_at + 1:]
    tails = _expand_one(rest, text) if rest else [""]
    return [prefix + n + t for n in _expand_range(spec, text) for t in tails]


def expand_hostlist(text: str) -> List[str]:
    """Expands Slurm's compressed host list: ``"a[01-02,05],b7"`` -> ``["a01", "a02", "a05",
    "b7"]``; several bracket groups in one name expand as a product (``r[1-2]n[1-2]``)."""
    hosts: List[str] = []
    for item in _split_top_level(text):
        hosts.extend(_expand_one(item, text))
    return hosts


def expand_tasks_per_node(text: str) -> List[int]:
    """Expands Slurm's tasks-per-node list: ``"2(x3),1"`` -> ``[2, 2, 2, 1]``."""
    counts: List[int] = []
    for item in text.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", item)
        if m is None:
            raise ValueError(f"bad tasks-per-node list {text!r}")
        counts.extend([int(m.group(1))] * int(m.group(2) or 1))
    return counts


# --------------------------------------------------------------------------------------
# Ports
# --------------------------------------------------------------------------------------


def port_for_job(job_id: Optional[str], step: Optional[str] = None) -> int:
    """MASTER_PORT for a job: a port in [PORT_BASE, PORT_BASE + PORT_SPAN) from its id (and
    Slurm step), the same in every rank; DEFAULT_PORT when there is no id."""
    if not job_id:
        return DEFAULT_PORT
    step_number = int(step) if step is not None and step.isdigit() else 0
    if job_id.isdigit():
        # Consecutive ids map to ports 17 apart: jobs whose ids differ by less than ~700
        # never share a port while their steps stay below 17.
        return PORT_BASE + (int(job_id) * 17 + step_number) % PORT_SPAN
    key = job_id if step is None else f"{job_id}.{step}"
    return PORT_BASE + zlib.crc32(key.encode()) % PORT_SPAN


# --------------------------------------------------------------------------------------
# Detection
# --------------------------------------------------------------------------------------


def _get(env: Mapping[str, str], *names: str) -> Optional[str]:
    """The first of ``names`` that is set and not empty (stripped)."""
    for name in names:
        value = env.get(name)
        if value is not None and value.strip() != "":
            return value.strip()
    return None


def _int(env: Mapping[str, str], *names: str) -> Optional[int]:
    for name in names:
        value = _get(env, name)
        if value is not None:
            try:
                number = int(value)
            except ValueError:
                raise LauncherError(f"commux: {name}={value!r} is not an integer") from None
            if number < 0:
                raise LauncherError(f"commux: {name}={value!r} is negative")
            return number
    return None


@dataclass
class _Job:
    launcher: str
    rank: int
    size: Optional[int]
    local_rank: Optional[int]
    local_size: Optional[int]
    one_host: Optional[bool]  # None: unknown
    master_addr: Optional[str]  # from the launcher (Slurm), besides the one-host case
    port: int
    hint: str  # how to pass MASTER_ADDR with this launcher


def _one_host(size: Optional[int], local_size: Optional[int]) -> Optional[bool]:
    if size is None or local_size is None:
        return None
    return local_size == size


def _open_mpi(env: Mapping[str, str]) -> Optional[_Job]:
    if _get(env, "OMPI_COMM_WORLD_RANK") is None or _get(env, "OMPI_COMM_WORLD_SIZE") is None:
        return None
    size = _int(env, "OMPI_COMM_WORLD_SIZE")
    local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE")
    one_host = _one_host(size, local_size)
    nodes = _int(env, "OMPI_MCA_orte_num_nodes")
    if one_host is None and nodes is not None:
        one_host = nodes == 1
    job_id = _get(env, "PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid", "OMPI_MCA_orte_ess_jobid")
    return _Job("Open MPI", _int(env, "OMPI_COMM_WORLD_RANK"), size,
                _int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), local_size, one_host, None,
                port_for_job(job_id), "mpirun -x MASTER_ADDR=<rank 0's host> ...")


def _slurm_step(env: Mapping[str, str]) -> Optional[str]:
    """The step id when this process is a task of an srun step (the batch script and salloc's
    shell have no step id, or a reserved one >= 0xfffffff0)."""
    step = _get(env, "SLURM_STEP_ID", "SLURM_STEPID")
    if step is None or not step.isdigit() or int(step) >= 0xFFFFFFF0:
        return None
    return step


def _slurm(env: Mapping[str, str]) -> Optional[_Job]:
    step = _slurm_step(env)
    if step is None or _get(env, "SLURM_PROCID") is None:
        return None
    size_var = next((n for n in ("SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS")
                     if _get(env, n) is not None), None)
    if size_var is None:
        return None
    rank, size = _int(env, "SLURM_PROCID"), _int(env, size_var)
    # Another launcher started inside a Slurm step (mpiexec.hydra bootstraps its proxies
    # through srun) leaves the step's variables to its ranks: believe Slurm only where the
    # PMI variables, if any, tell the same story.
    for rank_var in ("PMI_RANK", "PMIX_RANK"):
        other = _int(env, rank_var)
        if other is not None and other != rank:
            return None
    other_size = _int(env, "PMI_SIZE")
    if other_size is not None and other_size != size:
        return None

    hosts: List[str] = []
    nodelist = _get(env, "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST")
    if nodelist is not None:
        try:
            hosts = expand_hostlist(nodelist)
        except ValueError as error:
            raise LauncherError(f"commux: {error}") from None
    local_size = None
    per_node_text = _get(env, "SLURM_STEP_TASKS_PER_NODE")
    if per_node_text is not None:
        try:
            per_node = expand_tasks_per_node(per_node_text)
        except ValueError as error:
            raise LauncherError(f"commux: {error}") from None
        if len(set(per_node)) == 1:
            local_size = per_node[0]
        else:
            node = None
            name = _get(env, "SLURMD_NODENAME")
            if name is not None and name in hosts:
                node = hosts.index(name)
            elif _int(env, "SLURM_NODEID") is not None:
                node = _int(env, "SLURM_NODEID")
            if node is not None and node < len(per_node):
                local_size = per_node[node]
    if local_size is None:
        local_size = _int(env, "SLURM_NTASKS_PER_NODE")
    nnodes = _int(env, "SLURM_STEP_NUM_NODES")
    if nnodes is not None:
        one_host: Optional[bool] = nnodes == 1
    elif _get(env, "SLURM_STEP_NODELIST") is not None:
        one_host = len(hosts) == 1
    else:
        one_host = _one_host(size, local_size)
    if local_size is None and one_host:
        local_size = size
    return _Job("Slurm", rank, size, _int(env, "SLURM_LOCALID"), local_size, one_host,
                hosts[0] if hosts else None,
                port_for_job(_get(env, "SLURM_JOB_ID", "SLURM_JOBID"), step),
                "export MASTER_ADDR=<rank 0's host> before srun")


def _batch_job_id(env: Mapping[str, str]) -> Optional[str]:
    slurm = _get(env, "SLURM_JOB_ID", "SLURM_JOBID")
    if slurm is not None:
        step = _get(env, "SLURM_STEP_ID", "SLURM_STEPID")
        return slurm if step is None else f"{slurm}.{step}"
    return _get(env, "PBS_JOBID", "LSB_JOBID", "FLUX_JOB_ID", "COBALT_JOBID")


def _hydra(env: Mapping[str, str]) -> Optional[_Job]:
    rank_var = "PMI_RANK" if _get(env, "PMI_RANK") is not None else "PMI_ID"
    if _get(env, rank_var) is None or _get(env, "PMI_SIZE") is None:
        return None
    size = _int(env, "PMI_SIZE")
    local_size = _int(env, "MPI_LOCALNRANKS")
    return _Job("MPICH/Hydra (PMI)", _int(env, rank_var), size, _int(env, "MPI_LOCALRANKID"),
                local_size, _one_host(size, local_size), None,
                port_for_job(_get(env, "PMI_JOBID", "PMIX_NAMESPACE") or _batch_job_id(env)),
                "mpiexec -genv MASTER_ADDR <rank 0's host> ...")


def _pmix(env: Mapping[str, str]) -> Optional[_Job]:
    # PMIx keeps the job's size and layout in its server, not in the environment: from the
    # environment alone only the rank is known (PMI_SIZE and MPI_LOCAL* when set too).
    if _get(env, "PMIX_RANK") is None:
        return None
    size = _int(env, "PMI_SIZE")
    local_size = _int(env, "MPI_LOCALNRANKS")
    return _Job("PMIx", _int(env, "PMIX_RANK"), size, _int(env, "MPI_LOCALRANKID"),
                local_size, _one_host(size, local_size), None,
                port_for_job(_get(env, "PMIX_NAMESPACE") or _batch_job_id(env)),
                "pass MASTER_ADDR=<rank 0's host> to every rank")


_DETECTORS = (_open_mpi, _slurm, _hydra, _pmix)


def _disabled(env: Mapping[str, str]) -> bool:
    return not _env.boolean(env, "COMMUX_LAUNCHER", True, LauncherError)


def _torchrun_present(env: Mapping[str, str]) -> bool:
    """torchrun (TORCHELASTIC_*), or whoever set both RANK and WORLD_SIZE, described the job:
    commux then leaves everything alone rather than mix two descriptions."""
    return ((_get(env, "RANK") is not None and _get(env, "WORLD_SIZE") is not None)
            or any(name.startswith("TORCHELASTIC_") for name in env))


def detect(env: Mapping[str, str]) -> Launch:
    """What the launcher's variables in ``env`` give (pure: reads ``env`` only).

    Returns ``Launch()`` (nothing to do) without a recognised launcher, under torchrun
    (any ``TORCHELASTIC_*``, or both ``RANK`` and ``WORLD_SIZE`` set) or with
    ``COMMUX_LAUNCHER=0``. Raises
    :class:`LauncherError` for a launcher variable that is malformed.
    """
    if _disabled(env) or _torchrun_present(env):
        return Launch()
    job = None
    for detector in _DETECTORS:
        job = detector(env)
        if job is not None:
            break
    if job is None:
        return Launch()

    derived: Dict[str, Optional[str]] = {
        "RANK": str(job.rank),
        "WORLD_SIZE": None if job.size is None else str(job.size),
        "LOCAL_RANK": None if job.local_rank is None else str(job.local_rank),
        "LOCAL_WORLD_SIZE": None if job.local_size is None else str(job.local_size),
        "MASTER_ADDR": LOOPBACK if job.one_host else job.master_addr,
        "MASTER_PORT": str(job.port),
    }
    if job.size is not None and job.rank >= job.size:
        raise LauncherError(f"commux: {job.launcher} gives rank {job.rank} of a job of {job.size}")
    values = {name: value for name, value in derived.items()
              if value is not None and _get(env, name) is None}

    missing = tuple(name for name in ("WORLD_SIZE", "MASTER_ADDR")
                    if derived[name] is None and _get(env, name) is None)
    error = None
    if missing:
        reasons = []
        if "WORLD_SIZE" in missing:
            reasons.append(f"{job.launcher} gives this process's rank ({job.rank}) but not the "
                           "number of processes: set WORLD_SIZE")
        if "MASTER_ADDR" in missing:
            where = ("runs on several hosts" if job.one_host is False else
                     "may run on several hosts (its variables do not say)")
            reasons.append(
                f"the job {where}, and nothing in the environment says which host rank 0 "
                f"runs on: set MASTER_ADDR to rank 0's host, an address every rank can reach "
                f"({job.hint}), or launch with srun, whose node list names it")
        port = (f"MASTER_PORT={_get(env, 'MASTER_PORT')}, as set" if _get(env, "MASTER_PORT")
                else f"MASTER_PORT={job.port}, from the job id")
        error = f"commux: launched by {job.launcher}; " + "; ".join(reasons) + f" ({port})."
    return Launch(job.launcher, values, error, missing)


def launcher_environment(env: Mapping[str, str]) -> Dict[str, str]:
    """The variables to add to ``env`` for env:// rendezvous (pure). Raises
    :class:`LauncherError` when the launcher leaves something needed undetermined."""
    launch = detect(env)
    if launch.error is not None:
        raise LauncherError(launch.error)
    return dict(launch.values)


# --------------------------------------------------------------------------------------
# Applying it
# --------------------------------------------------------------------------------------

_pending: Optional[Launch] = None

#: Backend names that are commux's (commux.BACKEND_NAMES; repeated here so that this module
#: imports nothing of commux's).
_COMMUX_BACKENDS = ("ucx", "commux")


def apply(environ: Optional[MutableMapping[str, str]] = None, *, install_check: bool = True) -> Launch:
    """Sets the variables :func:`detect` derives in ``environ`` (default ``os.environ``), only
    those unset, and returns what it found. The explicit way to have them before
    ``init_process_group`` (``LOCAL_RANK`` to choose a device); commux itself calls it only in
    the ``env://`` rendezvous of a commux group (see the module's docstring), never at import.

    Never raises for what the launcher leaves out: when something needed stays undetermined
    (several hosts and no MASTER_ADDR), ``install_check`` makes torch's env:// rendezvous raise
    :class:`LauncherError` saying what to set, if the variable is still missing then (for any
    backend: the program asked for the launcher's variables). A malformed launcher variable
    raises :class:`LauncherError`."""
    global _pending
    if environ is None:
        environ = os.environ
    launch = detect(environ)
    for name, value in launch.values.items():
        environ[name] = value
    if launch.error is not None and install_check:
        _pending = launch
        _install_rendezvous_hook()
    return launch


def _names_commux(backend: object) -> bool:
    """Whether the backend string that ``init_process_group`` got (``"ucx"``, ``"commux"``,
    a device map such as ``"cpu:gloo,cuda:ucx"``) asks for a commux backend. ``"undefined"``
    (no backend given) means torch's per-device defaults."""
    text = str(backend).strip().lower()
    if text == "undefined":
        try:
            from torch.distributed import Backend

            names = [str(n).lower() for n in Backend.default_device_backend_map.values()]
        except Exception:  # noqa: BLE001 - a torch without the map
            return False
    else:
        names = [part.rsplit(":", 1)[-1].strip() for part in text.split(",")]
    return any(name in _COMMUX_BACKENDS for name in names)


#: How far up the stack the rendezvous wrapper looks for torch's init_process_group (its
#: generator runs in init_process_group's next(); a few frames leave room for wrappers).
_STACK_DEPTH = 8


def _backend_being_initialised() -> Optional[object]:
    """The backend of the ``init_process_group`` call running the current rendezvous, None
    when the rendezvous was not started by one (torch.distributed.rpc, a user's own call)."""
    import sys

    frame = sys._getframe(1)
    for _ in range(_STACK_DEPTH):
        if frame is None:
            break
        if (frame.f_code.co_name == "init_process_group"
                and frame.f_globals.get("__name__") == "torch.distributed.distributed_c10d"):
            return frame.f_locals.get("backend")
        frame = frame.f_back
    return None


def _apply_for_commux() -> Optional[Launch]:
    """The launcher's variables, set for a commux group's rendezvous. A malformed launcher
    variable warns (torch then says what is missing) instead of failing a rendezvous that
    explicit settings or the init_method's query may still satisfy."""
    import warnings

    try:
        return apply(os.environ, install_check=False)
    except LauncherError as error:
        warnings.warn(
            f"commux: the launcher's variables were not used ({error}); set RANK, WORLD_SIZE, "
            "MASTER_ADDR and MASTER_PORT yourself (or COMMUX_LAUNCHER=0 to skip this)",
            RuntimeWarning,
            stacklevel=4,
        )
        return None


def _install_rendezvous_hook() -> None:
    """Wraps torch's ``env://`` rendezvous handler (once; ``commux.register()`` calls it).
    The wrapper changes nothing for other backends; for a commux group it first fills the
    launcher's variables (:func:`apply`), and it turns torch's "environment variable X
    expected" into a :class:`LauncherError` saying what to set when the launcher leaves X
    out. Touches nothing in ``os.environ`` itself."""
    import sys

    import torch.distributed  # noqa: F401  (loads torch.distributed.rendezvous)

    rendezvous = sys.modules["torch.distributed.rendezvous"]
    handlers = rendezvous._rendezvous_handlers
    original = handlers.get("env")
    if original is None or getattr(original, "_commux_launcher_check", False):
        return

    def env_rendezvous_handler(url, *args, **kwargs):
        # A generator like torch's: this runs at init_process_group's next(), in its frame.
        launch = None
        if _names_commux(_backend_being_initialised()):
            launch = _apply_for_commux()
        if launch is None or launch.error is None:
            launch = _pending
        inner = original(url, *args, **kwargs)
        try:
            first = next(inner)
        except ValueError as error:  # torch: "environment variable X expected, but not set"
            if (launch is not None and launch.error is not None
                    and any(name in str(error) for name in launch.missing)):
                raise LauncherError(launch.error) from error
            raise
        yield first
        yield from inner

    env_rendezvous_handler._commux_launcher_check = True  # type: ignore[attr-defined]
    handlers["env"] = env_rendezvous_handler


def describe(launch: Launch) -> str:
    """One line for logs: the launcher and what was set."""
    if launch.launcher is None:
        return "commux: no launcher variables used"
    shown = ", ".join(f"{k}={v}" for k, v in launch.values.items()) or "nothing (all set already)"
    return f"commux: {launch.launcher}: fills {shown}" + (f"; {launch.error}" if launch.error else "")


if __name__ == "__main__":  # `mpirun -np 2 python3 -m commux.launcher`: what would be set
    try:
        print(describe(detect(os.environ)))
    except LauncherError as error:
        print(error)
