"""Argument checks for ``GraphBuilder`` layers.

Each check runs where the argument is given (never later, at compile time or inside C++), and its
error names the layer, the argument, the value and what would be valid:

    layer 'dense_2' (dense): units must be an integer >= 1, got -3

A wrong type raises TypeError, a value out of range ValueError.
"""

from __future__ import annotations

import math
import numbers


def _is_int(v) -> bool:
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def integer(where: str, arg: str, v, low: int = 1) -> int:
    """``v`` as an int >= ``low``."""
    if not _is_int(v):
        raise TypeError(f"{where}: {arg} must be an integer >= {low}, got {v!r} ({type(v).__name__})")
    if v < low:
        raise ValueError(f"{where}: {arg} must be an integer >= {low}, got {v!r}")
    return int(v)


def boolean(where: str, arg: str, v) -> bool:
    """``v`` as a bool (True or False, not a number or a string)."""
    if not isinstance(v, bool):
        raise TypeError(f"{where}: {arg} must be True or False, got {v!r} ({type(v).__name__})")
    return v


def pair(where: str, arg: str, v, low: int = 1) -> list[int]:
    """An int or a pair of ints, each >= ``low``, as ``[h, w]``."""
    if _is_int(v):
        return [integer(where, arg, v, low)] * 2
    if not isinstance(v, (tuple, list)) or len(v) != 2 or not all(_is_int(d) for d in v):
        raise TypeError(f"{where}: {arg} must be an integer >= {low} or a pair of them, got {v!r}")
    return [integer(where, arg, d, low) for d in v]


def number(where: str, arg: str, v, low: float, high: float = math.inf, *, low_open: bool = False,
           high_open: bool = False) -> float:
    """``v`` as a finite float in the interval ``low..high`` (each end open or closed)."""
    interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open or high == math.inf else ']'}"
    if not isinstance(v, numbers.Real) or isinstance(v, bool):
        raise TypeError(f"{where}: {arg} must be a number in {interval}, got {v!r} ({type(v).__name__})")
    f = float(v)
    if not math.isfinite(f) or f < low or f > high or (low_open and f == low) or (high_open and f == high):
        raise ValueError(f"{where}: {arg} must be a number in {interval}, got {v!r}")
    return f


def feature_axis(where: str, v, rank: int) -> int:
    """An axis of a ``rank``-dimensional value other than the batch's (0); negative from the end."""
    if not _is_int(v):
        raise TypeError(f"{where}: axis must be an integer, got {v!r} ({type(v).__name__})")
    if not (1 <= v < rank or -rank < v <= -1):
        raise ValueError(f"{where}: axis {v} is out of range for inputs of {rank} dimensions; "
                         f"valid: 1..{rank - 1} or -{rank - 1}..-1 (axis 0 is the batch)")
    return int(v)


def padding(where: str, v):
    """'valid', 'same', or a non-negative int or pair."""
    if isinstance(v, str):
        if v in ("valid", "same"):
            return v
        error = ValueError
    else:
        try:
            return pair(where, "padding", v, low=0)
        except (TypeError, ValueError) as err:
            error = type(err)
    raise error(f"{where}: padding must be 'valid', 'same', an integer >= 0 or a pair of them, "
                f"got {v!r}")


def name(layer: str, v, taken) -> str | None:
    """A layer's name: None (a generated one) or a non-empty string no other layer has."""
    if v is None:
        return None
    if not isinstance(v, str) or not v:
        raise TypeError(f"{layer}: name must be a non-empty string or None, got {v!r}")
    if v in taken:
        raise ValueError(f"{layer}: name {v!r} is already taken by another layer; names must be "
                         "unique (they name the layer's parameters)")
    return v
