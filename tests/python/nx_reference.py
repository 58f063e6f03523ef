"""Numpy reference implementations and comparison helpers shared by the tensor runtime tests.

Everything here is written from the API contract, never from the Nexus sources: the references are
the definitions the runtime is checked against (STYLE habit 7).
"""

import math

import numpy as np

import nexus as nx

# Tolerances. float32: most ops rtol 1e-5; transcendental ops rtol 2e-5. The half types are
# computed in float32 and rounded once, so two units in the last place of the half type is enough.
TOL = {
    "float32": {"rtol": 1e-5, "atol": 1e-6},
    "float64": {"rtol": 1e-10, "atol": 1e-12},
    "float16": {"rtol": 2e-3, "atol": 1e-3},
    "bfloat16": {"rtol": 1.6e-2, "atol": 1e-2},
}
TRANSCENDENTAL_TOL = dict(TOL, float32={"rtol": 2e-5, "atol": 1e-6})

NUMPY_DTYPE = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "bfloat16": np.float32,  # numpy has no bfloat16; values travel as float32
    "int32": np.int32,
    "int64": np.int64,
    "bool": np.bool_,
}


def nx_dtype(name):
    return getattr(nx, name)


def bf16_round(x):
    """Round float values to the nearest bfloat16 (ties to even); returns float32."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16 << 16
    return rounded.astype(np.uint32).view(np.float32).reshape(np.shape(x))


def round_to(x, dtype):
    """Values of `x` after storing them as `dtype` (float64 array)."""
    x = np.asarray(x, dtype=np.float64)
    if dtype == "bfloat16":
        return bf16_round(x.astype(np.float32)).astype(np.float64)
    return x.astype(NUMPY_DTYPE[dtype]).astype(np.float64)


def make(arr, dtype):
    """A contiguous Nexus tensor of `dtype` holding `arr`."""
    arr = np.asarray(arr)
    if dtype == "bfloat16":
        return nx.tensor(np.array(arr, dtype=np.float32, order="C"), dtype=nx.bfloat16)
    return nx.tensor(np.array(arr, dtype=NUMPY_DTYPE[dtype], order="C"))


def to_numpy(t):
    """The values of a tensor as a numpy array (bfloat16 goes through float32)."""
    if t.dtype == nx.bfloat16:
        t = t.astype(nx.float32)
    return np.asarray(t.numpy())


def check(t, ref, dtype, tol=TOL):
    """Assert tensor `t` has `ref`'s shape, the given dtype name and `ref`'s values."""
    ref = np.asarray(ref)
    assert tuple(t.shape) == ref.shape, f"shape {tuple(t.shape)} != {ref.shape}"
    assert t.dtype == nx_dtype(dtype), f"dtype {t.dtype} != {dtype}"
    got = to_numpy(t)
    if dtype == "bool" or dtype.startswith("int"):
        np.testing.assert_array_equal(got, ref)
    else:
        np.testing.assert_allclose(got.astype(np.float64), ref.astype(np.float64), **tol[dtype])


# --------------------------------------------------------------------------- elementwise

def sigmoid(x):
    with np.errstate(over="ignore"):
        return np.where(x >= 0, 1.0 / (1.0 + np.exp(-x)), np.exp(x) / (1.0 + np.exp(x)))


def gelu_tanh(x):
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x**3)))


UNARY_REF = {
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "tanh": np.tanh,
    "sigmoid": sigmoid,
    "relu": lambda x: np.maximum(x, 0),
    "gelu": gelu_tanh,
    "sin": np.sin,
    "cos": np.cos,
    "abs": np.abs,
    "erf": np.vectorize(math.erf, otypes=[np.float64]),
    "neg": np.negative,
}


# --------------------------------------------------------------------------- reductions

def logsumexp(x, axis=None, keepdims=False):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    if not keepdims:
        out = np.squeeze(out, axis=axis) if axis is not None else out.reshape(())
    return out


def softmax(x, axis=-1):
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(x, axis=-1):
    return x - logsumexp(x, axis=axis, keepdims=True)


# --------------------------------------------------------------------------- nn ops

def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d(x, w, b=None, stride=1, padding=0, groups=1):
    if groups > 1:  # each group: the convolution of its input channels with its kernels
        cg, kg = x.shape[1] // groups, w.shape[0] // groups
        out = np.concatenate([conv2d(x[:, q * cg:(q + 1) * cg], w[q * kg:(q + 1) * kg], None, stride, padding)
                              for q in range(groups)], axis=1)
        return out if b is None else out + np.asarray(b)[None, :, None, None]
    sh, sw = _pair(stride)
    ph, pw = _pair(padding)
    x = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _, h, wd = x.shape
    k, _, kh, kw = w.shape
    oh, ow = (h - kh) // sh + 1, (wd - kw) // sw + 1
    out = np.zeros((n, k, oh, ow), dtype=np.float64)
    for i in range(oh):
        for j in range(ow):
            patch = x[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
            out[:, :, i, j] = np.einsum("nchw,kchw->nk", patch, w)
    if b is not None:
        out += np.asarray(b)[None, :, None, None]
    return out


def _pool(x, kernel_size, stride, reduce):
    kh, kw = _pair(kernel_size)
    sh, sw = _pair(stride if stride is not None else kernel_size)
    n, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    out = np.zeros((n, c, oh, ow), dtype=np.float64)
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(x[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw], axis=(2, 3))
    return out


def max_pool2d(x, kernel_size, stride=None):
    return _pool(x, kernel_size, stride, np.max)


def avg_pool2d(x, kernel_size, stride=None):
    return _pool(x, kernel_size, stride, np.mean)


def cross_entropy(logits, labels, reduction="mean"):
    losses = -log_softmax(logits, axis=1)[np.arange(len(labels)), labels]
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.mean()


def layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5):
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    out = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        out = out * weight
    if bias is not None:
        out = out + bias
    return out


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Returns (output, new_running_mean, new_running_var) as torch F.batch_norm computes them."""
    axes = (0,) + tuple(range(2, x.ndim))
    bshape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training:
        mean = x.mean(axis=axes)
        var = x.var(axis=axes)
        count = x.size // x.shape[1]
        new_mean = (1 - momentum) * running_mean + momentum * mean
        new_var = (1 - momentum) * running_var + momentum * var * count / (count - 1)
    else:
        mean, var = running_mean, running_var
        new_mean, new_var = running_mean, running_var
    out = (x - mean.reshape(bshape)) / np.sqrt(var.reshape(bshape) + eps)
    if weight is not None:
        out = out * np.asarray(weight).reshape(bshape)
    if bias is not None:
        out = out + np.asarray(bias).reshape(bshape)
    return out, new_mean, new_var
