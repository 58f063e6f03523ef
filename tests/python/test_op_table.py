"""Every row of the op table (csrc/ops/op_table.h) against its three paths: the eager kernel, the
interpreter and a compiled fused kernel give the same bits at the edges (nan, signed zeros, inf,
large integers) on every dtype the row's domain accepts, and refuse the others alike. A new row
is checked here without a line of this file changing."""

import functools
import importlib

import numpy as np
import pytest

import nexus as nx
from nexus import _C

K = _C.OpKind
UNARY = list(_C.UnaryOp.__members__.values())
BINARY = list(_C.BinaryOp.__members__.values())
FLOATS = ["float32", "float64", "float16", "bfloat16"]
DTYPES = [*FLOATS, "int32", "int64", "bool"]
FLOAT_EDGES = [np.nan, -0.0, 0.0, np.inf, -np.inf, 1.0, -1.0, 0.5, -2.5, 3.0, 7.0, -7.0, 1e-30,
               -1e30, 88.0, -100.0]


def edges(dtype):
    if dtype == "bool":
        return np.array([False, True])
    if dtype in FLOATS:
        return np.array(FLOAT_EDGES, np.float32)
    # Large, but no +, - or * of two of them overflows: signed overflow is undefined behaviour in
    # C++ (the sanitizer run halts on it); INT_MIN // -1 is test_floor_divide's.
    return np.array([0, 1, -1, 2, -3, 7, -7, 100, 46340, -46340], dtype)


def divisors(op, b):
    """Integer operands the eager front end refuses (it raises before the kernel): zero divisors
    of // and %, negative exponents; the other paths then never see them."""
    if b.dtype.kind != "i":
        return b
    if op.name == "pow":
        return np.where(b < 0, 2, np.minimum(b, 3))
    if op.name in ("floor_divide", "remainder"):
        return np.where(b == 0, 5, b)
    return b


def accepts(op, dtype):
    return op.domain == _C.OpDomain.any or dtype != "bool"


def operands(dtype):
    """Every pair of edge values, as two tensors of one shape (the same for every dtype, so the
    fused graph below is one kernel)."""
    e = np.resize(edges(dtype), len(FLOAT_EDGES))
    a, b = np.repeat(e, len(e)), np.tile(e, len(e))
    return nx.tensor(a).astype(dtype), b


def same_bits(got, want, what):
    assert got.dtype == want.dtype, what
    if got.dtype == nx.bfloat16:  # numpy has no bfloat16; float32 holds it exactly
        got, want = got.astype("float32"), want.astype("float32")
    got, want = got.numpy(), want.numpy()
    np.testing.assert_array_equal(got, want, err_msg=what)  # nan where nan
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]), err_msg=what)


def eager_results():
    """{(op, dtype): the eager result on operands(dtype)} for every op and dtype it accepts."""
    out = {}
    for dtype in DTYPES:
        x, b = operands(dtype)
        for op in UNARY:
            if accepts(op, dtype):
                out[op, dtype] = _C.unary(op, x)
        for op in BINARY:
            if accepts(op, dtype):
                out[op, dtype] = _C.binary(op, x, nx.tensor(divisors(op, b)).astype(dtype))
    return out


def fused_graph():
    """One graph applying every op to inputs of every dtype it accepts:
    (graph, {(op, dtype): value}, {input value: tensor}, the value joining them all)."""
    g = _C.Graph()
    values, feeds = {}, {}
    for dtype in DTYPES:
        x, b = operands(dtype)
        vx = g.add_input(f"x_{dtype}", list(x.shape), getattr(_C.DType, dtype))
        feeds[vx] = x
        ys = {}
        for op in UNARY + BINARY:
            if not accepts(op, dtype):
                continue
            if op in BINARY:
                y = divisors(op, b)
                key = y.tobytes()
                if key not in ys:
                    ys[key] = g.add_input(f"y_{dtype}_{len(ys)}", list(x.shape), getattr(_C.DType, dtype))
                    feeds[ys[key]] = nx.tensor(y).astype(dtype)
                node = g.add_node(K.binary, [vx, ys[key]], op.name, binary=op)
            else:
                node = g.add_node(K.unary, [vx], op.name, unary=op)
            values[op, dtype] = g.node_output(node)
    # A chain adding up every value joins them into one fusion group: one kernel to compile
    # (sibling ops of one input would be a kernel each).
    total = None
    for v in values.values():
        total = v if total is None else g.node_output(g.add_node(K.binary, [total, v], "join", binary=_C.BinaryOp.add))
    g.infer_shapes()
    return g, values, feeds, total


def fused_kernel():
    """The fused graph's one group, its values and its feeds."""
    g, values, feeds, total = fused_graph()
    groups = _C.codegen.compile_plan(g, [*values.values(), total]).groups
    assert len(groups) == 1
    return groups[0], values, feeds


def run_fused():
    """{(op, dtype): the fused kernel's result} (NEXUS_JIT picks compiled or interpreted)."""
    fg, values, feeds = fused_kernel()
    outs = fg.program.run([feeds[v] for v in fg.group.inputs], list(fg.consts))
    got = dict(zip(fg.group.outputs, outs))
    return {key: got[v] for key, v in values.items()}


def test_eager_interpreter_and_compiled_kernel_agree_on_every_op(monkeypatch):
    eager = eager_results()
    compiled = run_fused()  # compiled when a compiler is found, else interpreted
    monkeypatch.setenv("NEXUS_JIT", "0")
    interpreted = run_fused()
    assert set(compiled) == set(interpreted) == set(eager)
    for (op, dtype), want in eager.items():
        same_bits(interpreted[op, dtype], want, f"{op.name} on {dtype}: interpreter vs eager")
        same_bits(compiled[op, dtype], want, f"{op.name} on {dtype}: compiled kernel vs eager")


def test_cuda_dialect_of_every_op_compiles_to_ptx():
    """The device side of each row's kern:: function exists (kernel_ops.h or the CUDA prelude)."""
    jit = importlib.import_module("nexus.jit")
    try:
        _C.codegen.nvrtc_version(jit.nvrtc_candidates())
    except ValueError:
        pytest.skip("needs NVRTC: pip install nvidia-cuda-nvrtc-cu12")
    program = fused_kernel()[0].program
    assert f".entry {program.name}" in _C.codegen.ptx(program, "compute_80", jit.nvrtc_candidates())


@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda op: op.name)
def test_each_op_refuses_exactly_the_dtypes_outside_its_domain(op):
    """Eagerly and in a graph's shape inference (where nx.jit and the GraphBuilder meet it)."""
    t = nx.tensor([True, False])
    g = _C.Graph()
    v = g.add_input("t", [2], _C.DType.bool)
    if op in UNARY:
        call = functools.partial(_C.unary, op, t)
        g.add_node(K.unary, [v], "op", unary=op)
    else:
        call = functools.partial(_C.binary, op, t, t)
        g.add_node(K.binary, [v, v], "op", binary=op)
    if accepts(op, "bool"):
        assert call().dtype == nx.bool
        g.infer_shapes()
    else:
        for refused in (call, g.infer_shapes):
            with pytest.raises(TypeError, match=f"{op.name}: not supported for bool"):
                refused()


@pytest.mark.parametrize("op", UNARY + BINARY, ids=lambda op: op.name)
def test_float_ops_compute_integers_in_float32_and_others_keep_the_dtype(op):
    x = nx.tensor([1, 2, 3], dtype="int32")
    out = _C.unary(op, x) if op in UNARY else _C.binary(op, x, x)
    want = nx.bool if op in BINARY and op.is_comparison else nx.float32 if op.domain == _C.OpDomain.float else nx.int32
    assert out.dtype == want


@pytest.mark.parametrize("op", [op for op in UNARY + BINARY if not op.is_backward_only], ids=lambda op: op.name)
def test_every_public_op_is_an_nx_function(op):
    x = nx.tensor([-1.5, 0.0, 2.0])
    fn = getattr(nx, op.name, None)
    assert fn is not None, f"the op table's public op {op.name} has no nx.{op.name} (python/nexus/functional.py)"
    want = _C.unary(op, x) if op in UNARY else _C.binary(op, x, x)
    same_bits(fn(x) if op in UNARY else fn(x, x), want, op.name)
    if op in UNARY:
        same_bits(getattr(x, op.name)(), want, f"Tensor.{op.name}")
