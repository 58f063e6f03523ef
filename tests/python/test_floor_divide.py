"""`//` and `%` (floor_divide, remainder) and integer `**` at the edges, against numpy.

The layout, broadcasting and dtype sweeps run with the other binary ops in test_elementwise.py;
here: signed zeros, inf and nan, zero divisors, INT_MIN // -1, weak Python scalars, gradients,
and the fused kernels (compiled and interpreted) against the eager ops.

PyTorch's behaviour, which these follow where numpy has none: torch.floor_divide and
torch.remainder round toward -inf and give the divisor's sign like numpy; integer division or
remainder by zero raises (RuntimeError "ZeroDivisionError"; here Python's ZeroDivisionError,
numpy returns 0 with a warning); `torch.tensor([2]) ** -1` raises "Integers to negative integer
powers are not allowed." (numpy raises ValueError with the same words).
"""

import importlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest

import nexus as nx
from gradcheck import gradcheck
from nexus import _C

INTS = ["int32", "int64"]
FLOATS = ["float32", "float64"]
OPS = {"floor_divide": np.floor_divide, "remainder": np.remainder}

EDGE_A = [-7.5, 7.5, -7.5, 7.5, -0.0, 0.0, -0.0, 1.0, -1.0, 0.0, np.inf, -np.inf, np.nan, 5.0,
          -5.0, 5.0, 1e30, -3.0, 3.0, 6.0]
EDGE_B = [2.0, -2.0, -2.0, 2.0, 3.0, -3.0, -3.0, 0.0, 0.0, 0.0, 2.0, 2.0, 1.0, np.inf, np.inf,
          -np.inf, 3.0, 3.0, -3.0, 3.0]


def same_floats(got, want):
    """Equal values, nan where nan, and the same sign on zeros (-0.0 is not 0.0 here)."""
    np.testing.assert_array_equal(got, want)
    zeros = want == 0
    np.testing.assert_array_equal(np.signbit(got[zeros]), np.signbit(want[zeros]))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_float_edges_match_numpy(op, dtype):
    a, b = np.array(EDGE_A, dtype), np.array(EDGE_B, dtype)
    with np.errstate(all="ignore"):
        want = OPS[op](a, b)
    got = getattr(nx, op)(nx.tensor(a), nx.tensor(b))
    assert got.dtype == dtype
    same_floats(got.numpy(), want)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("op", sorted(OPS))
def test_integer_edges_match_numpy(op, dtype):
    info = np.iinfo(dtype)
    a = np.array([-7, 7, -7, 7, 0, 6, -6, info.min, info.min, info.max, info.max, info.min, 1],
                 dtype)
    b = np.array([2, -2, -2, 2, -5, 3, 3, -1, 1, -1, info.min, info.max, info.min], dtype)
    with np.errstate(over="ignore"):  # numpy wraps INT_MIN // -1 to INT_MIN, with a warning
        want = OPS[op](a, b)
    got = getattr(nx, op)(nx.tensor(a), nx.tensor(b))
    assert got.dtype == dtype
    np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("divide", [
    lambda a, b: a // b, lambda a, b: a % b, nx.floor_divide, nx.remainder,
    lambda a, b: 7 // b, lambda a, b: a // 0, lambda a, b: a % 0,
], ids=["//", "%", "floor_divide", "remainder", "int//t", "t//0", "t%0"])
def test_integer_division_by_zero_raises_zero_division_error(divide, dtype):
    a = nx.tensor(np.array([3, 4, 5], dtype))
    b = nx.tensor(np.array([1, 0, 2], dtype))
    with pytest.raises(ZeroDivisionError, match="integer division by zero"):
        divide(a, b)


def test_float_division_by_zero_gives_inf_and_nan():
    a, b = nx.tensor([1.0, -1.0, 0.0]), nx.tensor([0.0, 0.0, 0.0])
    assert (a // b).tolist()[:2] == [np.inf, -np.inf] and np.isnan((a // b).tolist()[2])
    assert np.isnan((a % b).numpy()).all()


@pytest.mark.parametrize("dtype", INTS)
def test_python_scalars_are_weak(dtype):
    x = np.array([-7, -1, 0, 5, 9], dtype)
    t = nx.tensor(x)
    for got, want in [(t // 2, x // 2), (t % 3, x % 3), (t % -3, x % -3), (20 // (t + 10),
                      20 // (x + 10)), (17 % (t + 10), 17 % (x + 10))]:
        assert got.dtype == dtype
        np.testing.assert_array_equal(got.numpy(), want)
    for got, want in [(t // 2.5, x // np.float32(2.5)), (t % 2.5, x % np.float32(2.5))]:
        assert got.dtype == nx.float32  # int tensor with a float scalar: float32, as torch
        np.testing.assert_array_equal(got.numpy(), want)


@pytest.mark.parametrize("op", sorted(OPS))
def test_bool_operands_raise_type_error(op):
    with pytest.raises(TypeError, match="not supported for bool"):
        getattr(nx, op)(nx.tensor([True, False]), nx.tensor([True, True]))


# --------------------------------------------------------------------------- integer pow

@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("exponent", [-1, [2, -1, 0]], ids=["scalar", "array"])
def test_integer_to_a_negative_integer_power_raises_like_numpy(exponent, dtype):
    base = np.array([2, 3, 4], dtype)
    with pytest.raises(ValueError, match="negative integer powers are not allowed"):
        base ** np.asarray(exponent, dtype)  # numpy's own behaviour, kept in view
    e = exponent if isinstance(exponent, int) else nx.tensor(np.array(exponent, dtype))
    with pytest.raises(ValueError, match="negative integer powers are not allowed"):
        nx.tensor(base) ** e
    with pytest.raises(ValueError, match="negative integer powers are not allowed"):
        nx.pow(nx.tensor(base), e)


def test_integer_powers_that_exist_and_float_bases_still_work():
    np.testing.assert_array_equal((nx.tensor([2, 3, -2]) ** nx.tensor([3, 0, 1])).numpy(),
                                  np.array([8, 1, -2]))
    np.testing.assert_allclose((nx.tensor([2.0, 4.0]) ** -1).numpy(), [0.5, 0.25])
    np.testing.assert_allclose((nx.tensor([2, 4]) ** -1.0).numpy(), [0.5, 0.25])  # float32


# --------------------------------------------------------------------------- gradients

def test_remainder_gradient_matches_finite_differences():
    # away from the jumps at multiples of b: d/da = 1, d/db = -floor(a / b)
    a = np.array([[5.3, -5.3, 0.4], [7.9, -2.2, 3.1]])
    b = np.array([2.0, 2.5, -1.5])
    gradcheck(nx.remainder, [a, b])
    gradcheck(lambda x: x % 1.5, [a])


def test_floor_divide_gradient_is_zero_as_torch():
    a = nx.tensor([[5.3, -5.3], [0.4, 7.9]], dtype="float64", requires_grad=True)
    b = nx.tensor([2.0, -1.5], dtype="float64", requires_grad=True)
    (a // b * 3.0).sum().backward()
    np.testing.assert_array_equal(a.grad.numpy(), np.zeros((2, 2)))
    np.testing.assert_array_equal(b.grad.numpy(), np.zeros(2))


# --------------------------------------------------------------------------- fused kernels

def floor_then_remainder(a, b, dtype):
    """A graph computing q = a // b and r = q % b; returns (graph, q, r)."""
    K, B = _C.OpKind, _C.BinaryOp
    g = _C.Graph()
    x = g.add_input("a", list(a.shape), getattr(_C.DType, dtype))
    y = g.add_input("b", list(b.shape), getattr(_C.DType, dtype))
    q = g.node_output(g.add_node(K.binary, [x, y], "q", binary=B.floor_divide))
    r = g.node_output(g.add_node(K.binary, [q, y], "r", binary=B.remainder))
    g.infer_shapes()  # shape inference runs on placeholder zeros: it must not divide by them
    return g, q, r


def fused_floor_then_remainder(a, b, dtype):
    """(a // b) % b as one fused kernel (C++ when a compiler is found, else the interpreter)."""
    g, q, r = floor_then_remainder(a, b, dtype)
    groups = list(_C.codegen.compile_plan(g, [q, r]).groups)
    assert len(groups) == 1
    program = groups[0].program
    assert "floor_divide" in program.source("cpp") and "remainder_" in program.source("cuda")
    return program.run([nx.tensor(a), nx.tensor(b)], list(groups[0].consts))


def fused_cases():
    for dtype in FLOATS:
        yield dtype, np.array(EDGE_A, dtype), np.array(EDGE_B, dtype)
    for dtype in INTS:
        info = np.iinfo(dtype)
        yield dtype, np.array([-7, 7, 0, info.min, 9, 1], dtype), np.array([2, -2, 3, -1, 4, 1],
                                                                            dtype)


@pytest.mark.parametrize("case", list(fused_cases()), ids=lambda c: c[0])
def test_fused_kernel_gives_the_eager_ops_bits(case):
    dtype, a, b = case
    q, r = fused_floor_then_remainder(a, b, dtype)
    eager_q = nx.floor_divide(nx.tensor(a), nx.tensor(b))
    same_floats(q.numpy(), eager_q.numpy())
    same_floats(r.numpy(), nx.remainder(eager_q, nx.tensor(b)).numpy())


def test_cuda_dialect_compiles_to_ptx():
    jit_module = importlib.import_module("nexus.jit")
    try:
        nx._C.codegen.nvrtc_version(jit_module.nvrtc_candidates())
    except ValueError:
        pytest.skip("needs NVRTC: pip install nvidia-cuda-nvrtc-cu12")
    for dtype, a, b in fused_cases():
        g, _, r = floor_then_remainder(a, b, dtype)
        program = _C.codegen.compile_plan(g, [r]).groups[0].program
        ptx = nx._C.codegen.ptx(program, "compute_80", jit_module.nvrtc_candidates())
        assert f".entry {program.name}" in ptx


def test_interpreter_gives_the_eager_ops_bits(private_kernel_cache):
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {os.path.dirname(__file__)!r})\n"
        "import numpy as np, nexus as nx\n"
        "import test_floor_divide as t\n"
        "for case in t.fused_cases():\n"
        "    t.test_fused_kernel_gives_the_eager_ops_bits(case)\n"
        "print(json.dumps(nx._C.codegen.config()['jit_enabled']))\n")
    env = {**os.environ, "NEXUS_JIT": "0", "NEXUS_CACHE_DIR": str(private_kernel_cache)}
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=300, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) is False
