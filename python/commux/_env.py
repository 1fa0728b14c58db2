"""Reading the Python package's own COMMUX_* switches (the C++ core reads the others)."""

from __future__ import annotations

from typing import Mapping


def boolean(env: Mapping[str, str], name: str, default: bool, error=ValueError) -> bool:
    """`name` in `env` as a boolean; unset or empty is `default`; anything else raises
    `error` naming the variable and the words it takes."""
    raw = env.get(name) or ""
    value = raw.strip().lower()
    if value == "":
        return default
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise error(f"{name}={raw!r} is not a boolean (use 1, true, on or yes; 0, false, off or no)")
