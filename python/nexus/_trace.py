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
``t.numel()``) is allowed and makes the trace valid for exactly these shapes.
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
    "to_device": "a copy between devices (a trace runs on its inputs' device; move tensors before the call)",
}
# The _C functions that are not ops on tensors: they run as usual inside a trace.
# (tests/python/test_jit_guards.py checks that every function of _C is in exactly one of the three.)
NOT_OPS = frozenset({
    "alloc_empty_cache", "alloc_stats", "attach_gradients", "batch_count", "build_info", "cpu_round_trip_ns",
    "cpu_supports", "cpu_variant", "get_num_threads", "set_num_threads", "is_grad_enabled", "set_grad_enabled",
    "knob_value", "knobs", "parse_csv", "parse_idx", "parse_jsonl", "read_csv", "read_idx", "read_jsonl",
    "set_buffer_exports", "write_atomic",
})
# The modules whose ``_C`` calls are the Python surface's ops. An op reached another way is not
# recorded, and its result, once used, is a tensor the trace cannot place: TraceError, not a
# frozen value.
DISPATCHERS = ("nexus.functional", "nexus.tensor")
# Conversions of a tensor's values to Python: the value would be frozen into the trace.
# (numpy's np.asarray(t) ends in __array__: the buffer protocol is off while tracing.)
FORBIDDEN = ("numpy", "item", "tolist", "__bool__", "__float__", "__int__", "__index__",
             "__array__", "__dlpack__", "data_ptr", "backward")
# Reading these makes the trace shape-specific.
SHAPE_READS = ("shape", "numel", "strides", "__len__", "__iter__")

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


class Tracer:
    """The graph a trace builds, and where each of its inputs comes from."""

    def __init__(self, captures: list):
        self.thread = threading.get_ident()
        self.graph = _C.Graph()
        self.values: dict[int, int] = {}   # id(tensor) -> value id
        self.keep: list = []               # every tensor seen (keeps the ids unique)
        self.capture_index = {id(t): k for k, t in enumerate(captures)}
        # per graph input, in order: ("arg", i), ("capture", k) (the guard walk's k-th tensor) or
        # ("const", tensor) (data made at trace time: nx.tensor([...]) inside the function)
        self.sources: list[tuple] = []
        self.input_values: list[int] = []  # the graph value of each input, in the order of sources
        self.shape_free = True
        self.read_shape = False
        self.label: str | None = None  # names the nodes recorded next (default: the op's name)

    def bind_input(self, name: str, t: Tensor, source: tuple) -> int:
        v = self.graph.add_input(name, list(_shape_of(t)), t.dtype.code)
        self.values[id(t)] = v
        self.keep.append(t)
        self.sources.append(source)
        self.input_values.append(v)
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
        return self.bind_input(f"capture{k}", t, ("capture", k))

    def record(self, name: str, args: tuple, out) -> None:
        if not isinstance(out, Tensor):
            return
        if name == "from_numpy":  # data the function made: a constant input
            self.bind_input(f"const{len(self.sources)}", out, ("const", out))
            return
        node = _lower(name, args, out)
        if name not in _SHAPE_FREE and node.kind != _K.const:
            self.shape_free = False
        inputs = [self.value(t) for t in node.inputs]
        v = self.graph.add_traced(
            kind=node.kind, inputs=inputs, name=self.label or name, unary=node.unary, binary=node.binary,
            ints=node.ints, floats=node.floats, reduce=node.reduce, keepdims=node.keepdims,
            absent=node.absent, shape=list(_shape_of(out)), dtype=out.dtype.code)
        self.values[id(out)] = v
        self.keep.append(out)


class _Node:
    """One recorded call as a graph node: its kind, its tensor inputs and its attributes."""

    __slots__ = ("kind", "inputs", "unary", "binary", "ints", "floats", "reduce", "keepdims", "absent")

    def __init__(self, kind, inputs=(), ints=(), floats=(), unary=_C.UnaryOp.neg, binary=_C.BinaryOp.add,
                 reduce="none", keepdims=False, optional=()):
        self.kind, self.unary, self.binary, self.reduce, self.keepdims = kind, unary, binary, reduce, keepdims
        self.ints, self.floats = [int(i) for i in ints], [float(f) for f in floats]
        present = list(inputs) + list(optional)
        self.inputs = [t for t in present if t is not None]
        self.absent = sum(1 << k for k, t in enumerate(present) if t is None)


_REDUCE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}  # _C function -> ReduceOp


def _axes(x: Tensor, axes) -> list[int]:
    ndim = _ndim_of(x)
    return sorted({a % ndim for a in axes}) if axes and ndim else list(range(ndim)) if ndim else []


def _lower(name: str, a: tuple, out: Tensor) -> _Node:
    """The graph node for ``_C.<name>(*a)`` that returned ``out`` (the op table of the trace;
    csrc/engine/executor.cpp runs each kind)."""
    if name == "unary":
        return _Node(_K.unary, [a[1]], unary=a[0])
    if name == "binary":
        return _Node(_K.binary, [a[1], a[2]], binary=a[0])
    if name == "where":
        return _Node(_K.where, a[:3])
    if name == "astype":
        return _Node(_K.cast, [a[0]])
    if name == "full":
        if len(a) > 3 and str(a[3]) != "cpu":
            raise TraceError(f"nx.jit: a tensor created on {a[3]} inside the function; create it without "
                             "device= (a trace makes its tensors on its inputs' device) or pass it in")
        return _Node(_K.const if list(a[0]) == [] else _K.fill, floats=[a[1]])
    if name in _REDUCE:
        return _Node(_K.reduce, [a[0]], ints=_axes(a[0], a[1]), reduce=_REDUCE[name], keepdims=bool(a[2]))
    if name == "var":
        return _Node(_K.var, [a[0]], ints=_axes(a[0], a[1]), keepdims=bool(a[2]), floats=[a[3]])
    if name == "logsumexp":
        return _Node(_K.logsumexp, [a[0]], ints=_axes(a[0], a[1]), keepdims=bool(a[2]))
    if name == "argmax":
        return _Node(_K.argmax, [a[0]], ints=[bool(a[2])] + ([] if a[1] is None else [a[1]]))
    if name == "matmul":
        return _Node(_K.matmul, a[:2])
    if name == "conv2d":
        return _Node(_K.conv2d, a[:2], ints=a[3:8], optional=[a[2]])
    if name in ("reshape", "expand"):  # the resolved shape (-1 filled in)
        return _Node(_K.reshape if name == "reshape" else _K.expand, [a[0]], ints=_shape_of(out))
    if name == "permute":
        return _Node(_K.permute, [a[0]], ints=a[1])
    if name == "transpose":
        dims = list(range(_ndim_of(a[0])))
        i, j = a[1] % len(dims), a[2] % len(dims)
        dims[i], dims[j] = dims[j], dims[i]
        return _Node(_K.permute, [a[0]], ints=dims)
    if name == "slice":
        return _Node(_K.slice, [a[0]], ints=a[1:5])
    if name in ("select", "unsqueeze"):
        return _Node(_K.select if name == "select" else _K.unsqueeze, [a[0]], ints=a[1:])
    if name == "index_select":
        return _Node(_K.index_select, a[:2])
    if name in ("concat", "stack"):
        return _Node(_K.concat if name == "concat" else _K.stack, list(a[0]), ints=[a[1]])
    if name in ("contiguous", "clone"):
        return _Node(_K.contiguous, [a[0]], ints=[name == "clone"])
    if name in ("softmax", "log_softmax"):
        return _Node(_K.softmax if name == "softmax" else _K.log_softmax, [a[0]], ints=[a[1]])
    if name == "cross_entropy":
        return _Node(_K.cross_entropy, a[:2], reduce=a[2])
    if name in ("max_pool2d", "avg_pool2d"):
        return _Node(_K.max_pool2d if name == "max_pool2d" else _K.avg_pool2d, [a[0]], ints=a[1:5])
    if name == "dropout":
        return _Node(_K.dropout, [a[0]], floats=[a[1]], ints=[bool(a[2])])
    if name == "layer_norm":  # (x, shape, weight, bias, eps)
        return _Node(_K.layer_norm, [a[0]], ints=a[1], floats=[a[4]], optional=a[2:4])
    if name == "batch_norm":  # (x, mean, var, weight, bias, training, momentum, eps): the node
        return _Node(_K.batch_norm, [a[0]], ints=[bool(a[5])], floats=a[6:8],  # takes x, w, b, mean, var
                     optional=[a[3], a[4], a[1], a[2]])
    if name == "arange":
        return _Node(_K.arange, floats=a[:3])
    if name in ("rand", "randn"):
        return _Node(_K.rand if name == "rand" else _K.randn)
    if name == "detach":
        return _Node(_K.detach, [a[0]])
    raise AssertionError(f"nx.jit: no graph node for the recorded op {name!r}")  # RECORDED lists it


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
            tracer.record(name, args, out)
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
        _active.tracer.record("detach", (self,), out)
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
