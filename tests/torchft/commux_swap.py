"""pytest plugin: torchft's own tests with commux in place of gloo.

Loaded with ``-p commux_swap`` before pytest imports torchft's test modules, it replaces
``torchft.process_group.ProcessGroupGloo`` (which those modules import by name) with
``commux.torchft.ProcessGroupUCX``. With ``COMMUX_TORCHFT_SWAP=0`` nothing is replaced: the
same run on gloo, for the count beside commux's."""

import os

if os.environ.get("COMMUX_TORCHFT_SWAP", "1") != "0":
    import torchft.process_group

    from commux.torchft import ProcessGroupUCX

    torchft.process_group.ProcessGroupGloo = ProcessGroupUCX
