"""Nexus dtypes: nx.float32, nx.float64, nx.float16, nx.bfloat16, nx.int32, nx.int64, nx.bool."""

from __future__ import annotations

import numpy as np

from . import _C

__all__ = ["dtype", "float32", "float64", "float16", "bfloat16", "int32", "int64", "bool_", "as_dtype"]


class dtype:
    """An element type. Compares equal to itself and to its name (``nx.float32 == "float32"``).

    ``code`` is the native ``nexus._C.DType`` the core takes (``nx.float32.code``).
    """

    __slots__ = ("name", "itemsize", "is_floating_point", "code")

    def __init__(self, name: str, itemsize: int, is_floating_point: bool, code: _C.DType):
        self.name = name
        self.itemsize = itemsize
        self.is_floating_point = is_floating_point
        self.code = code

    def __repr__(self) -> str:
        return f"nexus.{self.name}"

    def __str__(self) -> str:
        return self.name

    def __eq__(self, other) -> bool:
        if isinstance(other, dtype):
            return self is other
        if isinstance(other, str):
            return other == self.name
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.name)

    def __reduce__(self):
        return (as_dtype, (self.name,))


float32 = dtype("float32", 4, True, _C.DType.float32)
float64 = dtype("float64", 8, True, _C.DType.float64)
float16 = dtype("float16", 2, True, _C.DType.float16)
bfloat16 = dtype("bfloat16", 2, True, _C.DType.bfloat16)
int32 = dtype("int32", 4, False, _C.DType.int32)
int64 = dtype("int64", 8, False, _C.DType.int64)
bool_ = dtype("bool", 1, False, _C.DType.bool)

_ALL = (float32, float64, float16, bfloat16, int32, int64, bool_)
_BY_NAME = {d.name: d for d in _ALL}
_BY_CODE = {d.code: d for d in _ALL}
_ALIASES = {"float": float32, "double": float64, "half": float16, "int": int64, "long": int64}


def as_dtype(value) -> dtype:
    """A nexus dtype from a dtype, its name, a numpy dtype/type or a Python type."""
    if isinstance(value, dtype):
        return value
    if isinstance(value, _C.DType):
        return _BY_CODE[value]
    if value is float:
        return float32
    if value is int:
        return int64
    if value is bool:
        return bool_
    if isinstance(value, str) and value in _ALIASES:
        return _ALIASES[value]
    try:
        name = np.dtype(value).name if not isinstance(value, str) or value not in _BY_NAME else value
    except TypeError:
        name = None
    if name in _BY_NAME:
        return _BY_NAME[name]
    valid = ", ".join(_BY_NAME)
    raise TypeError(f"unsupported dtype {value!r}; valid dtypes: {valid}")


def from_code(code: _C.DType) -> dtype:
    return _BY_CODE[code]
