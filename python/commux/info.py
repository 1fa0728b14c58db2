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
        "UCX chosen by": (f"COMMUX_UCX_HOME={os.environ['COMMUX_UCX_HOME']}"
                          if os.environ.get("COMMUX_UCX_HOME") else "the build (its UCX wheel or system UCX)"),
        "CUDA support compiled": "yes" if _C.cuda_compiled() else "no",
        "CUDA devices visible": _C.cuda_device_count(),
        "UCX transports": ", ".join(_C.transports()) or "none found",
        "UCX job hints": _hints(_C),
        "configuration": ", ".join(f"{k}={v}" for k, v in commux.config().items()),
    }


def _hints(_C) -> str:
    """What ucp_init is told about the job (from WORLD_SIZE and LOCAL_WORLD_SIZE here; a
    process group without WORLD_SIZE passes its own size as the endpoint estimate)."""
    hints = _C.ucx_context_hints()
    return ", ".join(f"{k}={'not passed' if v is None else v}" for k, v in hints.items())


RDMA_TRANSPORTS = ("rc", "ud", "dc", "rc_verbs", "rc_mlx5", "ud_verbs", "ud_mlx5", "dc_mlx5")


def rdma_warning(transports) -> str | None:
    """A warning when this host has RDMA devices but the loaded UCX cannot use them (the
    PyPI UCX wheel has no verbs transport: traffic between hosts would go over TCP)."""
    try:
        devices = sorted(os.listdir("/sys/class/infiniband"))
    except OSError:
        return None
    if not devices:
        return None
    if any(t.split("/")[0] in RDMA_TRANSPORTS for t in transports):
        return None
    return (f"this host has RDMA devices ({', '.join(devices)}) but the loaded UCX has no RDMA "
            "transport; set COMMUX_UCX_HOME to the site's UCX (built with verbs) to use them")


def settings_table() -> str:
    """docs/settings.md's table of COMMUX_* settings, from the table commux reads them by."""
    import commux

    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for name, default, meaning, _ in commux.load_extension().settings_table():
        rows.append(f"| `{name}` | {default} | {meaning} |")
    return "\n".join(rows) + "\n"


def cmake_prefix() -> str:
    """The prefix to give CMake (CMAKE_PREFIX_PATH) for ``find_package(commux)``."""
    return os.path.dirname(os.path.abspath(__file__))


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python3 -m commux.info", description=__doc__)
    parser.add_argument("--cmake-prefix", action="store_true",
                        help="print the prefix for CMAKE_PREFIX_PATH (find_package(commux)) and exit")
    parser.add_argument("--settings-table", action="store_true",
                        help="print the table of COMMUX_* settings (markdown, as in docs/settings.md) and exit")
    args = parser.parse_args(argv)
    if args.cmake_prefix:
        print(cmake_prefix())
        return 0
    if args.settings_table:
        print(settings_table(), end="")
        return 0
    width = 26
    for key, value in collect().items():
        print(f"{key + ':':<{width}} {value}")
    import commux

    warning = rdma_warning(commux.load_extension().transports())
    if warning:
        print(f"WARNING: {warning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
