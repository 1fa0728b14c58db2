"""``python3 -m commux.info``: versions, where UCX came from, and what it can use here."""

from __future__ import annotations

import os
import sys


def collect() -> dict:
    import torch

    import commux

    _C = commux.load_extension()
    return {
        "commux": commux.__version__,
        "commux location": os.path.dirname(commux.__file__),
        "torch": torch.__version__,
        "torch CUDA": torch.version.cuda or "none (CPU build)",
        "UCX": _C.ucx_version(),
        "UCX headers built against": _C.ucx_header_version(),
        "UCX loaded from": _C.ucx_library_path(),
        "CUDA support compiled": "yes" if _C.cuda_compiled() else "no",
        "CUDA devices visible": _C.cuda_device_count(),
        "UCX transports": ", ".join(_C.transports()) or "none found",
        "configuration": ", ".join(f"{k}={v}" for k, v in _C.config().items()),
    }


def main() -> int:
    width = 26
    for key, value in collect().items():
        print(f"{key + ':':<{width}} {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
