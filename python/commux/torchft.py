"""commux under torchft (PyPI ``torchft``, optional): a reconfigurable process group that
torchft's Manager, DDP wrapper and collectives use in place of its gloo or NCCL groups.

    from commux.torchft import ProcessGroupUCX
    manager = torchft.Manager(pg=ProcessGroupUCX(), ...)

Every quorum change calls ``configure(store_addr, replica_id, rank, world_size)``, which
aborts the previous group and builds a new commux group over the store torchft hands it.
Unlike torchft's gloo group it runs reduce_scatter and all-to-all, on CPU and CUDA tensors,
and it needs no subprocess to be killed out of a hang: a peer that dies, or destroys or
aborts its group, fails the others' operations at once ("closed by peer"), and an
operation that waits longer than the group's timeout fails with "timed out after".
"""

from __future__ import annotations

from datetime import timedelta

import torch
from torch.distributed import ProcessGroup as BaseProcessGroup
from torch.distributed import Store

from torchft.process_group import ProcessGroupWrapper

from . import _store_is_python, load_extension


class ProcessGroupUCX(ProcessGroupWrapper):
    """torchft's reconfigurable wrapper around a commux (``ucx``) group."""

    def __init__(self, timeout: timedelta = timedelta(seconds=60)) -> None:
        super().__init__(timeout=timeout)

    def _create_pg(self, store: Store, rank: int, world_size: int) -> BaseProcessGroup:
        _C = load_extension()
        pg = BaseProcessGroup(store, rank, world_size)
        backend_type = BaseProcessGroup.BackendType.CUSTOM
        pg._set_default_backend(backend_type)
        backend = _C.ProcessGroupUCX(store, rank, world_size, self._timeout,
                                     not _store_is_python(store))
        # As torchft's gloo group does: configure() returns once every member has made
        # the group, or fails within the timeout naming who never came.
        backend.connect(self._timeout)
        pg._register_backend(torch.device("cpu"), backend_type, backend)
        if torch.cuda.is_available():
            pg._register_backend(torch.device("cuda"), backend_type, backend)
        return pg

    def getBackendName(self) -> str:
        return "torchft-ucx"
