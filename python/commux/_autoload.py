"""Entry point in the ``torch.backends`` group: torch calls ``autoload()`` while ``import
torch`` runs. It only registers the backend's factory (no UCX is loaded), and a failure
here warns instead of breaking ``import torch``."""

import warnings


def autoload() -> None:
    try:
        import torch.distributed as dist

        if not dist.is_available():
            return
        from . import register

        register()
    except Exception as error:  # noqa: BLE001 - must never break `import torch`
        warnings.warn(
            f"commux: the 'ucx' backend could not be registered automatically ({error!r}); "
            "`import commux; commux.register()` shows the full error",
            RuntimeWarning,
            stacklevel=2,
        )
