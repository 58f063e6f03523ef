"""Tracing for ``nx.jit``: run a Python function once while recording every native op it calls.

Every op of the Python surface ends in a function of ``nexus._C`` called from one of the
DISPATCHERS modules (``functional.py`` for ``nx.*``, ``tensor.py`` for methods, operators and
indexing). While a trace runs, those modules see ``_C`` through a recorder: each call in
RECORDED runs for real and becomes a graph node on its inputs' values; a call in REFUSED raises
TraceError. The tensor methods that are native (``detach``) are recorded the same way.

Nothing enters a trace unrecorded: a tensor that is neither an argument, nor the output of a
recorded op, nor one of the tensors the guard walk (``_guards.scan``) found in the function's
closure and globals raises TraceError naming the line; so does converting a traced tensor to a
Python value (``.item()``, ``bool(t)``, ``.numpy()``). Reading a shape (``t.shape``, ``len(t)``,
``t.size``) is allowed and makes the trace valid for exactly these shapes.
"""

from __future__ import annotations

import os
import sys
import threading

from . import _C

Tensor = _C.Tensor
_K = _C.OpKind

# The _C functions that are ops, recorded as graph nodes.
RECORDED = frozenset({
    "unary", "binary", "where", "astype", "full", "sum", "mean", "amax", "amin", "matmul",
    "conv2d", "reshape", "permute", "transpose", "expand", "slice", "select", "unsqueeze",
    "index_select", "concat", "stack", "contiguous", "clone", "argmax", "var", "logsumexp",
    "softmax", "log_softmax", "cross_entropy", "max_pool2d", "avg_pool2d", "dropout",
    "layer_norm", "batch_norm", "arange", "rand", "randn", "from_numpy",
})
# The _C functions a trace cannot replay, with the reason (and any name ending in "_": in place).
REFUSED = {
    "copy_": "an in-place write into a tensor",
    "index_copy_": "an in-place write into a tensor (t[i] = v)",
    "from_dlpack_capsule": "a DLPack capsule (it is consumed once; pass the tensor as an argument)",
    "manual_seed": "reseeding the generator (a replayed trace would not reseed)",
}
# The _C functions that are not ops on tensors: they run as usual inside a trace.
# (tests/python/test_jit_guards.py checks that every function of _C is in exactly one of the three.)
NOT_OPS = frozenset({
    "alloc_empty_cache", "alloc_stats", "batch_count", "build_info", "get_num_threads", "set_num_threads", "is_grad_enabled",
    "set_grad_enabled", "knob_value", "knobs", "parse_csv", "parse_idx", "parse_jsonl", "read_csv",
    "read_idx", "read_jsonl", "set_buffer_exports", "write_atomic",
})
# The modules whose ``_C`` calls are the Python surface's ops (tests/python/test_jit_guards.py
# checks that no other module of the package calls a RECORDED function).
DISPATCHERS = ("nexus.functional", "nexus.tensor")
# Conversions of a tensor's values to Python: the value would be frozen into the trace.
# (numpy's np.asarray(t) ends in __array__: the buffer protocol is off while tracing.)
FORBIDDEN = ("numpy", "item", "tolist", "__bool__", "__float__", "__int__", "__index__",
             "__array__", "__dlpack__", "data_ptr", "backward")
# Reading these makes the trace shape-specific.
SHAPE_READS = ("shape", "size", "strides", "__len__", "__iter__")

_REDUCE = {"sum": 0, "mean": 1, "amax": 2, "amin": 3}
_NODE_KIND = {"unary": _K.unary, "binary": _K.binary, "where": _K.where, "astype": _K.cast,
              "matmul": _K.matmul, "conv2d": _K.conv2d}
# Ops whose recorded form depends only on input ranks and dtypes (a trace made of these alone,
# that read no shape, is reused for any shape of the same class).
_SHAPE_FREE = {"unary", "binary", "where", "astype", "sum", "mean", "amax", "amin", "matmul"}
_shape_of = Tensor.shape.fget  # the tracer's own reads do not count as the function's
_ndim_of = Tensor.ndim.fget
_detach = Tensor.detach
_PACKAGE = os.path.dirname(os.path.abspath(__file__))
_lock = threading.RLock()
_active = threading.local()


class TraceError(TypeError):
    """Something inside an ``nx.jit`` function cannot be traced (the message names the line)."""


def tracing() -> bool:
    """True in the thread that is tracing a function right now."""
    return getattr(_active, "tracer", None) is not None


def user_location() -> str:
    """``file:line`` of the innermost frame outside the nexus package (the user's code)."""
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame = frame.f_back
    if frame is None:
        return "<unknown>"
    return f"{frame.f_code.co_filename}:{frame.f_lineno}"


class Ref(int):
    """A traced value in an op's argument template."""


class Tracer:
    """The graph a trace builds, and where each of its values came from."""

    def __init__(self, captures: list):
        self.thread = threading.get_ident()
        self.graph = _C.Graph()
        self.values: dict[int, int] = {}   # id(tensor) -> value id
        self.keep: list = []               # every tensor seen (keeps the ids unique)
        self.calls: dict[int, tuple] = {}  # value id -> (callable, argument template)
        self.capture_index = {id(t): k for k, t in enumerate(captures)}
        self.captures: dict[int, int] = {}  # value id -> index into the guard walk's tensors
        self.shape_free = True
        self.read_shape = False

    def bind_input(self, name: str, t: Tensor) -> int:
        v = self.graph.add_input(name, list(_shape_of(t)), t._dtype)
        self.values[id(t)] = v
        self.keep.append(t)
        return v

    def value(self, t: Tensor) -> int:
        v = self.values.get(id(t))
        if v is not None:
            return v
        k = self.capture_index.get(id(t))
        if k is None:
            raise TraceError(
                f"nx.jit: at {user_location()}: a tensor entered the trace that is not an argument, "
                "not the result of an op inside the function, and not reachable from the function's "
                "closure or globals (for example an attribute of a module, or a tensor produced by a "
                "call the tracer cannot see); its value would be frozen. Pass it as an argument.")
        v = self.bind_input(f"capture{len(self.captures)}", t)
        self.captures[v] = k
        return v

    def template(self, a):
        if isinstance(a, Tensor):
            return Ref(self.value(a))
        if isinstance(a, (list, tuple)):
            return type(a)(self.template(x) for x in a)
        return a

    def record(self, name: str, fn, args: tuple, out) -> None:
        if not isinstance(out, Tensor):
            return
        tmpl = self.template(args)
        inputs = values_in(tmpl)
        kind, unary, binary, ints, floats, red, keep = _K.opaque, _C.UnaryOp.neg, _C.BinaryOp.add, [], [], 0, False
        if name in _NODE_KIND:
            kind = _NODE_KIND[name]
            if name == "unary":
                unary = args[0]
            elif name == "binary":
                binary = args[0]
        elif name == "full" and list(args[0]) == []:
            kind, floats = _K.const, [float(args[1])]
        elif name in _REDUCE and _ndim_of(args[0]) > 0:
            ndim = _ndim_of(args[0])
            axes = sorted({a % ndim for a in args[1]}) if args[1] else list(range(ndim))
            kind, ints, red, keep = _K.reduce, axes, _REDUCE[name], bool(args[2])
        if name not in _SHAPE_FREE and kind != _K.const:
            self.shape_free = False
        v = self.graph.add_traced(kind, inputs, name, unary, binary, ints, floats, red, keep,
                                  list(_shape_of(out)), out._dtype)
        self.calls[v] = (fn, tmpl)
        self.values[id(out)] = v
        self.keep.append(out)


def values_in(tmpl) -> list[int]:
    """The traced values an argument template reads, in order."""
    if isinstance(tmpl, Ref):
        return [int(tmpl)]
    if isinstance(tmpl, (list, tuple)):
        return [v for x in tmpl for v in values_in(x)]
    return []


def resolve(tmpl, env: dict):
    """The template with each traced value replaced by its tensor in ``env``."""
    if isinstance(tmpl, Ref):
        return env[int(tmpl)]
    if isinstance(tmpl, (list, tuple)):
        return type(tmpl)(resolve(x, env) for x in tmpl)
    return tmpl


class _RecordingC:
    """Stands in for ``nexus._C`` in the DISPATCHERS modules while a function is traced."""

    def __init__(self, tracer: Tracer):
        self._tracer = tracer

    def __getattr__(self, name):
        real = getattr(_C, name)
        tracer = self._tracer
        if threading.get_ident() != tracer.thread:
            return real  # other threads' eager ops run untouched while this one traces
        if name in REFUSED or name.endswith("_"):
            why = REFUSED.get(name, "an in-place write into a tensor")

            def refuse(*args, **kwargs):
                raise TraceError(f"nx.jit: at {user_location()}: {why} ({name}) cannot be traced; "
                                 "move it out of the jit function")
            return refuse
        if name not in RECORDED:
            return real

        def call(*args):
            out = real(*args)
            tracer.record(name, real, args, out)
            return out
        return call


def _forbidden(name, original):
    def fail(self, *args, **kwargs):
        if not _in_trace() and original is not None:
            return original(self, *args, **kwargs)
        raise TraceError(
            f"nx.jit: at {user_location()}: `{name}` on a traced tensor inside a jit function: its "
            "value would be frozen into the trace (Python control flow on tensor values, .item(), "
            ".numpy() and float() cannot be traced). Move it out of the function, or use nx.where "
            "for a data-dependent choice.")
    return fail


def _in_trace() -> bool:
    tracer = getattr(_active, "tracer", None)
    return tracer is not None and tracer.thread == threading.get_ident()


def _shape_read(name, original):
    def read(self, *args):
        if _in_trace():
            _active.tracer.read_shape = True
        return original(self, *args) if callable(original) else original.fget(self)
    return property(read) if isinstance(original, property) else read


def _recorded_detach(self):
    out = _detach(self)
    if _in_trace():
        _active.tracer.record("detach", _detach, (self,), out)
    return out


def run(tracer: Tracer, fn, args: tuple, kwargs: dict):
    """Calls ``fn(*args, **kwargs)`` with every op of this thread recorded into ``tracer``."""
    modules = [sys.modules[m] for m in DISPATCHERS]
    patches = {name: _forbidden(name, getattr(Tensor, name, None)) for name in FORBIDDEN}
    patches.update({name: _shape_read(name, Tensor.__dict__.get(name, getattr(Tensor, name)))
                    for name in SHAPE_READS})
    patches["detach"] = _recorded_detach
    saved = {name: Tensor.__dict__.get(name) for name in patches}
    recorder = _RecordingC(tracer)
    with _lock:
        _active.tracer = tracer
        exports = _C.set_buffer_exports(False)
        for m in modules:
            m._C = recorder
        for name, attr in patches.items():
            setattr(Tensor, name, attr)
        try:
            return fn(*args, **kwargs)
        finally:
            for m in modules:
                m._C = _C
            for name, attr in saved.items():
                if attr is None:
                    delattr(Tensor, name)
                else:
                    setattr(Tensor, name, attr)
            _C.set_buffer_exports(exports)
            _active.tracer = None
