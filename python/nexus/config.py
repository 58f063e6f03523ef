"""NEXUS_* environment knobs, read in one place (declared in csrc/base/env.cpp)."""

from __future__ import annotations

from . import _C

#: (name, default, description) for every knob; `nexus info` prints them.
KNOBS: list[tuple[str, str, str]] = [tuple(k) for k in _C.knobs()]
