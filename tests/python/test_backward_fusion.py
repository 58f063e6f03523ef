"""The generated backward is elementwise IR that the fusion pass groups: random chains of
broadcasting, mixed-dtype elementwise ops train with the gradients eager autograd computes, fused
and unfused, and the backward's chains run as fused kernels."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus import _C

K, U, B = _C.OpKind, _C.UnaryOp, _C.BinaryOp
UNARY = ["tanh", "sigmoid", "gelu", "relu", "sin", "cos", "abs", "neg", "exp_tanh", "log_sigmoid",
         "sqrt_sigmoid"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div", "pow"]
FEATURES, CLASSES = 6, 3


class GraphSide:
    """Builds the chain as graph nodes (what GraphBuilder layers do)."""

    def __init__(self, dtype):
        self.g = _C.Graph()
        self.dtype = dtype

    def unary(self, op, x):
        return self.g.add_node(K.unary, [x], "chain", unary=getattr(U, op))

    def binary(self, op, x, y):
        return self.g.add_node(K.binary, [x, y], "chain", binary=getattr(B, op))

    def const(self, v):
        return self.g.add_traced(K.const, [], "chain", U.neg, B.add, [], [v], "none", False, [],
                                 getattr(_C.DType, self.dtype))


class EagerSide:
    """The same chain on eager tensors with autograd's tape."""

    def __init__(self, dtype):
        self.dtype = dtype

    def unary(self, op, x):
        return getattr(nx, op)(x)

    def binary(self, op, x, y):
        return getattr(nx, op)(x, y) if op in ("maximum", "minimum", "pow") else {
            "add": x + y, "sub": x - y, "mul": x * y, "div": x / y}[op]

    def const(self, v):
        return nx.tensor(np.array(v, self.dtype))


def chain(side, values, program):
    """Runs a program of (op, i, j) over values[0] (the batch) and the params; values bounded so
    that every op's gradient is finite. Returns the sum of every value the chain produced."""
    vals = list(values)
    batch = [0]  # values with the batch dimension: unary ops and binary left operands
    for op, i, j in program:
        x = vals[batch[i % len(batch)]]
        y = vals[j % len(vals)]
        if op in ("exp_tanh", "log_sigmoid", "sqrt_sigmoid"):
            outer, inner = op.split("_")
            out = side.unary(outer, side.unary(inner, x))
        elif op in UNARY:
            out = side.unary(op, x)
        elif op == "div":  # a denominator in [0.5, 1.5]
            out = side.binary("div", x, side.binary("add", side.unary("sigmoid", y), side.const(0.5)))
        elif op == "pow":  # a positive base
            out = side.binary("pow", side.binary("add", side.unary("sigmoid", x), side.const(0.5)),
                              side.unary("tanh", y))
        else:
            out = side.binary(op, x, y)
        vals.append(out)
        batch.append(len(vals) - 1)
    total = vals[batch[0]]
    for k in batch[1:]:
        total = side.binary("add", total, vals[k])
    return total


def make_case(seed, dtype, param_dtype):
    rng = np.random.default_rng(seed)
    ops = UNARY + BINARY
    program = [(ops[rng.integers(len(ops))], int(rng.integers(100)), int(rng.integers(100))) for _ in range(10)]
    program[:3] = [("mul", 0, 1), ("add", 0, 2), ("sub", 0, 3)]  # every param is used
    params = {
        "row": rng.standard_normal(FEATURES).astype(param_dtype),           # broadcast over the batch
        "keep": rng.standard_normal((1, FEATURES)).astype(param_dtype),     # a kept size-1 dim
        "scalar": rng.standard_normal(1).astype(dtype),                     # over every element
        "w": (rng.standard_normal((FEATURES, CLASSES)) * 0.5).astype(dtype),
    }
    return program, params


def compiled(program, params, dtype, fuse):
    side = GraphSide(dtype)
    g = side.g
    x = g.add_input("x", [_C.kBatch, FEATURES], getattr(_C.DType, dtype))
    labels = g.add_input("labels", [_C.kBatch], _C.DType.int64)
    p = [g.add_param(n, list(v.shape), getattr(_C.DType, str(v.dtype))) for n, v in params.items()]
    h = chain(side, [x, p[0], p[1], p[2]], program)
    logits = g.add_node(K.matmul, [h, p[3]], "head")
    g.output = logits
    g.loss = g.add_node(K.cross_entropy, [logits, labels], "loss", reduce="mean")
    g.infer_shapes()
    return _C.CompiledModel(g, [nx.tensor(v) for v in params.values()], [], fuse)


def eager(program, params, dtype, x, y):
    P = {n: nx.tensor(v, requires_grad=True) for n, v in params.items()}
    h = chain(EagerSide(dtype), [nx.tensor(x), P["row"], P["keep"], P["scalar"]], program)
    loss = nx.cross_entropy(h @ P["w"], nx.tensor(y))
    loss.backward()
    return loss.item(), {n: p.grad.numpy() for n, p in P.items()}


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("dtype, param_dtype", [("float64", "float64"), ("float64", "float32")])
def test_random_chains_get_eager_gradients_fused_and_unfused(seed, dtype, param_dtype):
    program, params = make_case(seed, dtype, param_dtype)
    rng = np.random.default_rng(100 + seed)
    x, y = rng.standard_normal((9, FEATURES)).astype(dtype), rng.integers(0, CLASSES, 9)
    ref_loss, ref = eager(program, params, dtype, x, y)
    for fuse in (True, False):
        model = compiled(program, params, dtype, fuse)
        loss = model.forward_backward(nx.tensor(x), nx.tensor(y))
        assert loss == pytest.approx(ref_loss, rel=1e-12), program
        for name, grad in zip(params, model.grads):
            assert grad.numpy().dtype == params[name].dtype  # the gradient comes back in the param's dtype
            tol = 1e-10 if params[name].dtype == np.float64 else 1e-5
            np.testing.assert_allclose(grad.numpy(), ref[name], rtol=tol, atol=tol,
                                       err_msg=f"{name}, fuse={fuse}, {program}")


def test_backward_chains_run_as_fused_kernels():
    program = [("mul", 0, 1), ("add", 0, 2), ("tanh", 2, 0), ("gelu", 3, 0), ("mul", 4, 3)]
    params = make_case(0, "float32", "float32")[1]
    model = compiled(program, params, "float32", True)
    dump = model.dump()
    backward_start = dump.index("ones_like")
    first_backward = int(dump[:backward_start].strip().splitlines()[-1].split(":")[0]) + 1
    groups = model.fusion_groups(32)
    backward = [g for g in groups if min(g["nodes"]) >= first_backward]
    assert backward, "the backward's elementwise rules should form fused groups"
    # a multi-op backward kernel reads and writes fewer bytes than its ops one by one
    assert any(g["ops"] > 1 and g["bytes_fused"] < g["bytes_unfused"] for g in backward)
    assert any("tanh_grad" in g["kernel"] or "gelu_grad" in g["kernel"] for g in backward)
