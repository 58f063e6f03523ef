"""Every op a graph can hold has a graph rule: a compiled model whose layers are reductions, views,
the softmax family, var, where, casts and index_select trains with the gradients eager autograd
computes, fused and unfused (the same op chain built as graph nodes and run on eager tensors)."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus import _C

K, U, B = _C.OpKind, _C.UnaryOp, _C.BinaryOp
F64 = _C.DType.float64
BATCH, ROWS, FEATURES, TABLE = 3, 4, 6, 5
REDUCE = {"sum": "sum", "mean": "mean", "amax": "max", "amin": "min"}


class GraphOps:
    """The ops as graph nodes (what nx.jit records), shapes left to shape inference."""

    def __init__(self):
        self.g = _C.Graph()

    def _node(self, kind, inputs, ints=(), floats=(), reduce="none", keepdims=False, dtype=F64):
        return self.g.add_traced(kind, list(inputs), "op", U.neg, B.add, list(ints), list(floats), reduce,
                                 keepdims, [], dtype)

    def matmul(self, a, b):
        return self._node(K.matmul, [a, b])

    def binary(self, op, a, b):
        return self.g.add_node(K.binary, [a, b], "op", binary=getattr(B, op))

    def reduce(self, op, x, axes, keepdims=False):
        return self._node(K.reduce, [x], axes, reduce=REDUCE[op], keepdims=keepdims)

    def var(self, x, axes, keepdims, ddof):
        return self._node(K.var, [x], axes, [ddof], keepdims=keepdims)

    def logsumexp(self, x, axes, keepdims):
        return self._node(K.logsumexp, [x], axes, keepdims=keepdims)

    def softmax(self, x, axis):
        return self._node(K.softmax, [x], [axis])

    def log_softmax(self, x, axis):
        return self._node(K.log_softmax, [x], [axis])

    def permute(self, x, dims):
        return self._node(K.permute, [x], dims)

    def expand(self, x, shape):
        return self._node(K.expand, [x], shape)

    def slice(self, x, axis, start, stop, step):
        return self._node(K.slice, [x], [axis, start, stop, step])

    def select(self, x, axis, index):
        return self._node(K.select, [x], [axis, index])

    def unsqueeze(self, x, axis):
        return self._node(K.unsqueeze, [x], [axis])

    def concat(self, xs, axis):
        return self._node(K.concat, xs, [axis])

    def stack(self, xs, axis):
        return self._node(K.stack, xs, [axis])

    def where(self, c, a, b):
        return self._node(K.where, [c, a, b])

    def astype(self, x, dtype):
        return self._node(K.cast, [x], dtype=dtype)

    def contiguous(self, x):
        return self._node(K.contiguous, [x], [0])

    def index_select(self, x, index):
        return self._node(K.index_select, [x, index])


class EagerOps:
    """The same ops on eager tensors with autograd's tape."""

    def matmul(self, a, b):
        return _C.matmul(a, b)

    def binary(self, op, a, b):
        return _C.binary(getattr(B, op), a, b)

    def reduce(self, op, x, axes, keepdims=False):
        return getattr(_C, op)(x, axes, keepdims)

    def var(self, x, axes, keepdims, ddof):
        return _C.var(x, axes, keepdims, ddof)

    def logsumexp(self, x, axes, keepdims):
        return _C.logsumexp(x, axes, keepdims)

    def softmax(self, x, axis):
        return _C.softmax(x, axis)

    def log_softmax(self, x, axis):
        return _C.log_softmax(x, axis)

    def permute(self, x, dims):
        return _C.permute(x, dims)

    def expand(self, x, shape):
        return _C.expand(x, shape)

    def slice(self, x, axis, start, stop, step):
        return _C.slice(x, axis, start, stop, step)

    def select(self, x, axis, index):
        return _C.select(x, axis, index)

    def unsqueeze(self, x, axis):
        return _C.unsqueeze(x, axis)

    def concat(self, xs, axis):
        return _C.concat(xs, axis)

    def stack(self, xs, axis):
        return _C.stack(xs, axis)

    def where(self, c, a, b):
        return _C.where(c, a, b)

    def astype(self, x, dtype):
        return _C.astype(x, dtype)

    def contiguous(self, x):
        return _C.contiguous(x)

    def index_select(self, x, index):
        return _C.index_select(x, index)


def rows(o, v):
    """(batch, rows, features) -> (batch, features)."""
    return o.reduce("sum", v, [1])


# Each case maps h = x @ w (batch, rows, features), the params p (1, features) and table
# (TABLE, features) and the labels to (batch, classes) logits.
CASES = {
    "sum": lambda o, h, p, t, y: rows(o, h),
    # over every axis: shape inference labels dim 0 of a partial reduction's result the batch
    "mean_over_the_batch": lambda o, h, p, t, y: rows(o, o.binary(
        "add", h, o.reduce("mean", o.binary("mul", h, h), [0, 1, 2], False))),
    "amax": lambda o, h, p, t, y: o.reduce("amax", h, [1]),
    "amin_keepdims": lambda o, h, p, t, y: o.select(o.reduce("amin", h, [-2], True), 1, 0),
    "softmax": lambda o, h, p, t, y: o.softmax(rows(o, h), -1),
    "log_softmax": lambda o, h, p, t, y: o.log_softmax(rows(o, h), 1),
    "logsumexp": lambda o, h, p, t, y: o.logsumexp(h, [2], False),
    "var": lambda o, h, p, t, y: o.var(h, [1], False, 1),
    "var_over_the_batch": lambda o, h, p, t, y: o.binary("add", rows(o, h), o.var(h, [0, 1, 2], False, 0)),
    "permute_contiguous": lambda o, h, p, t, y: o.reduce("sum", o.contiguous(o.permute(h, [0, 2, 1])), [2]),
    "expand": lambda o, h, p, t, y: rows(o, o.binary("mul", h, o.expand(p, [ROWS, FEATURES]))),
    "slice": lambda o, h, p, t, y: rows(o, o.slice(h, 1, 1, ROWS, 2)),
    "select_last": lambda o, h, p, t, y: o.select(h, 1, -1),
    "unsqueeze": lambda o, h, p, t, y: rows(o, o.unsqueeze(rows(o, h), 1)),
    "concat": lambda o, h, p, t, y: rows(o, o.concat([h, o.binary("mul", h, h)], 2)),
    "stack": lambda o, h, p, t, y: o.reduce("sum", o.stack([h, o.binary("mul", h, h)], 1), [1, 2]),
    "where": lambda o, h, p, t, y: rows(o, o.where(o.binary("gt", h, p), h, o.binary("mul", h, h))),
    "cast": lambda o, h, p, t, y: rows(o, o.astype(o.astype(h, _C.DType.float32), F64)),
    "index_select": lambda o, h, p, t, y: o.binary("add", rows(o, h), o.index_select(t, y)),
}


def params(seed):
    rng = np.random.default_rng(seed)
    return {"w": rng.standard_normal((FEATURES, FEATURES)), "p": rng.standard_normal((1, FEATURES)),
            "t": rng.standard_normal((TABLE, FEATURES))}


def compiled(case, values, fuse):
    o = GraphOps()
    g = o.g
    x = g.add_input("x", [_C.kBatch, ROWS, FEATURES], F64)
    y = g.add_input("labels", [_C.kBatch], _C.DType.int64)
    w, p, t = (g.add_param(n, list(v.shape), F64) for n, v in values.items())
    logits = CASES[case](o, o.matmul(x, w), p, t, y)
    g.output = logits
    g.loss = o._node(K.cross_entropy, [logits, y], reduce="mean")
    g.infer_shapes()
    return _C.CompiledModel(g, [nx.tensor(v) for v in values.values()], [], fuse)


def eager(case, values, x, y):
    P = {n: nx.tensor(v, requires_grad=True) for n, v in values.items()}
    o = EagerOps()
    labels = nx.tensor(y)
    logits = CASES[case](o, _C.matmul(nx.tensor(x), P["w"]), P["p"], P["t"], labels)
    loss = _C.cross_entropy(logits, labels, "mean")
    loss.backward()
    return loss.item(), {n: t.grad for n, t in P.items()}


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_compiled_gradients_of_every_rule_equal_eager_autograd(case, fuse):
    values = params(seed=len(case))
    rng = np.random.default_rng(7)
    model = compiled(case, values, fuse)
    for batch in (BATCH, 1):  # one graph, any batch size (a batch axis has no size until run time)
        x, y = rng.standard_normal((batch, ROWS, FEATURES)), rng.integers(0, TABLE, batch)
        loss = model.forward_backward(nx.tensor(x), nx.tensor(y))
        ref_loss, ref_grads = eager(case, values, x, y)
        assert loss == pytest.approx(ref_loss, rel=1e-12)
        for name, grad in zip(values, model.grads):
            ref = ref_grads[name]
            if ref is None:  # the case does not use this param
                continue
            np.testing.assert_allclose(grad.numpy(), ref.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_a_node_without_a_rule_is_refused_by_name():
    o = GraphOps()
    g = o.g
    x = g.add_input("x", [_C.kBatch, FEATURES], F64)
    y = g.add_input("labels", [_C.kBatch], _C.DType.int64)
    w = g.add_param("w", [FEATURES, FEATURES], F64)
    h = g.add_traced(K.opaque, [o.matmul(x, w)], "mystery", U.neg, B.add, [], [], "none", False,
                     [_C.kBatch, FEATURES], F64)
    g.output = h
    g.loss = o._node(K.cross_entropy, [h, y], reduce="mean")
    with pytest.raises(ValueError, match="layer 'mystery' \\(opaque\\): no derivative"):
        _C.CompiledModel(g, [nx.tensor(np.eye(FEATURES))], [], True)
