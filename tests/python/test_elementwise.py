"""Elementwise ops against numpy, swept over layouts, broadcasting, 0-d and empty tensors, dtypes.

Type promotion and the half types are in test_type_promotion.py.
"""

import operator

import numpy as np
import pytest

import nexus as nx
from nx_reference import NUMPY_DTYPE, TOL, TRANSCENDENTAL_TOL, UNARY_REF, check, make, round_to

ARITH = {
    "add": (operator.add, np.add),
    "sub": (operator.sub, np.subtract),
    "mul": (operator.mul, np.multiply),
    "div": (operator.truediv, np.true_divide),
    "floor_divide": (operator.floordiv, np.floor_divide),
    "remainder": (operator.mod, np.remainder),
    "pow": (operator.pow, np.power),
    "maximum": (None, np.maximum),
    "minimum": (None, np.minimum),
}
COMPARE = {
    "eq": (operator.eq, np.equal),
    "ne": (operator.ne, np.not_equal),
    "lt": (operator.lt, np.less),
    "le": (operator.le, np.less_equal),
    "gt": (operator.gt, np.greater),
    "ge": (operator.ge, np.greater_equal),
}
BINARY = {**ARITH, **COMPARE}
WITH_OPERATOR = sorted(name for name, (py, _) in BINARY.items() if py is not None)
DTYPES = ["float32", "float64", "int32", "int64"]


def operands(op, dtype, shape_a, shape_b, rng):
    """Inputs in each op's domain; values on a small grid so that comparisons see ties."""
    is_int = dtype.startswith("int")
    scale = 1 if is_int else 2
    if op == "pow":
        if is_int:
            a, b = rng.integers(0, 5, shape_a), rng.integers(0, 4, shape_b)
        else:
            a, b = rng.uniform(0.5, 2.0, shape_a), rng.uniform(-2.0, 2.0, shape_b)
    else:
        a = rng.integers(-4, 5, shape_a) / scale
        if op in ("div", "floor_divide", "remainder"):  # no zero divisor (tested on its own)
            b = rng.choice([-3, -2, -1, 1, 2, 3] if is_int else [-4, -2, -1, -0.5, 0.5, 1, 2, 4],
                           shape_b)
        else:
            b = rng.integers(-4, 5, shape_b) / scale
    return round_to(a, dtype), round_to(b, dtype)


def reference(op, dtype, a, b):
    """(expected values, expected dtype name) for `op` on tensors of `dtype` holding a and b."""
    np_op = BINARY[op][1]
    if op in COMPARE:
        return np_op(a, b), "bool"
    if dtype.startswith("int"):
        if op == "div":
            return np.true_divide(a, b), "float32"
        npdt = NUMPY_DTYPE[dtype]
        return np_op(a.astype(npdt), b.astype(npdt)), dtype
    return np_op(a, b), dtype


def tolerance(op):
    return TRANSCENDENTAL_TOL if op == "pow" else TOL


def laid_out(arr, dtype, layout):
    """(tensor, logical values) with `arr` stored in the given memory layout."""
    if layout == "contiguous":
        return make(arr, dtype), arr
    if layout == "transposed":
        return make(arr.T, dtype).T, arr
    if layout == "strided":
        big = np.full((arr.shape[0] * 2, arr.shape[1] * 3), 7.0)
        big[::2, ::3] = arr
        return make(big, dtype)[::2, ::3], arr
    if layout == "expanded":
        return make(arr[:1], dtype).expand(*arr.shape), np.broadcast_to(arr[:1], arr.shape)
    raise AssertionError(layout)


LAYOUT_PAIRS = [
    ("contiguous", "contiguous"),
    ("transposed", "contiguous"),
    ("contiguous", "transposed"),
    ("strided", "strided"),
    ("contiguous", "expanded"),
    ("expanded", "transposed"),
]
BROADCAST_SHAPES = [
    ((3, 4), (4,)),
    ((4,), (3, 4)),
    ((3, 1), (1, 4)),
    ((2, 1, 4), (3, 1)),
    ((), (3, 4)),
    ((3, 4), ()),
    ((), ()),
    ((0, 4), (4,)),
    ((2, 0), (2, 1)),
    ((0,), ()),
]


# --------------------------------------------------------------------------- binary

@pytest.mark.parametrize("layouts", LAYOUT_PAIRS, ids="-".join)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_op_matches_numpy_for_every_layout(op, dtype, layouts, rng):
    a, b = operands(op, dtype, (3, 4), (3, 4), rng)
    ta, a = laid_out(a, dtype, layouts[0])
    tb, b = laid_out(b, dtype, layouts[1])
    ref, out_dtype = reference(op, dtype, a, b)
    check(getattr(nx, op)(ta, tb), ref, out_dtype, tolerance(op))


@pytest.mark.parametrize("shapes", BROADCAST_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("op", sorted(BINARY))
def test_binary_op_broadcasts_like_numpy(op, dtype, shapes, rng):
    a, b = operands(op, dtype, shapes[0], shapes[1], rng)
    ref, out_dtype = reference(op, dtype, a, b)
    check(getattr(nx, op)(make(a, dtype), make(b, dtype)), ref, out_dtype, tolerance(op))


@pytest.mark.parametrize("dtype", ["float32", "int64"])
@pytest.mark.parametrize("op", WITH_OPERATOR)
def test_operator_matches_the_named_function(op, dtype, rng):
    a, b = operands(op, dtype, (2, 3), (3,), rng)
    ta, tb = make(a, dtype), make(b, dtype)
    expected = getattr(nx, op)(ta, tb)
    got = BINARY[op][0](ta, tb)
    assert got.shape == expected.shape and got.dtype == expected.dtype
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_maximum_and_minimum_pick_elementwise():
    a = nx.tensor([1.0, 5.0, -2.0])
    b = nx.tensor([3.0, 4.0, -2.0])
    assert nx.maximum(a, b).tolist() == [3.0, 5.0, -2.0]
    assert nx.minimum(a, b).tolist() == [1.0, 4.0, -2.0]


@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "lt"])
def test_numpy_array_operand_works_on_either_side(op, rng):
    py_op, np_op = BINARY[op]
    a, b = operands(op, "float32", (2, 3), (2, 3), rng)
    t, arr = make(a, "float32"), b.astype(np.float32)
    right = py_op(t, arr)
    np.testing.assert_allclose(np.asarray(right.numpy(), np.float64), np_op(a, b), rtol=1e-6)
    left = py_op(arr, t)
    np.testing.assert_allclose(np.asarray(left).astype(np.float64), np_op(b, a), rtol=1e-6)


# --------------------------------------------------------------------------- python scalars

FLOAT_SCALAR_EXPRS = {
    "t+2": lambda x: x + 2,
    "2+t": lambda x: 2 + x,
    "t-1.5": lambda x: x - 1.5,
    "1.5-t": lambda x: 1.5 - x,
    "t*3": lambda x: x * 3,
    "0.5*t": lambda x: 0.5 * x,
    "t/4": lambda x: x / 4,
    "4/t": lambda x: 4 / x,
    "t**2": lambda x: x**2,
    "t**-1": lambda x: x**-1,
    "2**t": lambda x: 2**x,
    "-t": lambda x: -x,
}
COMPARE_SCALAR_EXPRS = {
    "t<1": lambda x: x < 1,
    "1<t": lambda x: 1 < x,
    "t==0.5": lambda x: x == 0.5,
    "t!=2": lambda x: x != 2,
    "3>=t": lambda x: 3 >= x,
    "t>-1.5": lambda x: x > -1.5,
}
SCALAR_INPUT = np.array([[-1.5, 0.5, 2.0], [1.0, -2.0, 4.0]])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("expr", sorted(FLOAT_SCALAR_EXPRS))
def test_python_scalar_operand_keeps_the_float_dtype(expr, dtype):
    fn = FLOAT_SCALAR_EXPRS[expr]
    check(fn(make(SCALAR_INPUT, dtype)), fn(SCALAR_INPUT), dtype, TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
@pytest.mark.parametrize("expr", sorted(COMPARE_SCALAR_EXPRS))
def test_comparison_with_a_python_scalar_gives_bool(expr, dtype):
    fn = COMPARE_SCALAR_EXPRS[expr]
    x = SCALAR_INPUT if dtype.startswith("float") else np.trunc(SCALAR_INPUT)
    check(fn(make(x, dtype)), fn(x), "bool")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize(
    "fn", [lambda x: x + 2, lambda x: 2 - x, lambda x: x * 3, lambda x: x**2, lambda x: -x],
    ids=["t+2", "2-t", "t*3", "t**2", "-t"],
)
def test_python_int_operand_keeps_the_integer_dtype(fn, dtype):
    x = np.array([[-3, 0, 2], [5, -1, 7]], dtype=NUMPY_DTYPE[dtype])
    check(fn(make(x, dtype)), fn(x), dtype)


# --------------------------------------------------------------------------- unary

UNARY = sorted(UNARY_REF)
POSITIVE_DOMAIN = {"log", "sqrt"}


def unary_input(op, dtype, layout, rng):
    shape = {"zero_dim": (), "empty": (0, 4)}.get(layout, (3, 4))
    low = 0.1 if op in POSITIVE_DOMAIN else -3.0
    x = round_to(rng.uniform(low, 3.0, shape), dtype)
    if layout in ("transposed", "strided"):
        return laid_out(x, dtype, layout)
    return make(x, dtype), x


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided", "zero_dim", "empty"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", UNARY)
def test_unary_op_matches_numpy(op, dtype, layout, rng):
    t, x = unary_input(op, dtype, layout, rng)
    check(getattr(nx, op)(t), UNARY_REF[op](x), dtype, TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("op", UNARY)
def test_unary_method_matches_the_function(op, rng):
    t, _ = unary_input(op, "float32", "contiguous", rng)
    np.testing.assert_array_equal(getattr(t, op)().numpy(), getattr(nx, op)(t).numpy())


def test_unary_minus_is_neg(rng):
    t = make(rng.standard_normal((2, 3)), "float32")
    np.testing.assert_array_equal((-t).numpy(), nx.neg(t).numpy())


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("op", ["abs", "neg"])
def test_abs_and_neg_keep_integer_dtype(op, dtype):
    x = np.array([[-3, 0, 2], [5, -1, 7]])
    check(getattr(nx, op)(make(x, dtype)), UNARY_REF[op](x), dtype)


def test_relu_and_abs_at_zero_give_zero():
    t = nx.tensor([0.0, -0.0, 1.0])
    assert nx.relu(t).tolist() == [0.0, 0.0, 1.0]
    assert nx.abs(t).tolist() == [0.0, 0.0, 1.0]


def test_gelu_uses_the_tanh_approximation():
    # Exact (erf) GELU(1) = 0.841345; the tanh approximation gives 0.841192.
    x = np.array([1.0, -2.0, 3.0])
    out = nx.gelu(nx.tensor(x)).numpy()
    np.testing.assert_allclose(out, UNARY_REF["gelu"](x), rtol=1e-10)
    assert abs(out[0] - 0.8413447460685429) > 1e-4


def test_sigmoid_saturates_without_overflow():
    out = nx.sigmoid(nx.tensor([-100.0, 100.0])).numpy()
    assert np.all(np.isfinite(out))
    np.testing.assert_allclose(out, [0.0, 1.0], atol=1e-6)


# --------------------------------------------------------------------------- where

@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_where_selects_like_numpy(dtype, rng):
    cond = rng.uniform(size=(3, 4)) < 0.5
    a, b = operands("add", dtype, (3, 4), (3, 4), rng)
    out = nx.where(nx.tensor(cond), make(a, dtype), make(b, dtype))
    check(out, np.where(cond, a, b), dtype)


@pytest.mark.parametrize(
    "shapes", [((3, 1), (1, 4), ()), ((4,), (3, 4), (3, 1)), ((), (2, 2), (2, 2)),
               ((2, 3), (2, 3), (3,)), ((0, 2), (2,), ())], ids=str,
)
def test_where_broadcasts_all_three_arguments(shapes, rng):
    cond = rng.uniform(size=shapes[0]) < 0.5
    a, b = rng.standard_normal(shapes[1]), rng.standard_normal(shapes[2])
    out = nx.where(nx.tensor(cond), nx.tensor(a), nx.tensor(b))
    check(out, np.where(cond, a, b), "float64")


def test_where_accepts_a_comparison_result_and_transposed_inputs(rng):
    x = rng.standard_normal((4, 3))
    t = nx.tensor(x).T
    out = nx.where(t > 0, t, nx.zeros(3, 4, dtype="float64"))
    check(out, np.where(x.T > 0, x.T, 0.0), "float64")


# --------------------------------------------------------------------------- sizes past one chunk

@pytest.mark.parametrize("step", [1, 3], ids=["contiguous", "step3"])
@pytest.mark.parametrize("op", ["add", "mul", "div", "maximum", "lt"])
def test_binary_op_on_a_large_odd_size_matches_numpy(op, step, rng):
    # Odd sizes past any vector width or per-thread chunk exercise the loop tails.
    n = 100_003
    a, b = operands(op, "float32", (n * step,), (n * step,), rng)
    ta, tb = make(a, "float32")[::step], make(b, "float32")[::step]
    ref, out_dtype = reference(op, "float32", a[::step], b[::step])
    check(getattr(nx, op)(ta, tb), ref, out_dtype)


@pytest.mark.parametrize("op", ["exp", "tanh", "sigmoid", "gelu", "relu"])
def test_unary_op_on_a_large_odd_size_matches_numpy(op, rng):
    x = round_to(rng.uniform(-3, 3, 100_003), "float32")
    check(getattr(nx, op)(make(x, "float32")), UNARY_REF[op](x), "float32", TRANSCENDENTAL_TOL)


def test_broadcast_over_a_large_odd_matrix_matches_numpy(rng):
    a = round_to(rng.standard_normal((517, 203)), "float32")
    b = round_to(rng.standard_normal((203,)), "float32")
    check(make(a, "float32").T[::2] * make(b, "float32")[::2, None], a.T[::2] * b[::2, None],
          "float32")
