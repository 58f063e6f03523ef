"""Guards for ``nx.jit``: the Python values a traced function reads besides its arguments.

A trace bakes in every Python value the function read while it ran: a global ``k`` in ``t * k``,
a closure's list of scales, a helper function. A trace is reused only while those values are
what they were, as ``torch.compile`` guards on them. ``scan(fn)`` walks what ``fn`` can reach
without running it (its closure cells, the globals its code names, its defaults, the helpers it
calls, their closures and globals, the items of lists/tuples/dicts and the attributes of plain
objects found there) and returns

- a key: scalars by value, tensors by dtype and shape, numpy arrays by content, everything else
  (modules, classes, opaque objects) by identity; equal keys mean the trace still holds;
- the tensors it reached, in walk order: a trace binds them as inputs, so a rebound or updated
  global tensor is read afresh on every call (as torch.compile lifts them to graph inputs).

What the walk does not reach (module attributes such as ``mymod.k``, objects nested deeper than
``_DEPTH``, containers longer than ``_ITEMS``) is guarded by the identity of its container only.
A tensor reached only that way is not found here: the tracer raises TraceError when one enters
the trace, naming the line, instead of freezing it.
"""

from __future__ import annotations

import enum
import functools
import hashlib
import numbers
import types

import numpy as np

from . import _C

Tensor = _C.Tensor

_DEPTH = 4     # how deep containers and objects are walked
_ITEMS = 256   # longer containers are guarded by identity
_OWN = "nexus"  # the package's own functions are fixed code: not walked
SCALARS = (numbers.Number, str, bytes, type(None), enum.Enum, np.generic)
_OPAQUE = (types.ModuleType, type, types.BuiltinFunctionType, types.BuiltinMethodType)
_PLAIN = {int, bool, str, type(None)}  # keyed by value as they are (floats need their bits)
_BY_IDENTITY = set(_OPAQUE)  # exact types: a set lookup before the isinstance chain


class Scan:
    """What one walk found: ``key`` (hashable), ``tensors`` and the objects guarded by identity
    (``keep`` holds them so that their ids are not reused while a trace depends on them)."""

    __slots__ = ("keep", "key", "tensors")

    def __init__(self):
        self.key: list = []
        self.tensors: list = []
        self.keep: list = []


def scan(fn, shape_key) -> Scan:
    """Walks what ``fn`` reads besides its arguments; ``shape_key(t)`` describes a tensor.

    Example: ``scan(lambda t: t * k, key).key`` holds the current value of the global ``k``.
    """
    s = Scan()
    _function(fn, s, shape_key, set(), 0)
    s.key = tuple(s.key)
    return s


def _function(fn, s: Scan, shape_key, seen: set, depth: int) -> None:
    if id(fn) in seen:
        s.key.append(("seen", id(fn)))
        return
    seen.add(id(fn))
    if isinstance(fn, functools.partial):
        _value(fn.func, s, shape_key, seen, depth)
        _value(fn.args, s, shape_key, seen, depth)
        _value(fn.keywords, s, shape_key, seen, depth)
        return
    if isinstance(fn, types.MethodType):
        _value(fn.__func__, s, shape_key, seen, depth)
        _value(fn.__self__, s, shape_key, seen, depth)
        return
    code = getattr(fn, "__code__", None)
    if code is None:  # a callable object: its class's __call__ and its attributes
        call = type(fn).__dict__.get("__call__")
        if isinstance(call, types.FunctionType):
            _function(call, s, shape_key, seen, depth)
        _object(fn, s, shape_key, seen, depth)
        return
    s.key.append(("fn", id(fn), id(code)))
    s.keep.append(fn)
    globs = getattr(fn, "__globals__", {})
    for name in _names(code):
        if name in globs:
            s.key.append(name)
            _value(globs[name], s, shape_key, seen, depth)
    for cell in fn.__closure__ or ():
        try:
            v = cell.cell_contents
        except ValueError:  # an empty cell (a name assigned later)
            s.key.append(("cell", "empty"))
            continue
        _value(v, s, shape_key, seen, depth)
    _value(fn.__defaults__, s, shape_key, seen, depth)
    _value(fn.__kwdefaults__, s, shape_key, seen, depth)


def scalar_key(v) -> tuple:
    """A guard for a scalar value (equal keys: the same value, type and bits)."""
    # Floats by their bits: a NaN equals itself here, and 0.0 and -0.0 are two guards.
    if isinstance(v, float):
        return ("float", v.hex())
    if isinstance(v, np.generic):
        return ("np", v.dtype.str, v.tobytes())
    return (type(v).__name__, v)


@functools.lru_cache(maxsize=4096)
def _names(code: types.CodeType) -> tuple[str, ...]:
    """Global (and attribute) names read by ``code`` and the code objects nested in it, sorted."""
    names = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            names.update(_names(c))
    return tuple(sorted(names))


def _value(v, s: Scan, shape_key, seen: set, depth: int) -> None:
    t = type(v)
    if t in _PLAIN:  # the common cases first, without ABC checks
        s.key.append((t, v))
    elif t in _BY_IDENTITY:
        s.key.append(("id", id(v)))
        s.keep.append(v)
    elif isinstance(v, Tensor):
        s.key.append(("T", shape_key(v)))
        s.tensors.append(v)
    elif isinstance(v, SCALARS):
        s.key.append(scalar_key(v))
    elif isinstance(v, np.ndarray):
        # Traced code that reads an array copies it in (nx.tensor(a)): the content is the guard.
        digest = hashlib.blake2b(np.ascontiguousarray(v).view(np.uint8), digest_size=16).digest()
        s.key.append(("nd", v.dtype.str, v.shape, digest))
    elif isinstance(v, _OPAQUE) or depth >= _DEPTH:
        s.key.append(("id", id(v)))
        s.keep.append(v)
    elif isinstance(v, (types.FunctionType, types.MethodType, functools.partial)):
        if getattr(v, "__module__", None) and v.__module__.split(".")[0] == _OWN:
            s.key.append(("id", id(v)))
            s.keep.append(v)
        else:
            _function(v, s, shape_key, seen, depth + 1)
    elif isinstance(v, (list, tuple, dict)) and len(v) <= _ITEMS:
        items = v.items() if isinstance(v, dict) else enumerate(v)
        s.key.append((type(v).__name__, len(v)))
        for k, item in items:
            if isinstance(v, dict):
                s.key.append(("k", k if isinstance(k, SCALARS) else id(k)))
            _value(item, s, shape_key, seen, depth + 1)
    elif callable(v) and not hasattr(v, "__dict__"):
        s.key.append(("id", id(v)))
        s.keep.append(v)
    else:
        _object(v, s, shape_key, seen, depth)


def _object(v, s: Scan, shape_key, seen: set, depth: int) -> None:
    """An instance: its identity, and its attributes where it has a plain ``__dict__``."""
    s.key.append(("id", id(v)))
    s.keep.append(v)
    if id(v) in seen:
        return
    seen.add(id(v))
    attrs = getattr(v, "__dict__", None)
    if isinstance(attrs, dict) and len(attrs) <= _ITEMS:
        for name in sorted(attrs):
            s.key.append(("a", name))
            _value(attrs[name], s, shape_key, seen, depth + 1)
