"""NEXUS_* environment knobs: declared and parsed once, in csrc/base/env.cpp; this module reads them
through that parser, so Python and C++ accept and refuse the same values. The environment is read
on every call.

    >>> from nexus import config
    >>> config.value("NEXUS_JIT")          # NEXUS_JIT=off -> False
    True
"""

from __future__ import annotations

import os

from . import _C

#: (name, default, description) for every knob; `nexus info` prints them.
KNOBS: list[tuple[str, str, str]] = [tuple(k) for k in _C.knobs()]


def value(name: str) -> bool | int | float | str | None:
    """The knob ``name`` parsed: a bool, an int (None when its default is computed, as for
    NEXUS_NUM_THREADS), seconds as a float, or text.

    Raises:
        ValueError: the variable is set to something the knob does not accept (the message names
            the knob, the value and what is valid), or ``name`` is not a knob.
    """
    return _C.knob_value(name)


def text(name: str) -> tuple[str, bool]:
    """(the knob's text, whether it was set in the environment); empty counts as unset."""
    if name not in names():
        value(name)  # raises the ValueError that lists the knobs
    default = next(d for n, d, _ in KNOBS if n == name)
    set_to = os.environ.get(name, "")
    return (set_to, True) if set_to else (default, False)


def names() -> list[str]:
    """Every knob's name, in declaration order."""
    return [n for n, _, _ in KNOBS]


def check() -> dict[str, bool | int | float | str | None]:
    """Every knob parsed ({name: value}); raises the first knob's ValueError when one is bad."""
    return {n: value(n) for n in names()}


def comm_timeout() -> float:
    """NEXUS_COMM_TIMEOUT in seconds (> 0): how long nexus.distributed waits for a peer."""
    return value("NEXUS_COMM_TIMEOUT")
