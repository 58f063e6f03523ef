"""Tensor creation and math at the top level of ``nexus``: argument normalisation over ``_C``.

Python scalars are "weak" (they take the tensor's dtype where it can hold them), numpy arrays
and lists are converted with ``tensor``; everything else is the native op.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence

import numpy as np

from . import _C
from ._dtype import as_dtype, bfloat16, bool_, float32, int64

Tensor = _C.Tensor
_U = _C.UnaryOp
_B = _C.BinaryOp

# ---- conversion helpers ------------------------------------------------------------------------


def _shape(args) -> list[int]:
    """zeros(2, 3), zeros((2, 3)) and zeros([2, 3]) all mean shape (2, 3)."""
    if len(args) == 1 and isinstance(args[0], (Sequence, np.ndarray)) and not isinstance(args[0], str):
        args = tuple(args[0])
    out = []
    for d in args:
        if not isinstance(d, (numbers.Integral, np.integer)) or isinstance(d, bool):
            raise TypeError(f"shape dimensions must be integers, got {d!r} in {args!r}")
        out.append(int(d))
    return out


def _infer_dtype(value):
    if isinstance(value, (bool, np.bool_)):
        return bool_
    if isinstance(value, (numbers.Integral, np.integer)):
        return int64
    if isinstance(value, (numbers.Real, np.floating)):
        return float32
    raise TypeError(f"expected a number, got {type(value).__name__}")


def _scalar_dtype(value, like):
    """The dtype a Python scalar takes next to a tensor of dtype ``like`` (weak scalars)."""
    if isinstance(value, (bool, np.bool_)):
        return like
    if isinstance(value, (numbers.Integral, np.integer)):
        return int64 if like is bool_ else like
    if isinstance(value, (numbers.Real, np.floating)):
        return like if like.is_floating_point else float32
    raise TypeError(f"unsupported operand type {type(value).__name__}; expected a Tensor or a number")


def _as_tensor(x, like: Tensor | None = None) -> Tensor:
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, complex):
        dt = _scalar_dtype(x, like.dtype) if like is not None else _infer_dtype(x)
        return _C.full([], float(x), dt.code)
    if isinstance(x, (np.ndarray, list, tuple)):
        return tensor(x)
    raise TypeError(f"expected a Tensor, a number or an array, got {type(x).__name__}")


def _pair(a, b):
    if isinstance(a, Tensor):
        return a, _as_tensor(b, a)
    if isinstance(b, Tensor):
        return _as_tensor(a, b), b
    return _as_tensor(a), _as_tensor(b)


def _axes(axis) -> list[int]:
    if axis is None:
        return []
    if isinstance(axis, (numbers.Integral, np.integer)):
        return [int(axis)]
    return [int(a) for a in axis]


def _dt(dtype, default=float32):
    return (default if dtype is None else as_dtype(dtype)).code


def _device(device) -> _C.device:
    """``device`` (None, "cpu", "cuda", "cuda:N" or an nx.device) as an nx.device."""
    if device is None:
        return _C.device("cpu")
    if isinstance(device, _C.device):
        return device
    if isinstance(device, str):
        return _C.device(device)
    raise TypeError(f"device must be a string such as 'cuda:0' or an nx.device, got {type(device).__name__}")


def _on(t: Tensor, device) -> Tensor:
    """``t`` moved to ``device`` when one is given (creation functions build on the host first)."""
    return t if device is None else _C.to_device(t, _device(device))


# ---- creation ----------------------------------------------------------------------------------


def _numpy_data(data, target):
    """``data`` as a numpy array. Integers beyond int64 (which numpy keeps as objects, uint64 or
    float64) become float64 where a float is wanted (a floating ``dtype``, or a float among
    them, as in PyTorch), else an OverflowError."""
    arr = np.array(data)
    kind = arr.dtype.kind
    suspect = (kind == "O" or kind == "u" and arr.size and int(arr.max()) >= 2**63
               or kind == "f" and not isinstance(data, (np.ndarray, np.generic)) and bool((np.abs(arr) >= 2**63).any()))
    if not suspect:
        return arr
    items = np.array(data, dtype=object).ravel()  # the Python objects themselves
    big = next((int(v) for v in items if isinstance(v, (int, np.integer)) and not -2**63 <= int(v) < 2**63), None)
    if big is None:
        if kind == "O":
            raise TypeError(f"cannot build a tensor from {type(data).__name__}: ragged or non-numeric data")
        return arr
    if any(isinstance(v, (float, np.floating)) for v in items) or target is not None and target.is_floating_point:
        return np.array(data, dtype=np.float64)
    raise OverflowError(f"Overflow: the integer {big} is out of range of int64 [-2**63, 2**63 - 1]; "
                        "pass dtype='float64' (or float32) for a floating-point tensor")


_NUMPY_KEPT = ("float16", "float32", "float64", "int32", "int64", "bool")


def _numpy_source(data, dtype) -> np.ndarray:
    """``data`` as a numpy array in a dtype nexus has (before any ``dtype=`` conversion)."""
    from_numpy_input = isinstance(data, (np.ndarray, np.generic))
    arr = _numpy_data(data, None if dtype is None else as_dtype(dtype))
    kind = arr.dtype.kind
    if kind not in "biuf":
        raise TypeError(f"cannot build a tensor from numpy dtype {arr.dtype}: nexus has no "
                        f"{arr.dtype} dtype; supported: {', '.join(_NUMPY_KEPT)} and bfloat16")
    if not arr.dtype.isnative:  # big-endian data: the same values in this machine's byte order
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if from_numpy_input:
        # A numpy array keeps its dtype; one nexus does not have is converted only on request.
        if arr.dtype.name not in _NUMPY_KEPT and dtype is None:
            raise TypeError(
                f"nx.tensor: numpy dtype {arr.dtype} has no nexus dtype (supported: "
                f"{', '.join(_NUMPY_KEPT)}); say which to convert to, e.g. "
                f"nx.tensor(a, dtype=nx.int64) or nx.tensor(a, dtype=nx.float32)")
        return arr
    if kind == "u" and arr.dtype.itemsize == 8:  # Python ints past int64's range
        raise OverflowError(f"nx.tensor: value {arr.max()} is out of range for int64")
    return arr.astype({"f": np.float32, "i": np.int64, "u": np.int64, "b": np.bool_}[kind], copy=False)


def tensor(data, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A new tensor holding a copy of ``data`` (nested lists, numbers, numpy arrays, tensors).

    Python floats become float32, ints int64, bools bool. A numpy array (or numpy scalar) keeps
    its dtype: float16, float32, float64, int32, int64 or bool. Other numpy dtypes (uint8, int8,
    int16, uint16, uint32, uint64) raise TypeError unless ``dtype=`` says what to convert to, as
    ``a.astype(dtype)`` would; complex and non-numeric data always raise TypeError.

        >>> nx.tensor(np.arange(3, dtype=np.uint8), dtype=nx.float32)
        tensor([0., 1., 2.])

    ``device=`` ("cpu", "cuda", "cuda:N" or an ``nx.device``) puts the copy there.

    Raises:
        OverflowError: an integer is beyond int64 and no floating ``dtype`` was asked for.
        TypeError: ragged or non-numeric data, or a numpy dtype nexus lacks without ``dtype=``.
    """
    if isinstance(data, Tensor):
        out = _C.clone(data.detach())
        if dtype is not None:
            out = _C.astype(out, _dt(dtype))
    else:
        arr = _numpy_source(data, dtype)
        target = as_dtype(dtype) if dtype is not None else None
        if target is bfloat16:
            out = _C.astype(_C.from_numpy(np.array(arr, dtype=np.float32, order="C")), bfloat16.code)
        else:
            np_target = None if target is None else np.dtype(target.name)
            out = _C.from_numpy(np.array(arr, dtype=np_target, order="C", copy=True))
    return _leaf(_on(out, device), requires_grad)


def from_numpy(array: np.ndarray) -> Tensor:
    """A tensor sharing memory with ``array`` (writes to one are seen by the other)."""
    if not isinstance(array, np.ndarray):
        raise TypeError(f"from_numpy expects a numpy.ndarray, got {type(array).__name__}")
    return _C.from_numpy(array)


def from_dlpack(obj) -> Tensor:
    """A tensor sharing memory with any DLPack producer (numpy arrays, other frameworks' tensors)."""
    if hasattr(obj, "__dlpack__"):
        return _C.from_dlpack_capsule(obj.__dlpack__())
    return _C.from_dlpack_capsule(obj)


def _leaf(t: Tensor, requires_grad: bool) -> Tensor:
    if requires_grad:
        t.requires_grad = True
    return t


def zeros(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of zeros (float32 unless ``dtype``) on ``device`` (the host unless given).

    Example: ``nx.zeros(2, 3, device="cuda")``. Raises RuntimeError for a device that cannot be used.
    """
    return _leaf(_C.full(_shape(shape), 0.0, _dt(dtype), _device(device)), requires_grad)


def ones(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ones (float32 unless ``dtype``) on ``device`` (the host unless given).

    Example: ``nx.ones((2, 3), dtype=nx.int64)``.
    """
    return _leaf(_C.full(_shape(shape), 1.0, _dt(dtype), _device(device)), requires_grad)


def full(shape, fill_value, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` filled with ``fill_value`` (its dtype inferred from the value unless
    ``dtype``) on ``device``. Example: ``nx.full((2, 2), 7)`` is an int64 tensor of sevens."""
    dt = as_dtype(dtype) if dtype is not None else _infer_dtype(fill_value)
    return _leaf(_C.full(_shape((shape,)), float(fill_value), dt.code, _device(device)), requires_grad)


def arange(start, stop=None, step=1, dtype=None, device=None) -> Tensor:
    if stop is None:
        start, stop = 0, start
    all_int = all(isinstance(v, (numbers.Integral, np.integer)) for v in (start, stop, step))
    dt = as_dtype(dtype) if dtype is not None else (int64 if all_int else float32)
    return _on(_C.arange(float(start), float(stop), float(step), dt.code), device)


def rand(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Uniform samples in [0, 1) from the generator seeded by ``manual_seed``.

    Drawn on the host and copied to ``device``, so a seed gives the same numbers on every device.
    """
    return _leaf(_on(_C.rand(_shape(shape), _dt(dtype)), device), requires_grad)


def randn(*shape, dtype=None, device=None, requires_grad: bool = False) -> Tensor:
    """Standard normal samples from the generator seeded by ``manual_seed`` (drawn on the host and
    copied to ``device``, as ``rand``)."""
    return _leaf(_on(_C.randn(_shape(shape), _dt(dtype)), device), requires_grad)


def manual_seed(seed: int) -> None:
    """Seeds the generator behind rand, randn and dropout."""
    if not isinstance(seed, (numbers.Integral, np.integer)) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative integer, got {seed!r}")
    _C.manual_seed(int(seed) & 0xFFFFFFFFFFFFFFFF)


# ---- elementwise -------------------------------------------------------------------------------


def _binary(op):
    def fn(a, b):
        a, b = _pair(a, b)
        return _C.binary(op, a, b)

    fn.__name__ = op.name
    fn.__doc__ = f"Elementwise {op.name} with numpy broadcasting."
    return fn


def _unary(op):
    def fn(x):
        return _C.unary(op, _as_tensor(x))

    fn.__name__ = op.name
    fn.__doc__ = f"Elementwise {op.name}."
    return fn


add, sub, mul, div, pow = (_binary(o) for o in (_B.add, _B.sub, _B.mul, _B.div, _B.pow))
maximum, minimum = _binary(_B.maximum), _binary(_B.minimum)
floor_divide, remainder = _binary(_B.floor_divide), _binary(_B.remainder)
floor_divide.__doc__ = """``a // b`` with numpy broadcasting: the quotient rounded toward -inf (numpy.floor_divide,
torch.floor_divide). Integer operands give an integer; an integer divisor of 0 raises
ZeroDivisionError (as Python and torch; numpy returns 0 with a warning). Float operands give
inf or nan for a 0 divisor. Gradient: zero. Example: ``nx.floor_divide(nx.tensor([-7, 7]), 2)``
is ``[-4, 3]``."""
remainder.__doc__ = """``a % b`` with numpy broadcasting: ``a - floor_divide(a, b) * b``, which takes the divisor's
sign (numpy.remainder, torch.remainder; C's fmod takes the dividend's). An integer divisor of 0
raises ZeroDivisionError; a float one gives nan. Example: ``nx.remainder(nx.tensor([-7, 7]), 3)``
is ``[2, 1]``."""
eq, ne, lt, le, gt, ge = (_binary(o) for o in (_B.eq, _B.ne, _B.lt, _B.le, _B.gt, _B.ge))
exp, log, sqrt, tanh, sigmoid = (_unary(o) for o in (_U.exp, _U.log, _U.sqrt, _U.tanh, _U.sigmoid))
relu, sin, cos, abs, neg = (_unary(o) for o in (_U.relu, _U.sin, _U.cos, _U.abs, _U.neg))
gelu, erf = _unary(_U.gelu), _unary(_U.erf)
erf.__doc__ = "The error function, 2/sqrt(pi) times the integral of e^{-t^2} from 0 to x (torch.erf)."
gelu.__doc__ = "GELU, tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."


def where(condition, a, b) -> Tensor:
    """Elements of ``a`` where ``condition`` is true, else of ``b`` (broadcasting)."""
    a, b = _pair(a, b)
    return _C.where(_as_tensor(condition), a, b)


# ---- reductions --------------------------------------------------------------------------------


def sum(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001 - numpy name
    return _C.sum(_as_tensor(x), _axes(axis), keepdims)


def mean(x, axis=None, keepdims: bool = False) -> Tensor:
    return _C.mean(_as_tensor(x), _axes(axis), keepdims)


def max(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _C.amax(_as_tensor(x), _axes(axis), keepdims)


def min(x, axis=None, keepdims: bool = False) -> Tensor:  # noqa: A001
    return _C.amin(_as_tensor(x), _axes(axis), keepdims)


def argmax(x, axis=None, keepdims: bool = False) -> Tensor:
    if axis is not None and not isinstance(axis, (numbers.Integral, np.integer)):
        raise TypeError(f"argmax: axis must be an int or None, got {axis!r}")
    return _C.argmax(_as_tensor(x), None if axis is None else int(axis), keepdims)


def var(x, axis=None, keepdims: bool = False, ddof: int = 0) -> Tensor:
    """Variance with numpy's default ``ddof=0`` (pass ``ddof=1`` for the unbiased estimate)."""
    return _C.var(_as_tensor(x), _axes(axis), keepdims, int(ddof))


def logsumexp(x, axis=None, keepdims: bool = False) -> Tensor:
    return _C.logsumexp(_as_tensor(x), _axes(axis), keepdims)


def softmax(x, axis: int = -1) -> Tensor:
    return _C.softmax(_as_tensor(x), int(axis))


def log_softmax(x, axis: int = -1) -> Tensor:
    return _C.log_softmax(_as_tensor(x), int(axis))


# ---- shape ops ---------------------------------------------------------------------------------


def reshape(x, *shape) -> Tensor:
    return _C.reshape(_as_tensor(x), _shape(shape))


def transpose(x, a: int = 0, b: int = 1) -> Tensor:
    return _C.transpose(_as_tensor(x), int(a), int(b))


def permute(x, *dims) -> Tensor:
    return _C.permute(_as_tensor(x), _shape(dims))


def expand(x, *shape) -> Tensor:
    return _C.expand(_as_tensor(x), _shape(shape))


def concat(tensors, axis: int = 0) -> Tensor:
    return _C.concat([_as_tensor(t) for t in tensors], int(axis))


def stack(tensors, axis: int = 0) -> Tensor:
    return _C.stack([_as_tensor(t) for t in tensors], int(axis))


# ---- linear algebra and nn ---------------------------------------------------------------------


def matmul(a, b) -> Tensor:
    """Matrix product with numpy semantics (1-D operands, broadcast batch dimensions)."""
    a, b = _pair(a, b)
    return _C.matmul(a, b)


def cross_entropy(logits, labels, reduction: str = "mean") -> Tensor:
    """Softmax cross-entropy over the class axis 1, as ``torch.nn.functional.cross_entropy``.

    ``logits``: (N, C), or (N, C, d1, ..., dk) for a class per position (say, per pixel), or (C,)
    for one sample. ``labels``: either integer class indices in [0, C) of shape (N,) /
    (N, d1, ..., dk) / (), or, when they have the logits' shape, class probabilities (floating
    point; the loss is then ``-sum(labels * log_softmax(logits, axis=1), axis=1)`` and labels get
    a gradient too). ``reduction``: "mean" over all N * d1 * ... * dk positions, "sum", or "none"
    (one loss per position, shape (N, d1, ..., dk)). Raises ValueError for mismatched shapes,
    IndexError for a class index out of range, TypeError for non-floating logits.

        >>> nx.cross_entropy(nx.zeros(2, 10), [3, 7]).item()   # log 10
        2.3025851249694824
    """
    if reduction not in _C.LOSS_REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction {reduction!r} is not one of "
                         f"{', '.join(map(repr, _C.LOSS_REDUCTIONS))}")
    x, y = _as_tensor(logits), _as_tensor(labels)
    if x.ndim == 1:  # one sample
        out = cross_entropy(_C.unsqueeze(x, 0), _C.unsqueeze(y, 0), reduction)
        return _C.reshape(out, []) if reduction == "none" else out
    if x.ndim == 0:
        raise ValueError("cross_entropy: logits must be (N, C, ...) or (C,), got a 0-d tensor")
    if y.shape == x.shape:  # class probabilities (torch decides by shape, as here)
        if not y.dtype.is_floating_point:
            raise TypeError(f"cross_entropy: labels of the logits' shape {x.shape} are class "
                            f"probabilities and must be floating point, got {y.dtype}")
        loss = neg(sum(mul(y, log_softmax(x, 1)), axis=1))
        return loss if reduction == "none" else (sum if reduction == "sum" else mean)(loss)
    want = (x.shape[0],) + tuple(x.shape[2:])
    if y.shape != want:
        raise ValueError(f"cross_entropy: labels of shape {y.shape} do not match logits of shape "
                         f"{x.shape}; expected class indices of shape {want} (or probabilities "
                         f"of shape {x.shape})")
    if x.ndim == 2:
        return _C.cross_entropy(x, y, reduction)
    m = int(np.prod(want))  # (N, C, d...) -> (N * d..., C): classes last, one row per position
    rows = _C.reshape(_C.permute(x, [0, *range(2, x.ndim), 1]), [m, x.shape[1]])
    out = _C.cross_entropy(rows, _C.reshape(y, [m]), reduction)
    return _C.reshape(out, list(want)) if reduction == "none" else out


def _two(v, name: str) -> tuple[int, int]:
    if isinstance(v, (numbers.Integral, np.integer)):
        return int(v), int(v)
    v = tuple(v)
    if len(v) != 2:
        raise ValueError(f"{name} must be an int or a pair (h, w), got {v!r}")
    return int(v[0]), int(v[1])


def conv2d(x, w, b=None, stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0,
           groups: int = 1) -> Tensor:
    """2-D convolution (cross-correlation, as torch's) of NCHW ``x`` with (K, C / groups, KH, KW) ``w``.

    Parameters:
        x: the input, (N, C, H, W), float32 or float64.
        w: the kernels, (K, C / groups, KH, KW).
        b: an optional bias of shape (K,).
        stride, padding: an int or a pair (h, w); the padding is zeros on both sides.
        groups: split the channels into this many independent convolutions, as torch's: output
            channels ``[q*K/groups, (q+1)*K/groups)`` see input channels ``[q*C/groups, (q+1)*C/groups)``
            only. ``groups=C`` with ``K = m*C`` is a depthwise convolution (channel multiplier m).

    Returns the (N, K, OH, OW) output; ``OH = (H + 2*padding - KH) // stride + 1``.

    Raises ValueError for shapes that do not fit (the weight's channels times ``groups`` must be
    C, and ``groups`` must divide K), a negative padding, a stride below 1 or a kernel larger than
    the padded input; TypeError for a non-floating input.

    Example:
        >>> x = nx.randn(8, 32, 28, 28)
        >>> depthwise = nx.randn(32, 1, 3, 3)
        >>> nx.conv2d(x, depthwise, padding=1, groups=32).shape
        (8, 32, 28, 28)
    """
    sh, sw = _two(stride, "conv2d: stride")
    ph, pw = _two(padding, "conv2d: padding")
    if not isinstance(groups, (numbers.Integral, np.integer)) or isinstance(groups, bool):
        raise TypeError(f"conv2d: groups must be an int, got {type(groups).__name__}")
    return _C.conv2d(_as_tensor(x), _as_tensor(w), None if b is None else _as_tensor(b), sh, sw, ph, pw, int(groups))


def _pool_args(kernel_size, stride, name):
    kh, kw = _two(kernel_size, f"{name}: kernel_size")
    sh, sw = (kh, kw) if stride is None else _two(stride, f"{name}: stride")
    return kh, kw, sh, sw


def max_pool2d(x, kernel_size, stride=None) -> Tensor:
    return _C.max_pool2d(_as_tensor(x), *_pool_args(kernel_size, stride, "max_pool2d"))


def avg_pool2d(x, kernel_size, stride=None) -> Tensor:
    return _C.avg_pool2d(_as_tensor(x), *_pool_args(kernel_size, stride, "avg_pool2d"))


def dropout(x, p: float = 0.5, training: bool = True) -> Tensor:
    """Inverted dropout: zeroes each element with probability ``p``, scales the rest by 1/(1-p).

    ``p`` in [0, 1] (ValueError otherwise); ``p=1`` gives ``x * 0`` (all zeros, as torch), and
    ``training=False`` or ``p=0`` returns ``x``. Example: ``nx.dropout(nx.ones(4), p=1.0)``.
    """
    return _C.dropout(_as_tensor(x), float(p), bool(training))


def layer_norm(x, normalized_shape, weight=None, bias=None, eps: float = 1e-5) -> Tensor:
    shape = [int(normalized_shape)] if isinstance(normalized_shape, numbers.Integral) else _shape((normalized_shape,))
    opt = [None if t is None else _as_tensor(t) for t in (weight, bias)]
    return _C.layer_norm(_as_tensor(x), shape, *opt, float(eps))


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training: bool = False,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Batch normalisation over (N, C, ...), as torch's; updates running stats in place when training."""
    opt = [None if t is None else _as_tensor(t) for t in (running_mean, running_var, weight, bias)]
    return _C.batch_norm(_as_tensor(x), *opt, bool(training), float(momentum), float(eps))


__all__ = [
    "tensor", "from_numpy", "from_dlpack", "zeros", "ones", "full", "arange", "rand", "randn",
    "manual_seed", "add", "sub", "mul", "div", "floor_divide", "remainder", "pow", "maximum",
    "minimum", "eq", "ne", "lt",
    "le", "gt", "ge", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "erf", "sin", "cos",
    "abs", "neg", "where", "sum", "mean", "max", "min", "argmax", "var", "logsumexp", "softmax",
    "log_softmax", "reshape", "transpose", "permute", "expand", "concat", "stack", "matmul",
    "cross_entropy", "conv2d", "max_pool2d", "avg_pool2d", "dropout", "layer_norm", "batch_norm",
]
