#!/usr/bin/env python3
"""Fails if a file declared torch-free includes torch, c10, ATen, pybind11 or Python, directly
or through any commux header it includes. The files not yet built in the torch-free core
library (commux_logic) are listed here, so that one that lost its torch stays without it
while the rest of the engine moves over (docs/history/core-migration.md).

Usage: scripts/check_core_includes.py [--report]   (--report lists every file under src/engine
and src/shm with the torch include it reaches, if any)."""
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "src"
FORBIDDEN = re.compile(r'#\s*include\s*[<"](ATen/|c10/|torch/|pybind11/|Python\.h)')
PROJECT = re.compile(r'#\s*include\s*"([^"]+)"')

# Torch-free today, outside commux_logic (which the core-only build already proves).
TORCH_FREE = """
engine/errors.hpp
engine/endpoint_cache.hpp engine/endpoint_cache.cpp
engine/route.hpp engine/done_flag.hpp engine/settings.hpp
shm/cma.hpp shm/cma.cpp shm/lane.hpp shm/steps.hpp shm/steps_layout.hpp shm/algorithms.hpp
shm/channel.hpp
config/process_engine.hpp group/peer_table.hpp group/peer_table.cpp group/shm_setup.hpp
group/shm_setup.cpp group/death_relay.hpp
""".split()


def torch_include(path, seen):
    """The first forbidden include reachable from path, as 'file: line', or None."""
    if path in seen:
        return None
    seen.add(path)
    for line in path.read_text().splitlines():
        if FORBIDDEN.search(line):
            return f"{path.relative_to(ROOT)}: {line.strip()}"
        match = PROJECT.search(line)
        if match:
            for base in (SRC, path.parent):
                included = base / match.group(1)
                if included.exists():
                    found = torch_include(included, seen)
                    if found:
                        return found
                    break
    return None


def main():
    if "--report" in sys.argv:
        for path in sorted([*SRC.glob("engine/*"), *SRC.glob("shm/*"), *SRC.glob("c10d/*")]):
            found = torch_include(path, set())
            print(f"{'torch ' if found else 'free  '} {path.relative_to(SRC)}"
                  + (f"  <- {found}" if found else ""))
        return 0
    failures = []
    for name in TORCH_FREE:
        path = SRC / name
        if not path.exists():
            failures.append(f"{name}: listed as torch-free but missing")
            continue
        found = torch_include(path, set())
        if found:
            failures.append(f"{name} reaches {found}")
    for failure in failures:
        print(f"check_core_includes: {failure}", file=sys.stderr)
    if not failures:
        print(f"check_core_includes: {len(TORCH_FREE)} files outside the core library are torch-free")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
