"""ONNX operators as Nexus ops: one handler per operator, called while the importer traces the
graph for one set of input shapes (``_import.py``). A handler gets the node's inputs as numpy
arrays (constants: initializers, ``Constant`` nodes, and what was folded from them or from input
shapes) or as Nexus tensors (values computed from the model's inputs), and returns its outputs.
Every Nexus op a handler calls is recorded into the trace, so the graph the model runs is the one
these handlers build; constants enter it once each, as the trace's constant inputs.

A node whose inputs are all constants never reaches a handler: the importer folds it with ONNX's
reference implementation, whatever its operator (shape arithmetic: Range, ConstantOfShape, Mod...).
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .. import functional as F
from ..tensor import Tensor

HANDLERS: dict[str, Callable] = {}
# ONNX element types (TensorProto enum values) -> Nexus dtype names.
DTYPES = {1: "float32", 11: "float64", 10: "float16", 6: "int32", 7: "int64", 9: "bool"}


class UnsupportedError(NotImplementedError):
    """An ONNX operator, attribute or input form that ``nexus.onnx`` does not run.

    The message names the operator, the node, the model's opset and what is supported.

    Example:
        >>> try:
        ...     nx.onnx.load("model.onnx")
        ... except nx.onnx.UnsupportedError as e:
        ...     print(e)
    """


class NeedsValue(Exception):
    """A handler needs an input's values (a shape, axes, slice bounds) and got a tensor computed
    at run time. The importer turns it into an UnsupportedError, unless the tensor is a model
    input it can specialise the plan on (small integer tensors: their values join the plan's key)."""

    def __init__(self, node: "Node", value, what: str):
        super().__init__(what)
        self.node, self.value, self.what = node, value, what

    def unsupported(self) -> UnsupportedError:
        return self.node.unsupported(f"the {self.what} computed from the model's input values (only from shapes)")


class Node:
    """One ONNX node as a handler sees it: its type, name, attributes and the model's opset."""

    __slots__ = ("op", "name", "attrs", "opset", "inputs", "outputs", "proto")

    def __init__(self, op: str, name: str, attrs: dict, opset: int, inputs: list[str], outputs: list[str]):
        self.op, self.name, self.attrs, self.opset = op, name, attrs, opset
        self.inputs, self.outputs = inputs, outputs
        self.proto = None  # the NodeProto (constant folding runs it)

    def unsupported(self, what: str) -> UnsupportedError:
        return UnsupportedError(f"ONNX {self.op} (node '{self.name}', opset {self.opset}): {what} is not "
                                "supported by nexus.onnx")

    def attr(self, name: str, default=None):
        return self.attrs.get(name, default)


def contiguous(a: np.ndarray) -> np.ndarray:
    """``a`` in C order, keeping its rank (np.ascontiguousarray makes a 0-d array 1-d)."""
    return a if a.flags.c_contiguous else np.array(a, order="C")


class Context:
    """What handlers share while tracing: constants as tensors, entered once each. One Context
    serves every trace of a model (one per set of input shapes), so that all its plans read the
    same weight tensors, packed for their kernels once (a fresh tensor per plan would be packed
    and kept again for each input shape)."""

    def __init__(self):
        self._tensors: dict[int, Tensor] = {}
        self._keep: list[np.ndarray] = []  # keeps each id(v) unique for the model's life
        self._derived: dict[tuple, tuple] = {}
        self._tracer = None

    def begin(self, tracer) -> None:
        """A new trace starts: tensors made by an earlier one enter it as constant inputs."""
        self._tracer = tracer

    def derived(self, source: np.ndarray, how: tuple, make) -> np.ndarray:
        """A constant computed from the constant ``source`` (a Gemm's transposed, scaled weight)
        by ``make()``, once per source and ``how``: the same array, hence the same tensor, in every
        trace. (The entry holds the source, so its id names it alone.)"""
        key = (id(source), *how)
        if key not in self._derived:
            self._derived[key] = (source, make())
        return self._derived[key][1]

    def tensor(self, v) -> Tensor:
        """``v`` as a Nexus tensor: a constant array enters the trace once (as a constant input)."""
        if isinstance(v, Tensor):
            return v
        t = self._tensors.get(id(v))
        if t is None:
            t = F.from_numpy(contiguous(v))  # the tracer records it as a constant input
            self._tensors[id(v)] = t
            self._keep.append(v)
        elif self._tracer is not None and id(t) not in self._tracer.values:  # made by an earlier trace
            self._tracer.bind_input(f"const{len(self._tracer.sources)}", t, ("const", t))
        return t

    def operand(self, v, other):
        """A binary op's operand: a one-element constant that does not widen the result's rank
        is a Python scalar (it fuses as an immediate), anything else a tensor."""
        if isinstance(v, np.ndarray) and v.size == 1 and isinstance(other, Tensor) and v.ndim <= other.ndim:
            x = v.reshape(()).item()
            return bool(x) if v.dtype == np.bool_ else x
        return self.tensor(v)


def handler(*ops: str):
    def register(fn):
        for op in ops:
            HANDLERS[op] = fn
        return fn
    return register


def supported_ops() -> list[str]:
    """The ONNX operators (default domain) that ``nexus.onnx.load`` runs on values computed from
    the model's inputs, sorted. Any other operator is fine where it reads only constants and input
    shapes (shape arithmetic): import folds it with ONNX's reference implementation.

    Example:
        >>> "Conv" in nx.onnx.supported_ops()
        True
    """
    return sorted(HANDLERS)


def _ints(v) -> list[int]:
    return [int(i) for i in np.asarray(v).reshape(-1)]


def _shape(x) -> tuple[int, ...]:
    return tuple(x.shape)


# ---- elementwise ---------------------------------------------------------------------------------

_UNARY = {"Relu": F.relu, "Sigmoid": F.sigmoid, "Tanh": F.tanh, "Exp": F.exp, "Log": F.log, "Sqrt": F.sqrt,
          "Neg": F.neg, "Abs": F.abs, "Sin": F.sin, "Cos": F.cos, "Erf": F.erf}
_BINARY = {"Add": F.add, "Sub": F.sub, "Mul": F.mul, "Div": F.div, "Pow": F.pow, "Equal": F.eq,
           "Less": F.lt, "LessOrEqual": F.le, "Greater": F.gt, "GreaterOrEqual": F.ge}


@handler(*_UNARY)
def _unary(ctx: Context, node: Node, x):
    return [_UNARY[node.op](x)]


@handler(*_BINARY)
def _binary(ctx: Context, node: Node, a, b):
    x, y = ctx.operand(a, b), ctx.operand(b, a)
    if node.op == "Div" and not (x if isinstance(x, Tensor) else y).dtype.is_floating_point:
        return [_truncating_divide(x, y)]
    out = _BINARY[node.op](x, y)
    if node.op == "Pow" and out.dtype != a.dtype:  # Pow's result has the base's type (int ** float: int)
        out = out.astype(a.dtype)
    return [out]


def _truncating_divide(a, b):
    """Integer division rounded toward zero (ONNX's, C's): floor division, plus one where the
    division was inexact and the signs differ."""
    q = F.floor_divide(a, b)
    inexact = F.ne(F.remainder(a, b), 0)
    signs_differ = F.ne(F.lt(a, 0), F.lt(b, 0))
    return F.add(q, F.mul(inexact, signs_differ).astype(q.dtype))


@handler("Max", "Min")
def _max_min(ctx: Context, node: Node, *xs):
    fn = F.maximum if node.op == "Max" else F.minimum
    out = xs[0]
    for x in xs[1:]:
        out = fn(ctx.operand(out, x), ctx.operand(x, out))
    return [ctx.tensor(out)]


@handler("Reciprocal")
def _reciprocal(ctx: Context, node: Node, x):
    return [F.div(1.0, x)]


@handler("Gelu")
def _gelu(ctx: Context, node: Node, x):
    approximate = node.attr("approximate", "none")
    if approximate == "tanh":
        return [F.gelu(x)]
    if approximate != "none":
        raise node.unsupported(f"approximate={approximate!r} ('none' and 'tanh' are)")
    return [F.mul(F.mul(x, 0.5), F.add(F.erf(F.mul(x, 0.7071067811865476)), 1.0))]


@handler("LeakyRelu")
def _leaky_relu(ctx: Context, node: Node, x):
    return [F.where(F.gt(x, 0.0), x, F.mul(x, float(node.attr("alpha", 0.01))))]


@handler("Clip")
def _clip(ctx: Context, node: Node, x, low=None, high=None):
    if low is not None:
        x = F.maximum(x, ctx.operand(low, x))
    if high is not None:
        x = F.minimum(x, ctx.operand(high, x))
    return [x]


@handler("Where")
def _where(ctx: Context, node: Node, cond, a, b):
    return [F.where(ctx.tensor(cond), ctx.operand(a, cond), ctx.operand(b, cond))]


@handler("Cast")
def _cast(ctx: Context, node: Node, x):
    to = DTYPES.get(node.attr("to"))
    if to is None:
        raise node.unsupported(f"cast to element type {node.attr('to')}")
    return [x.astype(to)]


@handler("Identity", "Dropout")
def _identity(ctx: Context, node: Node, x, *rest):
    if node.op == "Dropout" and len(node.outputs) > 1 and node.outputs[1]:
        raise node.unsupported("the mask output")
    return [x]


# ---- linear algebra and nn ---------------------------------------------------------------------


@handler("MatMul")
def _matmul(ctx: Context, node: Node, a, b):
    return [F.matmul(ctx.tensor(a), ctx.tensor(b))]


@handler("Gemm")
def _gemm(ctx: Context, node: Node, a, b, c=None):
    alpha, beta = float(node.attr("alpha", 1.0)), float(node.attr("beta", 1.0))
    a = ctx.tensor(a)
    if node.attr("transA", 0):
        a = F.transpose(a, 0, 1)
    if isinstance(b, np.ndarray):  # weights: transposed and scaled once per model
        trans = node.attr("transB", 0)

        def weight(w=b.T if trans else b):
            return contiguous(w * np.asarray(alpha, w.dtype) if alpha != 1.0 else w)
        b = ctx.derived(b, ("gemm weight", trans, alpha), weight)
        alpha = 1.0
    elif node.attr("transB", 0):
        b = F.transpose(b, 0, 1)
    y = F.matmul(a, ctx.tensor(b))
    if alpha != 1.0:
        y = F.mul(y, alpha)
    if c is not None and beta != 0.0:
        if isinstance(c, np.ndarray) and beta != 1.0:
            c, beta = c * np.asarray(beta, c.dtype), 1.0
        c = ctx.operand(c, y)
        y = F.add(y, c if beta == 1.0 else F.mul(c, beta))
    return [y]


def _spatial(node: Node, x, what: str) -> int:
    if x.ndim not in (3, 4):
        raise node.unsupported(f"{what} over {x.ndim - 2} spatial dimensions (1 and 2 are)")
    return x.ndim - 2


def _pads(node: Node, in_hw, kernel, strides, dilations=(1, 1)) -> list[int]:
    """[top, left, bottom, right] from ``pads`` or ``auto_pad`` (for 2 spatial dimensions)."""
    auto = node.attr("auto_pad", "NOTSET")
    if auto in ("NOTSET", "VALID"):
        p = _ints(node.attr("pads", [0] * 4)) if auto == "NOTSET" else [0] * 4
        return p
    if auto not in ("SAME_UPPER", "SAME_LOWER"):
        raise node.unsupported(f"auto_pad={auto!r}")
    begin, end = [], []
    for n, k, s, d in zip(in_hw, kernel, strides, dilations):
        out = -(-n // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - n)
        small, big = total // 2, total - total // 2
        begin.append(small if auto == "SAME_UPPER" else big)
        end.append(big if auto == "SAME_UPPER" else small)
    return begin + end


def _as_2d(node: Node, x, what: str):
    """x with 2 spatial dimensions (a 1-D one gets height 1), and the shape to undo it."""
    if _spatial(node, x, what) == 1:
        return F.reshape(x, x.shape[0], x.shape[1], 1, x.shape[2]), True
    return x, False


def _attr2(node: Node, name: str, default: int, one_d: bool) -> list[int]:
    v = _ints(node.attr(name, [default] * (1 if one_d else 2)))
    return [default] + v if one_d else v


def _pads2(node: Node, pads: list[int], one_d: bool) -> list[int]:
    return [0, pads[0], 0, pads[1]] if one_d and len(pads) == 2 else pads


def _pad(x, pads: list[int], value: float):
    """x (N, C, H, W) with ``value`` around it: [top, left, bottom, right] rows and columns."""
    if min(pads) < 0:
        raise UnsupportedError(f"negative pads {pads} are not supported by nexus.onnx")
    for axis, before, after in ((3, pads[1], pads[3]), (2, pads[0], pads[2])):
        if before or after:
            edge = [F.full([*x.shape[:axis], k, *x.shape[axis + 1:]], value, dtype=x.dtype) if k else None
                    for k in (before, after)]
            x = F.concat([t for t in (edge[0], x, edge[1]) if t is not None], axis)
    return x


@handler("Conv")
def _conv(ctx: Context, node: Node, x, w, b=None):
    x, one_d = _as_2d(node, ctx.tensor(x), "Conv")
    if not isinstance(w, np.ndarray):
        raise node.unsupported("a weight computed from the model's inputs")
    w = w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]) if one_d else w
    strides = _attr2(node, "strides", 1, one_d)
    dilations = _attr2(node, "dilations", 1, one_d)
    if dilations != [1, 1]:  # a dilated kernel is the kernel with zeros between its taps
        kh, kw = w.shape[2:]
        wd = np.zeros((*w.shape[:2], (kh - 1) * dilations[0] + 1, (kw - 1) * dilations[1] + 1), w.dtype)
        wd[:, :, ::dilations[0], ::dilations[1]] = w
        w = wd
    pads = _pads2(node, _pads(node, x.shape[2:], w.shape[2:], strides), one_d)
    if pads[0] != pads[2] or pads[1] != pads[3]:
        x, pads = _pad(x, pads, 0.0), [0, 0, 0, 0]
    bias = b if b is not None else np.zeros(w.shape[0], w.dtype)
    y = F.conv2d(x, ctx.tensor(w), ctx.tensor(bias), stride=strides, padding=pads[:2],
                 groups=int(node.attr("group", 1)))
    return [F.reshape(y, y.shape[0], y.shape[1], y.shape[3]) if one_d else y]


@handler("MaxPool", "AveragePool")
def _pool(ctx: Context, node: Node, x):
    x, one_d = _as_2d(node, ctx.tensor(x), node.op)
    if len(node.outputs) > 1 and node.outputs[1]:
        raise node.unsupported("the Indices output")
    kernel = _ints(node.attr("kernel_shape"))
    kernel = [1] + kernel if one_d else kernel
    strides = _attr2(node, "strides", 1, one_d)
    if _attr2(node, "dilations", 1, one_d) != [1, 1]:
        raise node.unsupported("dilations")
    pads = _pads2(node, _pads(node, x.shape[2:], kernel, strides), one_d)
    if node.attr("ceil_mode", 0):  # more padding at the end so that the last window fits
        for i in range(2):
            n = x.shape[2 + i] + pads[i] + pads[2 + i]
            extra = (-(n - kernel[i]) % strides[i]) if n > kernel[i] else 0
            if extra and node.op == "AveragePool":
                raise node.unsupported("ceil_mode=1 where it adds a partial window")
            pads[2 + i] += extra
    if node.op == "MaxPool":
        if any(pads):
            x = _pad(x, pads, -math.inf)
        y = F.max_pool2d(x, kernel, strides)
    elif not any(pads):
        y = F.avg_pool2d(x, kernel, strides)
    else:
        y = F.avg_pool2d(_pad(x, pads, 0.0), kernel, strides)
        if not node.attr("count_include_pad", 0):  # divide by the window's real elements instead
            h, w = x.shape[2:]
            ones = np.zeros((1, 1, h + pads[0] + pads[2], w + pads[1] + pads[3]), np.float64)
            ones[:, :, pads[0]:pads[0] + h, pads[1]:pads[1] + w] = 1
            counts = _window_sums(ones, kernel, strides)
            y = F.mul(y, ctx.tensor((kernel[0] * kernel[1] / counts).astype(np.dtype(x.dtype.name))))
    return [F.reshape(y, y.shape[0], y.shape[1], y.shape[3]) if one_d else y]


def _window_sums(a: np.ndarray, kernel, strides) -> np.ndarray:
    win = np.lib.stride_tricks.sliding_window_view(a, kernel, axis=(2, 3))
    return win[:, :, ::strides[0], ::strides[1]].sum(axis=(-2, -1))


@handler("GlobalAveragePool", "GlobalMaxPool")
def _global_pool(ctx: Context, node: Node, x):
    axes = tuple(range(2, x.ndim))
    return [(F.mean if node.op == "GlobalAveragePool" else F.max)(x, axis=axes, keepdims=True)]


@handler("BatchNormalization")
def _batch_norm(ctx: Context, node: Node, x, scale, bias, mean, var):
    if node.attr("training_mode", 0):
        raise node.unsupported("training_mode=1")
    return [F.batch_norm(x, ctx.tensor(mean), ctx.tensor(var), ctx.tensor(scale), ctx.tensor(bias),
                         training=False, eps=float(node.attr("epsilon", 1e-5)))]


@handler("LayerNormalization")
def _layer_norm(ctx: Context, node: Node, x, scale, bias=None):
    axis = int(node.attr("axis", -1)) % x.ndim
    shape, eps = x.shape[axis:], float(node.attr("epsilon", 1e-5))
    scale = np.broadcast_to(scale, shape) if isinstance(scale, np.ndarray) else scale
    bias = np.broadcast_to(bias, shape) if isinstance(bias, np.ndarray) else bias
    y = F.layer_norm(x, shape, ctx.tensor(scale), None if bias is None else ctx.tensor(bias), eps=eps)
    if not any(node.outputs[1:]):
        return [y]
    axes = tuple(range(axis, x.ndim))  # the statistics, with the normalised axes kept as 1s
    mean = F.mean(x, axis=axes, keepdims=True)
    inv_std = F.div(1.0, F.sqrt(F.add(F.var(x, axis=axes, keepdims=True), eps)))
    return [y, mean, inv_std]


@handler("Softmax")
def _softmax(ctx: Context, node: Node, x):
    return [F.softmax(x, int(node.attr("axis", -1)))]


_REDUCE = {"ReduceMean": F.mean, "ReduceSum": F.sum, "ReduceMax": F.max, "ReduceMin": F.min}
# Before these opsets the axes are an attribute; from them, an input.
_AXES_INPUT_FROM = {"ReduceSum": 13, "ReduceMean": 18, "ReduceMax": 18, "ReduceMin": 18}


@handler(*_REDUCE)
def _reduce(ctx: Context, node: Node, x, axes=None):
    if node.opset < _AXES_INPUT_FROM[node.op]:
        axes = node.attr("axes")
    elif axes is not None:
        axes = _const(node, axes, "axes")
    axes = None if axes is None else _ints(axes)
    if not axes:
        if node.attr("noop_with_empty_axes", 0):
            return [x]
        axes = list(range(x.ndim))
    axes, keepdims = tuple(a % x.ndim for a in axes), bool(node.attr("keepdims", 1))
    if node.op in ("ReduceMax", "ReduceMin") and any(x.shape[a] == 0 for a in axes):
        # the maximum of nothing is the lowest value (ONNX 18), the minimum the highest
        shape = [1 if a in axes else d for a, d in enumerate(x.shape) if keepdims or a not in axes]
        low = node.op == "ReduceMax"
        fill = (not low) if x.dtype.name == "bool" else (-math.inf if low else math.inf)
        if not x.dtype.is_floating_point and x.dtype.name != "bool":
            info = np.iinfo(x.dtype.name)
            fill = info.min if low else info.max
        return [F.full(shape, fill, dtype=x.dtype)]
    return [_REDUCE[node.op](x, axis=axes, keepdims=keepdims)]


# ---- shapes and views ---------------------------------------------------------------------------


def _const(node: Node, v, what: str) -> np.ndarray:
    if not isinstance(v, np.ndarray):
        raise NeedsValue(node, v, what)
    return v


@handler("Shape")
def _shape_op(ctx: Context, node: Node, x):
    dims = np.array(_shape(x), np.int64)
    start, end = node.attr("start", 0), node.attr("end", None)
    return [dims[start:end]]


@handler("Size")
def _size(ctx: Context, node: Node, x):
    return [np.array(math.prod(x.shape), np.int64)]


@handler("Reshape")
def _reshape(ctx: Context, node: Node, x, shape):
    shape = _ints(_const(node, shape, "shape"))
    if not node.attr("allowzero", 0):
        shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return [F.reshape(x, *shape)]


@handler("Flatten")
def _flatten(ctx: Context, node: Node, x):
    axis = int(node.attr("axis", 1)) % (x.ndim + 1) if x.ndim else 0
    return [F.reshape(x, math.prod(x.shape[:axis]), math.prod(x.shape[axis:]))]


@handler("Transpose")
def _transpose(ctx: Context, node: Node, x):
    perm = _ints(node.attr("perm", list(range(x.ndim))[::-1]))
    return [F.permute(x, *perm)]


def _axes_arg(node: Node, axes, since: int = 13):
    if node.opset < since:
        return node.attr("axes")
    return None if axes is None else _ints(_const(node, axes, "axes"))


@handler("Unsqueeze")
def _unsqueeze(ctx: Context, node: Node, x, axes=None):
    axes = _axes_arg(node, axes)
    rank = x.ndim + len(axes)
    axes = sorted(a % rank for a in axes)
    shape = list(x.shape)
    for a in axes:
        shape.insert(a, 1)
    return [F.reshape(x, *shape)]


@handler("Squeeze")
def _squeeze(ctx: Context, node: Node, x, axes=None):
    axes = _axes_arg(node, axes)
    axes = [i for i, d in enumerate(x.shape) if d == 1] if axes is None else [a % x.ndim for a in axes]
    return [F.reshape(x, *[d for i, d in enumerate(x.shape) if i not in axes])]


@handler("Concat")
def _concat(ctx: Context, node: Node, *xs):
    kept = [ctx.tensor(x) for x in xs if not (isinstance(x, np.ndarray) and x.size == 0)]
    return [F.concat(kept, int(node.attr("axis")))]


@handler("Expand")
def _expand(ctx: Context, node: Node, x, shape):
    shape = _ints(_const(node, shape, "shape"))
    out = np.broadcast_shapes(tuple(x.shape), tuple(shape))
    if x.ndim < len(out):
        x = F.reshape(x, *([1] * (len(out) - x.ndim) + list(x.shape)))
    return [F.expand(x, *out)]


def _clamp_slice(start: int, end: int, step: int, n: int) -> tuple[int, int]:
    start = start + n if start < 0 else start
    end = end + n if end < 0 else end
    return min(max(start, 0), n), min(max(end, 0), n)


@handler("Slice")
def _slice(ctx: Context, node: Node, x, starts, ends, axes=None, steps=None):
    starts, ends = _ints(_const(node, starts, "starts")), _ints(_const(node, ends, "ends"))
    axes = list(range(len(starts))) if axes is None else _ints(_const(node, axes, "axes"))
    steps = [1] * len(starts) if steps is None else _ints(_const(node, steps, "steps"))
    key = [slice(None)] * x.ndim
    for s, e, a, st in zip(starts, ends, axes, steps):
        if st <= 0:
            raise node.unsupported(f"step {st} (positive steps are)")
        a %= x.ndim
        s, e = _clamp_slice(s, e, st, x.shape[a])
        key[a] = slice(s, max(s, e), st)
    return [x[tuple(key)]]


@handler("Split")
def _split(ctx: Context, node: Node, x, split=None):
    axis = int(node.attr("axis", 0)) % x.ndim
    n = x.shape[axis]
    if split is not None:
        sizes = _ints(_const(node, split, "split"))
    elif node.attr("split") is not None:
        sizes = _ints(node.attr("split"))
    else:
        parts = int(node.attr("num_outputs", len(node.outputs)))
        size = -(-n // parts)
        sizes = [min(size, n - i * size) for i in range(parts)]
    outs, at = [], 0
    for s in sizes:
        key = [slice(None)] * x.ndim
        key[axis] = slice(at, at + s)
        outs.append(x[tuple(key)])
        at += s
    return outs


@handler("Gather")
def _gather(ctx: Context, node: Node, data, indices):
    data = ctx.tensor(data)
    axis = int(node.attr("axis", 0)) % data.ndim
    n = data.shape[axis]
    if isinstance(indices, np.ndarray):
        idx = np.where(indices < 0, indices + n, indices).astype(np.int64)
        if idx.ndim == 0:  # a scalar index drops the axis
            key = [slice(None)] * axis + [int(idx)]
            return [data[tuple(key)]]
        flat = ctx.tensor(idx.reshape(-1))
    else:
        flat = F.reshape(indices, indices.numel())
        flat = F.where(F.lt(flat, 0), F.add(flat, n), flat)
    moved = data if axis == 0 else F.permute(data, axis, *[d for d in range(data.ndim) if d != axis])
    rows = moved[flat]
    out_shape = list(indices.shape) + list(moved.shape[1:])
    y = F.reshape(rows, *out_shape)
    if axis:
        k = indices.ndim  # the gathered dims sit first; move them to the axis' place
        rest = list(range(k, y.ndim))
        y = F.permute(y, *(rest[:axis] + list(range(k)) + rest[axis:]))
    return [y]
