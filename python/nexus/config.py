"""NEXUS_* environment knobs, read in one place (declared in csrc/base/env.cpp)."""

from __future__ import annotations

import os

from . import _C

#: (name, default, description) for every knob; `nexus info` prints them.
KNOBS: list[tuple[str, str, str]] = [tuple(k) for k in _C.knobs()]


def _knob(name: str) -> str:
    default = next(d for n, d, _ in KNOBS if n == name)
    return os.environ.get(name) or default


def comm_timeout() -> float:
    """NEXUS_COMM_TIMEOUT in seconds (> 0): how long nexus.distributed waits for a peer."""
    text = _knob("NEXUS_COMM_TIMEOUT")
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise ValueError(f"NEXUS_COMM_TIMEOUT={text!r}: expected a number of seconds > 0 (e.g. 60)")
    return value
