"""Type promotion for binary ops, weak Python scalars, and float16/bfloat16 computed in float32."""

import operator

import numpy as np
import pytest

import nexus as nx
from nx_reference import TOL, UNARY_REF, bf16_round, check, make, round_to, to_numpy

# bool < int32 < int64 < float16, bfloat16 < float32 < float64; float16 with bfloat16 -> float32.
PROMOTIONS = [
    ("bool", "int32", "int32"),
    ("bool", "int64", "int64"),
    ("bool", "float16", "float16"),
    ("bool", "float32", "float32"),
    ("int32", "int64", "int64"),
    ("int32", "float32", "float32"),
    ("int32", "float64", "float64"),
    ("int64", "float16", "float16"),
    ("int64", "bfloat16", "bfloat16"),
    ("int64", "float32", "float32"),
    ("float16", "bfloat16", "float32"),
    ("float16", "float32", "float32"),
    ("bfloat16", "float32", "float32"),
    ("bfloat16", "float64", "float64"),
    ("float16", "float64", "float64"),
    ("float32", "float64", "float64"),
    ("int32", "int32", "int32"),
    ("float16", "float16", "float16"),
]


def small_values(dtype, shape=(2, 3), seed=0):
    high = 2 if dtype == "bool" else 4
    return np.random.default_rng(seed).integers(0, high, shape).astype(np.float64)


@pytest.mark.parametrize("op", ["add", "mul"])
@pytest.mark.parametrize("left,right,expected", PROMOTIONS, ids=lambda v: str(v))
def test_binary_op_promotes_along_the_dtype_lattice(left, right, expected, op):
    a, b = small_values(left, seed=1), small_values(right, seed=2)
    np_op = {"add": np.add, "mul": np.multiply}[op]
    fn = getattr(nx, op)
    check(fn(make(a, left), make(b, right)), np_op(a, b), expected)
    check(fn(make(b, right), make(a, left)), np_op(b, a), expected)


@pytest.mark.parametrize(
    "dtype,scalar,expected",
    [
        ("float32", 2.0, "float32"),
        ("float32", 2, "float32"),
        ("float64", 2.0, "float64"),
        ("float16", 2.0, "float16"),
        ("float16", 3, "float16"),
        ("bfloat16", 0.5, "bfloat16"),
        ("bfloat16", 1, "bfloat16"),
        ("int32", 1, "int32"),
        ("int64", 3, "int64"),
        ("int32", 2.5, "float32"),
        ("int64", 2.5, "float32"),
    ],
)
@pytest.mark.parametrize("op", ["add", "sub", "mul"])
def test_python_scalars_are_weak(dtype, scalar, expected, op):
    py_op = getattr(operator, op)
    x = small_values(dtype)
    t = make(x, dtype)
    check(py_op(t, scalar), round_to(py_op(x, scalar), expected), expected, TOL)
    check(py_op(scalar, t), round_to(py_op(scalar, x), expected), expected, TOL)


@pytest.mark.parametrize(
    "left,right", [("int32", "int32"), ("int64", "int64"), ("int32", "int64"), ("bool", "int64")]
)
def test_division_of_integer_tensors_gives_float32(left, right):
    a = np.array([7, -7, 1, 0]) if left != "bool" else np.array([1, 0, 1, 1])
    b = np.array([2, 2, 3, -4])
    check(nx.div(make(a, left), make(b, right)), a / b, "float32")
    check(make(a, left) / make(b, right), a / b, "float32")


def test_division_of_an_integer_tensor_by_a_python_int_gives_float32():
    t = nx.tensor([7, -3, 4])
    check(t / 2, np.array([3.5, -1.5, 2.0]), "float32")
    check(6 / t, np.array([6 / 7, -2.0, 1.5]), "float32")


@pytest.mark.parametrize(
    "left,right",
    [("int32", "float64"), ("float16", "float32"), ("bool", "int64"), ("bfloat16", "float16")],
)
@pytest.mark.parametrize("op", ["eq", "lt", "ge"])
def test_comparison_of_mixed_dtypes_gives_bool(left, right, op):
    a, b = small_values(left, seed=3), small_values(right, seed=4)
    np_op = {"eq": np.equal, "lt": np.less, "ge": np.greater_equal}[op]
    check(getattr(nx, op)(make(a, left), make(b, right)), np_op(a, b), "bool")


# --------------------------------------------------------------------------- half types

HALF = ["float16", "bfloat16"]


def to_half(x32, dtype):
    """Round float32 values to the half type, returned as float32."""
    if dtype == "bfloat16":
        return bf16_round(x32)
    return x32.astype(np.float16).astype(np.float32)


def half_operands(op, dtype, rng):
    if op == "pow":
        a, b = rng.uniform(0.5, 2.0, (3, 4)), rng.uniform(-2.0, 2.0, (3, 4))
    elif op == "div":
        a, b = rng.uniform(-3, 3, (3, 4)), rng.choice([-1.0, 1.0], (3, 4)) * rng.uniform(
            0.5, 3, (3, 4))
    else:
        a, b = rng.uniform(-3, 3, (3, 4)), rng.uniform(-3, 3, (3, 4))
    return (to_half(a.astype(np.float32), dtype), to_half(b.astype(np.float32), dtype))


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum"])
def test_half_binary_op_is_float32_math_rounded_to_the_half_type(op, dtype, rng):
    a, b = half_operands(op, dtype, rng)
    np_op = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
             "pow": np.power, "maximum": np.maximum, "minimum": np.minimum}[op]
    with np.errstate(all="ignore"):
        ref = to_half(np_op(a, b).astype(np.float32), dtype)
    check(getattr(nx, op)(make(a, dtype), make(b, dtype)), ref, dtype)


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize("op", sorted(UNARY_REF))
def test_half_unary_op_is_float32_math_rounded_to_the_half_type(op, dtype, rng):
    low = 0.1 if op in ("log", "sqrt") else -3.0
    x = to_half(rng.uniform(low, 3.0, (3, 4)).astype(np.float32), dtype)
    ref = to_half(UNARY_REF[op](x.astype(np.float64)).astype(np.float32), dtype)
    check(getattr(nx, op)(make(x, dtype)), ref, dtype)


@pytest.mark.parametrize("dtype", HALF)
def test_half_layouts_and_broadcasting_match_float32(dtype, rng):
    a = to_half(rng.uniform(-3, 3, (4, 3)).astype(np.float32), dtype)
    b = to_half(rng.uniform(-3, 3, (3,)).astype(np.float32), dtype)
    out = make(a, dtype).T[:, ::2] * make(b, dtype)[:, None]
    check(out, to_half(a.T[:, ::2] * b[:, None], dtype), dtype)


@pytest.mark.parametrize("dtype,count", [("float16", 5000), ("bfloat16", 1000)])
def test_half_sum_accumulates_in_float32(dtype, count):
    # Accumulating in the half type would stall at 2048 (float16) or 256 (bfloat16).
    total = nx.sum(nx.ones(count, dtype=dtype))
    assert float(to_numpy(total)) == count


@pytest.mark.parametrize("dtype", HALF)
def test_half_matmul_accumulates_in_float32(dtype):
    n = 4096 if dtype == "float16" else 1024
    a = nx.ones(1, n, dtype=dtype)
    out = to_numpy(nx.matmul(a, nx.ones(n, 1, dtype=dtype)))
    assert out.shape == (1, 1)
    assert float(out[0, 0]) == n
