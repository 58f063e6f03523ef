"""Python-side methods of ``nexus.Tensor``: operators, indexing, conversions, autograd entry.

The class itself is native (``nexus._C.Tensor``); this module attaches what reads better in
Python. Nothing here loops over data.
"""

from __future__ import annotations

import numbers

import numpy as np

from . import _C
from . import functional as F
from ._dtype import as_dtype, bfloat16, float32, from_code

Tensor = _C.Tensor


def _dtype(self):
    return from_code(self._dtype)


def _host_array(self) -> np.ndarray:
    """The values as a numpy array, copied from the device first when there is one."""
    t = self.detach()
    if t.device.type != "cpu":
        t = _C.to_device(t, _C.device("cpu"))
    return (_C.astype(t, float32.code) if t._dtype == bfloat16.code else t).numpy()


def _repr(self) -> str:
    arr = _host_array(self)
    body = np.array2string(arr, separator=", ", prefix="tensor(")
    extra = f", dtype={self.dtype}" if self.dtype != float32 else ""
    if self.device.type != "cpu":
        extra += f", device='{self.device}'"
    grad = f", grad_fn=<{self.grad_fn}>" if self.grad_fn else (", requires_grad=True" if self.requires_grad else "")
    return f"tensor({body}{extra}{grad})"


def _item(self):
    if self.numel() != 1:
        raise ValueError(f"only one-element tensors can be converted to Python scalars, got shape {self.shape}")
    return _host_array(self).reshape(()).item()


def _tolist(self):
    return _host_array(self).tolist()


def _to(self, *args, dtype=None, device=None, copy: bool = False, non_blocking: bool = False):
    """This tensor on another device and/or in another dtype, as ``torch.Tensor.to``:
    ``t.to("cuda")``, ``t.to(nx.float16)``, ``t.to("cuda:1", nx.bfloat16)``, ``t.to(other)``
    (other's device and dtype). Returns ``self`` when nothing changes unless ``copy=True``.
    The result is part of the autograd graph (the gradient goes back to this device).
    ``non_blocking=True``: a copy from pinned memory (:meth:`pin_memory`) to a GPU returns at
    once, queued on the device's current stream (later work there sees the values; write the
    pinned tensor again only after a synchronize); every other copy returns when it is done.

    Raises:
        RuntimeError: the device cannot be used (no CUDA build, driver or GPU).
        TypeError: an argument is neither a device, a dtype nor a tensor.
    """
    for a in args:
        if isinstance(a, Tensor):
            device, dtype = a.device, a.dtype
        elif isinstance(a, (str, _C.device)) and not _is_dtype_name(a):
            device = a
        else:
            dtype = a
    out = self
    if device is not None and F._device(device) != out.device:
        out = _C.to_device(out, F._device(device), bool(non_blocking))
    if dtype is not None and as_dtype(dtype).code != out._dtype:
        out = _C.astype(out, as_dtype(dtype).code)
    return _C.clone(out) if copy and out is self else out


def _is_dtype_name(a) -> bool:
    try:
        as_dtype(a)
        return True
    except (TypeError, ValueError):
        return False


def _cuda(self, device=None, non_blocking: bool = False):
    """This tensor on a CUDA device (``cuda:0`` unless ``device``, an int or a string)."""
    if isinstance(device, int) and not isinstance(device, bool):
        device = f"cuda:{device}"
    return _to(self, device="cuda" if device is None else device, non_blocking=non_blocking)


def _cuda_backend(what: str):
    from . import cuda
    reason = cuda.unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"{what} needs CUDA, which is not available: {reason}")
    return cuda._backend


def _pin_memory(self):
    """A copy of this host tensor in pinned (page-locked) memory, as ``torch.Tensor.pin_memory``:
    a copy from it to a GPU can run asynchronously (``.to("cuda", non_blocking=True)``). Returns
    ``self`` when it is pinned already. Example: ``x.pin_memory().to("cuda", non_blocking=True)``.

    Raises:
        RuntimeError: CUDA is not available (pinning goes through the NVIDIA driver).
        ValueError: the tensor is on a GPU already.
    """
    backend = _cuda_backend("pin_memory()")
    return self if backend.is_pinned(self) else backend.pin_memory(self)


def _is_pinned(self) -> bool:
    """True when this tensor lives in pinned host memory (made by :meth:`pin_memory`)."""
    from . import cuda
    return cuda.is_available() and bool(cuda._backend.is_pinned(self))


def _record_stream(self, stream) -> None:
    """Marks this CUDA tensor as used by work queued on ``stream`` (an ``nx.cuda.Stream`` of its
    device), as ``torch.Tensor.record_stream``: when the tensor is freed, its memory is not
    handed out again before that work has finished. Needed when a tensor allocated under one
    stream (a batch copied on a side stream) is used on another.

    Raises:
        ValueError: the tensor is not on a CUDA device, or ``stream`` is on another device.
    """
    from . import cuda
    if not isinstance(stream, cuda.Stream):
        raise TypeError(f"record_stream expects an nx.cuda.Stream, got {type(stream).__name__}")
    if self.device != stream.device:
        raise ValueError(f"record_stream: the tensor is on {self.device}, the stream on {stream.device}")
    cuda._backend.record_stream(self, stream.handle)


def _cpu(self):
    """This tensor on the host (``self`` when it is there already)."""
    return _to(self, device="cpu")


def _astype(self, dtype, copy: bool = True):
    """This tensor converted to ``dtype``; a copy even for the same dtype unless ``copy=False``."""
    code = as_dtype(dtype).code
    if code == self._dtype:
        return _C.clone(self) if copy else self
    return _C.astype(self, code)


def _len(self) -> int:
    if self.ndim == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def _iter(self):
    for i in range(len(self)):
        yield self[i]


def _backward(self, gradient=None) -> None:
    """Accumulates d(self)/d(leaf) into every leaf's ``.grad``."""
    if gradient is None:
        if self.numel() != 1:
            raise ValueError(
                f"backward: grad can be implicitly created only for one-element outputs; this tensor has "
                f"shape {self.shape}, so pass gradient= of that shape")
        gradient = _C.full(list(self.shape), 1.0, self._dtype, self.device)
    else:
        gradient = F._as_tensor(gradient, self)
        if gradient.dtype != self.dtype:
            gradient = _C.astype(gradient, self._dtype)
    self._backward(gradient)


# ---- indexing ----------------------------------------------------------------------------------


def _is_int(i) -> bool:
    return isinstance(i, (numbers.Integral, np.integer)) and not isinstance(i, (bool, np.bool_))


def _getitem(self, key):
    if isinstance(key, (list, np.ndarray, Tensor)):  # integer-array gather along axis 0
        index = key if isinstance(key, Tensor) else np.asarray(key)
        if isinstance(key, list) and index.size == 0:  # [] selects nothing, as in numpy
            index = index.astype(np.int64)
        index = F.tensor(index) if isinstance(index, np.ndarray) else index
        if index.dtype.name not in ("int32", "int64"):
            raise IndexError(f"only integer arrays are valid indices, got dtype {index.dtype}")
        return _C.index_select(self, index)
    if not isinstance(key, tuple):
        key = (key,)
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    if sum(1 for k in key if k is Ellipsis) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    if n_real > self.ndim:
        raise IndexError(f"too many indices for a tensor of {self.ndim} dimension(s): {n_real} were given")
    out, axis, src_axis = self, 0, 0  # axis in `out`; src_axis in `self`, for messages
    for k in key:
        if k is Ellipsis:
            axis += self.ndim - n_real
            src_axis += self.ndim - n_real
        elif k is None:
            out = _C.unsqueeze(out, axis)
            axis += 1
        elif _is_int(k):
            n = out.shape[axis]
            if not -n <= int(k) < n:
                raise IndexError(f"index {int(k)} is out of bounds for axis {src_axis} with size {n}")
            out = _C.select(out, axis, int(k))
            src_axis += 1
        elif isinstance(k, slice):
            start, stop, step = k.start, k.stop, k.step
            step = 1 if step is None else int(step)
            if step <= 0:
                raise ValueError(f"slice step must be positive, got {step}")
            n = out.shape[axis]
            out = _C.slice(out, axis, 0 if start is None else int(start), n if stop is None else int(stop), step)
            axis += 1
            src_axis += 1
        else:
            raise IndexError(
                f"unsupported index {k!r}: valid indices are ints, slices, None, ... and, as the "
                "whole index, an integer array")
    return out


def _check_in_place(self, value) -> None:
    """Refuses writes that would corrupt or silently drop a gradient (grad mode on)."""
    if not _C.is_grad_enabled():
        return
    if self.requires_grad and self.is_leaf:
        raise RuntimeError(
            "a leaf Variable that requires grad is being used in an in-place operation (as torch "
            "says): assign under `with nx.no_grad():`, or to a copy (`nx.tensor(t)`)")
    if self.requires_grad:
        raise RuntimeError(
            f"in-place assignment into a tensor produced by {self.grad_fn} is not differentiable "
            "in nexus; build the result out of place (nx.where, nx.concat, nx.stack), or assign "
            "under `with nx.no_grad():`")
    if isinstance(value, Tensor) and value.requires_grad:
        raise RuntimeError(
            "assigning a tensor that requires grad into one that does not would drop its "
            "gradient; build the result out of place (nx.where, nx.concat, nx.stack), or pass "
            "value.detach()")


def _setitem(self, key, value) -> None:
    """``t[key] = value``, written into t's storage (its views and a numpy array it shares memory
    with see the change), as numpy: ``key`` is what ``t[key]`` takes (ints, slices, None, ``...``,
    or an integer array along axis 0; a repeated index keeps the last write), ``value`` a number,
    array or tensor that broadcasts to ``t[key]``'s shape and converts to t's dtype. Raises
    RuntimeError for a leaf that requires grad while grad mode is on (as torch), ValueError when
    the value does not broadcast, IndexError for a bad index."""
    _check_in_place(self, value)
    v = F.tensor(value, dtype=self.dtype) if isinstance(value, (np.ndarray, list, tuple)) \
        else F._as_tensor(value, self)
    if isinstance(key, (list, np.ndarray, Tensor)):
        index = key if isinstance(key, Tensor) else F.tensor(np.asarray(key))
        if index.dtype.name not in ("int32", "int64"):
            raise IndexError(f"only integer arrays are valid indices, got dtype {index.dtype}")
        _C.index_copy_(self, index, v)
    else:
        _C.copy_(_getitem(self.detach(), key), v)


def _requires_grad_(self, requires_grad: bool = True):
    """Sets ``requires_grad`` in place and returns this tensor (as torch's ``requires_grad_``)."""
    self.requires_grad = requires_grad
    return self


# ---- methods that forward to nexus.functional ---------------------------------------------------


def _reflected(fn):
    return lambda self, other: fn(other, self)


def _install() -> None:
    T = Tensor
    T.dtype = property(_dtype, doc="The element type (a nexus dtype).")
    T.T = property(lambda self: _C.permute(self, list(range(self.ndim))[::-1]), doc="Reversed dims.")
    T.__repr__ = _repr
    T.item = _item
    T.tolist = _tolist
    T.__float__ = lambda self: float(_item(self))
    T.__int__ = lambda self: int(_item(self))
    T.__bool__ = lambda self: bool(_item(self))
    T.__index__ = lambda self: int(_item(self)) if self.dtype.name in ("int32", "int64") else _no_index(self)
    T.__len__ = _len
    T.__iter__ = _iter
    T.__getitem__ = _getitem
    T.__setitem__ = _setitem
    T.requires_grad_ = _requires_grad_
    T.backward = _backward
    T.astype = _astype
    T.to = _to
    T.cuda = _cuda
    T.pin_memory = _pin_memory
    T.is_pinned = _is_pinned
    T.record_stream = _record_stream
    T.cpu = _cpu
    T.is_cuda = property(lambda self: self.device.type == "cuda", doc="True for a tensor on a CUDA device.")
    T.contiguous = lambda self: _C.contiguous(self)
    T.reshape = F.reshape
    T.view = F.reshape
    T.transpose = F.transpose
    T.permute = F.permute
    T.expand = F.expand
    T.matmul = F.matmul
    T.__hash__ = object.__hash__
    unary = [op.name for op in _C.UnaryOp.__members__.values() if not op.is_backward_only]  # the op table's
    for name in (*unary, "sum", "mean", "max", "min", "argmax", "var", "logsumexp", "softmax", "log_softmax"):
        setattr(T, name, getattr(F, name))
    ops = {"add": F.add, "sub": F.sub, "mul": F.mul, "truediv": F.div, "floordiv": F.floor_divide,
           "mod": F.remainder, "pow": F.pow, "matmul": F.matmul}
    for name, fn in ops.items():
        setattr(T, f"__{name}__", fn)
        setattr(T, f"__r{name}__", _reflected(fn))
    for name, fn in {"eq": F.eq, "ne": F.ne, "lt": F.lt, "le": F.le, "gt": F.gt, "ge": F.ge}.items():
        setattr(T, f"__{name}__", fn)
    T.__neg__ = F.neg
    T.__abs__ = F.abs
    T.__pos__ = lambda self: self
    T.__array_ufunc__ = None  # `ndarray op tensor` defers to our reflected operators


def _no_index(self):
    raise TypeError(f"only integer tensors can be used as an index, got dtype {self.dtype}")


_install()
