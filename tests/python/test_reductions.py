"""Reductions (sum mean max min argmax var logsumexp) and softmax/log_softmax against numpy."""

import numpy as np
import pytest

import nexus as nx
from nx_reference import (
    TRANSCENDENTAL_TOL, check, log_softmax, logsumexp, make, round_to, softmax,
)

REDUCTIONS = {
    "sum": np.sum,
    "mean": np.mean,
    "max": np.max,
    "min": np.min,
    "var": np.var,
    "logsumexp": logsumexp,
}
AXES = [None, 0, 1, -1, 2, (0, 2), (-1, -3), (1, 0), (0, 1, 2)]
FLOATS = ["float32", "float64"]


def data(rng, shape=(3, 4, 5), dtype="float32"):
    """(tensor, its float64 values)"""
    x = round_to(rng.standard_normal(shape) * 2, dtype)
    return make(x, dtype), x


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_matches_numpy(name, dtype, axis, keepdims, rng):
    t, x = data(rng, dtype=dtype)
    out = getattr(nx, name)(t, axis=axis, keepdims=keepdims)
    ref = np.asarray(REDUCTIONS[name](x, axis=axis, keepdims=keepdims))
    check(out, ref, dtype, TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_method_matches_the_function(name, rng):
    t, _ = data(rng)
    for kwargs in ({}, {"axis": 1}, {"axis": (0, 2), "keepdims": True}):
        got = getattr(t, name)(**kwargs)
        want = getattr(nx, name)(t, **kwargs)
        assert got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want.numpy())


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_takes_axis_positionally(name, rng):
    t, x = data(rng, dtype="float64")
    check(getattr(nx, name)(t, 1), np.asarray(REDUCTIONS[name](x, axis=1)), "float64")


VIEWS = {
    "T": (lambda t: t.T, lambda x: x.T),
    "strided": (lambda t: t[:, ::2, 1:], lambda x: x[:, ::2, 1:]),
    "permuted": (lambda t: t.permute(2, 0, 1)[1:], lambda x: x.transpose(2, 0, 1)[1:]),
    "expanded": (lambda t: t[:1].expand(2, 4, 5), lambda x: np.broadcast_to(x[:1], (2, 4, 5))),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_a_non_contiguous_view_matches_numpy(name, view, rng):
    x = rng.standard_normal((3, 4, 5))
    nx_view, np_view = VIEWS[view]
    v, xv = nx_view(nx.tensor(x)), np_view(x)
    for axis in (None, 0, (1, 2)):
        ref = np.asarray(REDUCTIONS[name](xv, axis=axis))
        check(getattr(nx, name)(v, axis=axis), ref, "float64")


@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_of_a_zero_dimensional_tensor_is_itself(name):
    out = getattr(nx, name)(nx.tensor(2.5, dtype="float64"))
    expected = 0.0 if name == "var" else 2.5
    check(out, np.array(expected), "float64")


def test_sum_over_an_empty_axis_is_zero():
    check(nx.sum(nx.zeros(0, 3), axis=0), np.zeros(3), "float32")
    check(nx.sum(nx.zeros(0, 3)), np.array(0.0), "float32")
    check(nx.sum(nx.zeros(2, 0), axis=1, keepdims=True), np.zeros((2, 1)), "float32")


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_sum_of_integers_is_exact(dtype):
    x = np.arange(-30, 30).reshape(6, 10) * 1000003
    out = nx.sum(make(x, dtype), axis=1)
    np.testing.assert_array_equal(out.numpy(), x.sum(axis=1))
    assert int(nx.sum(make(x, dtype))) == int(x.sum())


@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 2)], ids=str)
def test_var_with_ddof_matches_numpy(axis, ddof, rng):
    t, x = data(rng, dtype="float64")
    check(nx.var(t, axis=axis, ddof=ddof), np.asarray(np.var(x, axis=axis, ddof=ddof)), "float64")
    check(t.var(axis=axis, ddof=ddof), np.asarray(np.var(x, axis=axis, ddof=ddof)), "float64")


def test_var_of_a_constant_tensor_is_zero():
    check(nx.var(nx.full((4, 5), 3.25), axis=1), np.zeros(4), "float32")


def test_logsumexp_does_not_overflow_for_large_inputs():
    x = np.array([[1000.0, 1000.0, -1000.0], [-1000.0, -1001.0, -2000.0]], dtype=np.float32)
    out = nx.logsumexp(nx.tensor(x), axis=1)
    check(out, logsumexp(x.astype(np.float64), axis=1), "float32", TRANSCENDENTAL_TOL)


def test_max_and_min_of_equal_values_and_infinities():
    x = np.array([[1.0, np.inf, 1.0], [-np.inf, -2.0, -2.0]])
    check(nx.max(nx.tensor(x), axis=1), np.array([np.inf, -2.0]), "float64")
    check(nx.min(nx.tensor(x), axis=1), np.array([1.0, -np.inf]), "float64")


# --------------------------------------------------------------------------- argmax

@pytest.mark.parametrize("axis", [None, 0, 1, -1, 2], ids=str)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_argmax_matches_numpy_as_int64(dtype, axis, rng):
    x = rng.permutation(60).reshape(3, 4, 5).astype(np.float64)
    out = nx.argmax(make(x, dtype), axis=axis)
    check(out, np.asarray(np.argmax(x, axis=axis)), "int64")


def test_argmax_method_matches_the_function(rng):
    t, _ = data(rng)
    np.testing.assert_array_equal(t.argmax(axis=1).numpy(), nx.argmax(t, axis=1).numpy())
    assert t.argmax().item() == nx.argmax(t).item()


def test_argmax_returns_the_first_of_equal_maxima():
    t = nx.tensor([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    assert nx.argmax(t, axis=1).tolist() == [1, 0]
    assert nx.argmax(t).item() == 1


def test_argmax_of_a_transposed_tensor_indexes_the_view(rng):
    x = rng.standard_normal((4, 3))
    check(nx.argmax(nx.tensor(x).T, axis=1), np.argmax(x.T, axis=1), "int64")
    check(nx.argmax(nx.tensor(x).T), np.asarray(np.argmax(x.T)), "int64")


# --------------------------------------------------------------------------- softmax

@pytest.mark.parametrize("axis", [-1, 0, 1, 2, -2])
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_matches_numpy(name, dtype, axis, rng):
    t, x = data(rng, dtype=dtype)
    ref = {"softmax": softmax, "log_softmax": log_softmax}[name](x, axis=axis)
    check(getattr(nx, name)(t, axis=axis), ref, dtype, TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_defaults_to_the_last_axis(name, rng):
    t, x = data(rng, dtype="float64")
    ref = {"softmax": softmax, "log_softmax": log_softmax}[name](x, axis=-1)
    check(getattr(nx, name)(t), ref, "float64")


def test_softmax_rows_sum_to_one_for_a_transposed_input(rng):
    x = rng.standard_normal((5, 3))
    out = nx.softmax(nx.tensor(x).T, axis=1)
    check(out, softmax(x.T, axis=1), "float64")
    np.testing.assert_allclose(nx.sum(out, axis=1).numpy(), np.ones(3), rtol=1e-12)


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_is_stable_for_large_logits(name):
    x = np.array([[1000.0, 0.0, -1000.0], [50.0, 50.0, 50.0]], dtype=np.float32)
    out = getattr(nx, name)(nx.tensor(x), axis=1)
    ref = {"softmax": softmax, "log_softmax": log_softmax}[name](x.astype(np.float64), axis=1)
    assert np.all(np.isfinite(out.numpy()))
    check(out, ref, "float32", TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("width", [1, 15, 16, 17, 128, 131])
def test_softmax_without_grad_matches_the_recorded_composition(dtype, width, rng):
    """Over the last axis without a gradient to record, softmax runs as one kernel pass per row;
    it gives the composed ops' values (what a recorded softmax computes) within float rounding,
    and their NaN, infinity and all -inf rows, for rows shorter and longer than a vector."""
    x = rng.standard_normal((6, width)).astype(dtype) * 10
    x[1, 0] = np.nan
    x[2, width // 2] = np.inf
    x[3, :] = -np.inf
    x[4, -1] = -np.inf
    with nx.no_grad():
        fast = nx.softmax(nx.tensor(x), axis=-1).numpy()
    t = nx.tensor(x, requires_grad=True)
    composed = nx.softmax(t, axis=-1)
    np.testing.assert_array_equal(np.isnan(fast), np.isnan(composed.detach().numpy()))
    np.testing.assert_allclose(fast, composed.detach().numpy(), rtol=4 * np.finfo(dtype).eps, atol=0)
    finite = ~np.isnan(fast).any(axis=1)
    np.testing.assert_allclose(fast[finite].sum(axis=1), 1.0, rtol=width * np.finfo(dtype).eps)
    check(nx.softmax(nx.tensor(x[finite]), axis=-1), softmax(x[finite].astype(np.float64), axis=-1), dtype,
          TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("shape", [(3, 0), (0, 4), (0,)], ids=str)
def test_softmax_family_over_an_empty_axis_follows_numpy_and_torch(shape):
    """softmax/log_softmax of an empty axis are empty (as in PyTorch); logsumexp over it is
    log(sum(exp([]))) = log(0) = -inf (as scipy and PyTorch give), never an error about max."""
    x = np.zeros(shape, np.float32)
    with np.errstate(divide="ignore"):
        ref = np.log(np.sum(np.exp(x), axis=-1))
    check(nx.logsumexp(nx.tensor(x), axis=-1), ref, "float32")
    for name in ("softmax", "log_softmax"):
        t = nx.tensor(x, requires_grad=True)
        out = getattr(nx, name)(t, axis=-1)
        assert out.shape == shape and out.dtype == nx.float32
        nx.sum(out).backward()
        assert t.grad.shape == shape


# --------------------------------------------------------------------------- bad axes

@pytest.mark.parametrize("axis", [3, -4, (0, 3), (-5, 1)], ids=str)
@pytest.mark.parametrize("name", sorted(REDUCTIONS))
def test_reduction_over_a_missing_axis_raises_index_error(name, axis, rng):
    t, _ = data(rng)
    with pytest.raises(IndexError):
        getattr(nx, name)(t, axis=axis)


@pytest.mark.parametrize("axis", [3, -4])
def test_argmax_over_a_missing_axis_raises_index_error(axis, rng):
    t, _ = data(rng)
    with pytest.raises(IndexError):
        nx.argmax(t, axis=axis)


@pytest.mark.parametrize("axis", [2, -3])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_over_a_missing_axis_raises_index_error(name, axis):
    with pytest.raises(IndexError):
        getattr(nx, name)(nx.zeros(2, 3), axis=axis)


# --------------------------------------------------------------------------- sizes past one chunk

@pytest.mark.parametrize("axis", [None, 0, 1], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "var", "logsumexp"])
def test_reduction_over_a_large_odd_shape_matches_numpy(name, axis, rng):
    # 37 x 2711 (odd, past vector widths and per-thread chunks); float32 tolerance is loosened
    # only for the long sums, where rounding grows with the length.
    t, x = data(rng, shape=(37, 2711))
    tol = dict(TRANSCENDENTAL_TOL, float32={"rtol": 1e-4, "atol": 1e-4})
    check(getattr(nx, name)(t, axis=axis), np.asarray(REDUCTIONS[name](x, axis=axis)), "float32",
          tol)
    check(getattr(nx, name)(t.T, axis=axis), np.asarray(REDUCTIONS[name](x.T, axis=axis)),
          "float32", tol)


@pytest.mark.parametrize("axis", [(0, 2, 3), (0, 3), (0, 1, 3)], ids=str)
@pytest.mark.parametrize("name", ["sum", "mean", "max", "min", "var"])
def test_reduction_over_axes_around_the_kept_ones_matches_numpy(name, axis, rng):
    # Per-channel statistics of NCHW (a batch norm's sums): the kept axes lie between reduced ones.
    t, x = data(rng, shape=(9, 5, 7, 33))
    tol = dict(TRANSCENDENTAL_TOL, float32={"rtol": 1e-5, "atol": 1e-5})
    check(getattr(nx, name)(t, axis=axis, keepdims=True),
          np.asarray(REDUCTIONS[name](x, axis=axis, keepdims=True)), "float32", tol)
    ints = rng.integers(-1000, 1000, (9, 5, 7, 33)).astype(np.int32)
    np.testing.assert_array_equal(nx.sum(nx.tensor(ints), axis=axis).numpy(), ints.sum(axis=axis, dtype=np.int64))


def test_sum_along_broadcast_axes_multiplies_the_repeated_element(rng):
    x = rng.standard_normal((1, 3, 1))
    t = nx.tensor(x).expand(4, 3, 5)  # stride 0 along the summed axes: no pass over the repeats
    np.testing.assert_allclose(nx.sum(t, axis=(0, 2)).numpy(), x[0, :, 0] * 20, rtol=1e-15)
    np.testing.assert_allclose(nx.sum(t, axis=(0, 2), keepdims=True).numpy(), x * 20, rtol=1e-15)
    u = nx.tensor(x, requires_grad=True)
    nx.sum(u.expand(4, 3, 5), axis=(0, 2)).sum().backward()
    np.testing.assert_array_equal(u.grad.numpy(), np.full((1, 3, 1), 20.0))


def test_float32_sums_of_many_same_signed_values_keep_float_precision():
    # A million values of 0.1 (1 + 2**20 + 17 of them): float32 lanes would lose ~1e-5 of the
    # sum (a batch norm's backward turned that into a per-channel offset); double lanes keep it
    # to the last rounding, eagerly and in a fused kernel (a channel sum, like a batch norm's).
    n = 2**20 + 17
    x = np.full(n, 0.1, np.float32)
    exact = float(np.float32(0.1)) * n
    assert abs(float(nx.sum(nx.tensor(x)).item()) / exact - 1) < 2e-7
    t = nx.tensor(x.reshape(1, 1, 1, n))
    summed = nx.jit(lambda a: (a * 1.0).sum(axis=(0, 2, 3)))(t)
    assert abs(float(summed.numpy()[0]) / exact - 1) < 2e-7
    four_d = nx.tensor(np.full((64, 3, 32, 32), 0.1, np.float32))
    np.testing.assert_allclose(nx.sum(four_d, axis=(0, 2, 3)).numpy(), float(np.float32(0.1)) * 65536, rtol=2e-7)


def test_argmax_over_a_large_odd_shape_matches_numpy(rng):
    x = rng.permutation(37 * 2711).reshape(37, 2711).astype(np.float64)
    for axis in (None, 0, 1):
        check(nx.argmax(make(x, "float64"), axis=axis), np.asarray(np.argmax(x, axis=axis)),
              "int64")
