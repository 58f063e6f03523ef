"""Neural-network ops against numpy references: matmul, conv2d, pooling, cross_entropy,
layer_norm, batch_norm, dropout, concat and stack."""

import numpy as np
import pytest

import nexus as nx
import nx_reference as ref
from gradcheck import gradcheck
from nx_reference import TOL, TRANSCENDENTAL_TOL, check, make, round_to

FLOATS = ["float32", "float64"]
MATMUL_TOL = dict(TOL, float32={"rtol": 1e-5, "atol": 1e-5})


def values(rng, shape, dtype, scale=1.0):
    """(tensor, float64 values exactly as stored)"""
    x = round_to(rng.standard_normal(shape) * scale, dtype)
    return make(x, dtype), x


# --------------------------------------------------------------------------- matmul

MATMUL_SHAPES = [
    ((4,), (4,)),
    ((4,), (4, 3)),
    ((2, 4), (4,)),
    ((2, 4), (4, 3)),
    ((1, 1), (1, 1)),
    ((5, 2, 4), (4, 3)),
    ((2, 4), (5, 4, 3)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((3, 1, 4), (1, 4, 2)),
    ((4,), (2, 4, 3)),
    ((0, 4), (4, 3)),
    ((2, 0), (0, 3)),
]


@pytest.mark.parametrize("shapes", MATMUL_SHAPES, ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_follows_numpy_semantics(dtype, shapes, rng):
    ta, a = values(rng, shapes[0], dtype)
    tb, b = values(rng, shapes[1], dtype)
    check(nx.matmul(ta, tb), np.matmul(a, b), dtype, MATMUL_TOL)
    check(ta @ tb, np.matmul(a, b), dtype, MATMUL_TOL)


MATMUL_LAYOUTS = {
    "lhs_T": ((6, 5), (6, 8), lambda a: a.T, lambda b: b),
    "rhs_T": ((5, 6), (8, 6), lambda a: a, lambda b: b.T),
    "both_T": ((6, 4), (8, 6), lambda a: a.T, lambda b: b.T),
    "strided": ((6, 6), (6, 8), lambda a: a[::2], lambda b: b[:, 1::2]),
    "batched_T": ((2, 6, 5), (6, 3), lambda a: swap_last_two(a), lambda b: b),
    # one row or one column of the result: BLAS's matrix-vector product, every operand layout
    "row": ((1, 7), (7, 9), lambda a: a, lambda b: b),
    "row_rhs_T": ((1, 7), (9, 7), lambda a: a, lambda b: b.T),
    "row_lhs_T": ((7, 1), (7, 9), lambda a: a.T, lambda b: b),
    "row_both_T_strided": ((7, 3), (9, 7), lambda a: a.T[1:2], lambda b: b.T),
    "column": ((9, 7), (7, 1), lambda a: a, lambda b: b),
    "column_lhs_T": ((7, 9), (7, 1), lambda a: a.T, lambda b: b),
    "column_rhs_T": ((9, 7), (1, 7), lambda a: a, lambda b: b.T),
    "column_strided": ((9, 7), (7, 4), lambda a: a, lambda b: b[:, 2:3]),
    "batched_rows": ((3, 1, 7), (7, 9), lambda a: a, lambda b: b),
    "row_threaded": ((1, 1100), (1100, 1000), lambda a: a, lambda b: b),  # past the split's bytes
}


def swap_last_two(x):
    return x.swapaxes(1, 2) if isinstance(x, np.ndarray) else x.transpose(1, 2)


@pytest.mark.parametrize("layout", sorted(MATMUL_LAYOUTS))
@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_of_non_contiguous_operands_matches_numpy(dtype, layout, rng):
    shape_a, shape_b, view_a, view_b = MATMUL_LAYOUTS[layout]
    ta, a = values(rng, shape_a, dtype)
    tb, b = values(rng, shape_b, dtype)
    tol = dict(TOL, float32={"rtol": 1e-5, "atol": 2e-4}) if layout == "row_threaded" else MATMUL_TOL
    check(nx.matmul(view_a(ta), view_b(tb)), view_a(a) @ view_b(b), dtype, tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_of_larger_odd_shapes_matches_numpy(dtype, rng):
    ta, a = values(rng, (33, 65), dtype)
    tb, b = values(rng, (65, 17), dtype)
    tol = dict(TOL, float32={"rtol": 1e-5, "atol": 1e-4})
    check(nx.matmul(ta, tb), a @ b, dtype, tol)


@pytest.mark.parametrize("dtype", FLOATS)
def test_matmul_large_enough_to_be_threaded_matches_numpy(dtype, rng):
    ta, a = values(rng, (3, 130, 257), dtype)
    tb, b = values(rng, (257, 67), dtype)
    tol = dict(TOL, float32={"rtol": 1e-5, "atol": 2e-4})
    check(nx.matmul(ta, tb), a @ b, dtype, tol)
    check(nx.matmul(ta[:, ::3, ::2], tb[::2]), a[:, ::3, ::2] @ b[::2], dtype, tol)
    check(nx.matmul(tb.T, ta.transpose(1, 2)), b.T @ a.swapaxes(1, 2), dtype, tol)


def test_conv2d_of_a_larger_image_matches_reference(rng):
    tx, x = values(rng, (2, 3, 17, 19), "float32")
    tw, w = values(rng, (8, 3, 3, 3), "float32")
    tb, b = values(rng, (8,), "float32")
    check(nx.conv2d(tx, tw, tb, padding=1), ref.conv2d(x, w, b, 1, 1), "float32", MATMUL_TOL)


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("k, stride, padding", [(16, 1, 0), (32, 2, 0), (8, 1, 2), (16, 2, 1), (24, 1, 1),
                                                (48, (2, 1), (1, 2))])
def test_conv2d_direct_kernels_match_reference(k, stride, padding, dtype, rng):
    # Few taps take the direct kernels (not im2col): the forward blocked over channels and
    # pixels of a row (odd widths leave a tail), one, two or three vectors of channels a block.
    tx, x = values(rng, (3, 6, 14, 13), dtype)
    tw, w = values(rng, (k, 6, 5, 5), dtype)
    tb, b = values(rng, (k,), dtype)
    check(nx.conv2d(tx, tw, tb, stride=stride, padding=padding),
          ref.conv2d(x, w, b, stride, padding), dtype, MATMUL_TOL)


def test_matmul_with_a_numpy_operand_on_the_right(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
    check(nx.tensor(a) @ b, a @ b, "float64")


# --------------------------------------------------------------------------- conv2d

CONV_CASES = {
    "plain": ((2, 3, 6, 5), (4, 3, 3, 3), True, 1, 0),
    "stride2_pad1": ((1, 2, 7, 7), (3, 2, 3, 2), False, 2, 1),
    "pair_stride_pad": ((2, 1, 5, 6), (2, 1, 2, 3), True, (2, 1), (1, 0)),
    "pointwise": ((1, 3, 4, 4), (2, 3, 1, 1), True, 1, 0),
    "kernel_covers_input": ((1, 2, 5, 5), (1, 2, 5, 5), False, 1, 2),
    "stride_skips_edge": ((1, 1, 6, 6), (1, 1, 2, 2), True, 3, 0),
}


@pytest.mark.parametrize("case", sorted(CONV_CASES))
@pytest.mark.parametrize("dtype", FLOATS)
def test_conv2d_matches_reference(dtype, case, rng):
    x_shape, w_shape, has_bias, stride, padding = CONV_CASES[case]
    tx, x = values(rng, x_shape, dtype)
    tw, w = values(rng, w_shape, dtype)
    tb, b = values(rng, (w_shape[0],), dtype) if has_bias else (None, None)
    out = nx.conv2d(tx, tw, tb, stride=stride, padding=padding)
    check(out, ref.conv2d(x, w, b, stride, padding), dtype, MATMUL_TOL)


# (x shape, groups, out channels, kernel, stride, padding): depthwise and channel multipliers
# (few outputs per group: the plane kernels; widths past one vector and row tails), and groups of
# 8+ outputs (each group an ungrouped convolution of its gathered channels).
GROUPED_CASES = {
    "depthwise": ((2, 6, 9, 11), 6, 6, 3, 1, 1),
    "depthwise_wide_rows": ((1, 3, 13, 37), 3, 3, (3, 5), 1, (1, 2)),
    "depthwise_stride2": ((2, 4, 11, 10), 4, 4, 3, 2, 1),
    "depthwise_mixed_stride": ((1, 2, 10, 21), 2, 2, (2, 4), (1, 3), (0, 2)),
    "multiplier2_5x5": ((2, 3, 12, 12), 3, 6, 5, 1, 2),
    "two_in_two_out": ((2, 8, 7, 9), 4, 8, 3, 1, 0),
    "pad_beyond_kernel": ((1, 2, 4, 4), 2, 2, 1, 1, 2),
    "wide_groups": ((2, 16, 6, 7), 2, 32, 3, 1, 1),
    "wide_groups_strided": ((2, 6, 9, 9), 3, 24, 3, 2, 1),
}


@pytest.mark.parametrize("case", sorted(GROUPED_CASES))
@pytest.mark.parametrize("dtype", FLOATS)
def test_grouped_conv2d_matches_per_group_reference(dtype, case, rng):
    x_shape, groups, k, kernel, stride, padding = GROUPED_CASES[case]
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    tx, x = values(rng, x_shape, dtype)
    tw, w = values(rng, (k, x_shape[1] // groups, kh, kw), dtype)
    tb, b = values(rng, (k,), dtype)
    out = nx.conv2d(tx, tw, tb, stride=stride, padding=padding, groups=groups)
    check(out, ref.conv2d(x, w, b, stride, padding, groups), dtype, MATMUL_TOL)


@pytest.mark.parametrize("case", sorted(GROUPED_CASES))
def test_grouped_conv2d_gradients_match_torch(case, rng, torch):
    x_shape, groups, k, kernel, stride, padding = GROUPED_CASES[case]
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal((k, x_shape[1] // groups, kh, kw)).astype(np.float32)
    b = rng.standard_normal(k).astype(np.float32)
    mine = [nx.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    y = nx.conv2d(*mine, stride=stride, padding=padding, groups=groups)
    ty = torch.nn.functional.conv2d(*theirs, stride=stride, padding=padding, groups=groups)
    dy = rng.standard_normal(ty.shape).astype(np.float32)
    (y * nx.tensor(dy)).sum().backward()
    (ty * torch.tensor(dy)).sum().backward()
    for t, tt in zip(mine, theirs):
        np.testing.assert_allclose(t.grad.numpy(), tt.grad.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("x_shape, w_shape, groups, message", [
    ((1, 6, 5, 5), (3, 3, 3, 3), 2, r"groups=2 must divide both the 6 input channels and the 3 output"),
    ((1, 6, 5, 5), (6, 2, 3, 3), 2, r"weight of shape \(6, 2, 3, 3\) with groups=2 expects 2 x 2 input channels"),
    ((1, 6, 5, 5), (6, 6, 3, 3), 0, r"groups must be positive, got 0"),
])
def test_grouped_conv2d_refuses_channels_that_do_not_split(x_shape, w_shape, groups, message):
    with pytest.raises(ValueError, match=message):
        nx.conv2d(nx.zeros(*x_shape), nx.zeros(*w_shape), groups=groups)


def test_grouped_conv2d_groups_must_be_an_int():
    with pytest.raises(TypeError, match="groups must be an int, got float"):
        nx.conv2d(nx.zeros(1, 2, 4, 4), nx.zeros(2, 1, 3, 3), groups=2.0)


def test_conv2d_defaults_to_stride_one_and_no_padding(rng):
    tx, x = values(rng, (1, 2, 5, 5), "float64")
    tw, w = values(rng, (3, 2, 3, 3), "float64")
    check(nx.conv2d(tx, tw), ref.conv2d(x, w), "float64")


def test_conv2d_of_a_non_contiguous_input_matches_reference(rng):
    x = rng.standard_normal((1, 5, 5, 2))
    w = rng.standard_normal((2, 2, 3, 3))
    out = nx.conv2d(nx.tensor(x).permute(0, 3, 1, 2), nx.tensor(w), padding=1)
    check(out, ref.conv2d(x.transpose(0, 3, 1, 2), w, padding=1), "float64")


# --------------------------------------------------------------------------- pooling

POOL_CASES = {
    "default_stride": ((2, 3, 6, 6), 2, None),
    "stride2_kernel3": ((1, 2, 7, 5), 3, 2),
    "overlapping": ((1, 1, 5, 5), 2, 1),
    "floor_mode": ((1, 1, 4, 4), 3, None),
    "rect_kernel": ((1, 2, 6, 6), (2, 3), None),
    "rect_stride": ((1, 1, 7, 8), (3, 2), (2, 3)),
}


@pytest.mark.parametrize("case", sorted(POOL_CASES))
@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
def test_pool2d_matches_reference(name, dtype, case, rng):
    shape, kernel, stride = POOL_CASES[case]
    tx, x = values(rng, shape, dtype)
    out = getattr(nx, name)(tx, kernel, stride)
    check(out, getattr(ref, name)(x, kernel, stride), dtype)


@pytest.mark.parametrize("name", ["max_pool2d", "avg_pool2d"])
def test_pool2d_stride_defaults_to_the_kernel_size(name, rng):
    tx, x = values(rng, (1, 2, 6, 4), "float64")
    check(getattr(nx, name)(tx, 2), getattr(ref, name)(x, 2, 2), "float64")


@pytest.mark.parametrize("stride", [2, 1])
def test_max_pool2d_nan_wins_and_ties_send_the_gradient_to_the_first(stride):
    # As torch: a NaN in a window makes the output NaN; of equal maxima the first (row-major)
    # one receives the whole gradient.
    x = np.array([[[[1.0, 5.0, 2.0, 2.0],
                    [5.0, 0.0, 2.0, 2.0],
                    [np.nan, 1.0, -np.inf, -np.inf],
                    [0.0, 3.0, -np.inf, -np.inf]]]])
    tx = nx.tensor(x)
    tx.requires_grad = True
    out = nx.max_pool2d(tx, 2, stride)
    got = out.numpy()
    if stride == 2:
        out.sum().backward()
        assert got[0, 0, 0].tolist() == [5.0, 2.0]
        assert np.isnan(got[0, 0, 1, 0]) and got[0, 0, 1, 1] == -np.inf
        want = np.zeros_like(x)
        want[0, 0, 0, 1] = want[0, 0, 0, 2] = want[0, 0, 2, 0] = want[0, 0, 2, 2] = 1.0
        np.testing.assert_array_equal(tx.grad.numpy(), want)
    else:
        assert np.isnan(got[0, 0, 1, 0]) and np.isnan(got[0, 0, 2, 0])
        assert got[0, 0, 0].tolist() == [5.0, 5.0, 2.0]


TWO_BY_TWO = {"two_by_two_odd": (2, 3, 9, 11), "two_by_two_wide": (1, 2, 4, 42), "one_window": (3, 1, 2, 2),
              "lenet_second": (2, 16, 10, 10)}


@pytest.mark.parametrize("case", sorted(POOL_CASES) + sorted(TWO_BY_TWO))
@pytest.mark.parametrize("dtype", FLOATS)
def test_max_pool2d_without_grad_gives_the_values_with_grad(case, dtype, rng):
    # Without grad (inference) no winners' indices are kept and 2x2 stride-2 windows take their
    # own vector loop (rows of every length: whole vectors, a last one reading into the next
    # row, the input's last row through a copy): the same values, NaN and -inf included, as the
    # pass that records the winners.
    shape, kernel, stride = POOL_CASES[case] if case in POOL_CASES else (TWO_BY_TWO[case], 2, 2)
    x = rng.standard_normal(shape).astype(dtype)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, flat.size // 7, replace=False)] = np.nan
    flat[rng.choice(flat.size, flat.size // 7, replace=False)] = -np.inf
    plain = nx.max_pool2d(nx.tensor(x), kernel, stride).numpy()
    tracked = nx.tensor(x)
    tracked.requires_grad = True
    np.testing.assert_array_equal(plain, nx.max_pool2d(tracked, kernel, stride).numpy())
    np.testing.assert_array_equal(plain, ref.max_pool2d(x, kernel, stride))


# --------------------------------------------------------------------------- cross_entropy

@pytest.mark.parametrize("label_dtype", ["int64", "int32"])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", FLOATS)
def test_cross_entropy_matches_reference(dtype, reduction, label_dtype, rng):
    tl, logits = values(rng, (5, 4), dtype, scale=3.0)
    labels = np.array([0, 3, 1, 1, 2])
    out = nx.cross_entropy(tl, make(labels, label_dtype), reduction=reduction)
    check(out, np.asarray(ref.cross_entropy(logits, labels, reduction)), dtype,
          TRANSCENDENTAL_TOL)


def test_cross_entropy_defaults_to_the_mean(rng):
    tl, logits = values(rng, (3, 6), "float64")
    labels = np.array([5, 0, 2])
    check(nx.cross_entropy(tl, nx.tensor(labels)), np.asarray(ref.cross_entropy(logits, labels)),
          "float64")


def test_cross_entropy_is_stable_for_large_logits():
    logits = np.array([[1000.0, 0.0, -1000.0], [0.0, 1000.0, 999.0]], dtype=np.float32)
    labels = np.array([1, 2])
    out = nx.cross_entropy(nx.tensor(logits), nx.tensor(labels), reduction="none")
    # Finite, and within an absolute float32 rounding of the largest logit (ulp(1000) = 6e-5).
    assert np.all(np.isfinite(out.numpy()))
    check(out, ref.cross_entropy(logits.astype(np.float64), labels, "none"), "float32",
          dict(TOL, float32={"rtol": 2e-5, "atol": 1e-4}))


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_cross_entropy_gradient_is_softmax_minus_onehot(dtype, reduction):
    # Rows with huge logits too: the fused kernel's backward reuses the forward's log-sum-exp.
    logits = np.array([[2.0, -1.0, 0.5, 0.0], [1000.0, 0.0, -1000.0, 999.0], [-3.0, -3.0, -3.0, -3.0]])
    labels = np.array([2, 3, 0])
    tl = nx.tensor(logits.astype(np.float32)).astype(dtype)
    tl.requires_grad = True
    out = nx.cross_entropy(tl, nx.tensor(labels), reduction=reduction)
    out.backward(nx.ones(3).astype(dtype) if reduction == "none" else None)
    x = np.asarray(tl.detach().astype("float64").numpy())
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    want = (p - np.eye(4)[labels]) / (3 if reduction == "mean" else 1)
    assert tl.grad.dtype == tl.dtype
    tol = {"float32": 1e-6, "float16": 2e-3, "bfloat16": 1e-2}[dtype]
    np.testing.assert_allclose(tl.grad.astype("float64").numpy(), want, rtol=tol, atol=tol)


def log_softmax_axis1(x):
    shifted = x - x.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def reduce_like_torch(loss, reduction):
    return {"none": loss, "sum": loss.sum(), "mean": loss.mean()}[reduction]


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(2, 3, 4), (2, 5, 3, 2), (1, 4, 1, 1, 3)], ids=str)
def test_cross_entropy_of_per_position_classes_matches_numpy(shape, reduction, rng):
    # torch.nn.functional.cross_entropy: (N, C, d1..dk) logits, (N, d1..dk) labels; "mean"
    # averages over all N * d1 * ... * dk positions, "none" keeps that shape.
    tl, logits = values(rng, shape, "float64", scale=3.0)
    labels = rng.integers(0, shape[1], (shape[0],) + shape[2:])
    picked = np.take_along_axis(log_softmax_axis1(logits), labels[:, None], axis=1)[:, 0]
    out = nx.cross_entropy(tl, nx.tensor(labels), reduction=reduction)
    check(out, np.asarray(reduce_like_torch(-picked, reduction)), "float64")
    gradcheck(lambda x: nx.cross_entropy(x, nx.tensor(labels), reduction=reduction), [logits])


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(4, 3), (2, 3, 5)], ids=str)
def test_cross_entropy_of_class_probabilities_matches_numpy(shape, reduction, rng):
    # torch: a target of the logits' shape holds class probabilities; loss is
    # -sum(target * log_softmax(logits, 1), 1), and the target gets a gradient too.
    tl, logits = values(rng, shape, "float64", scale=2.0)
    probs = rng.uniform(0.1, 1.0, shape)
    probs /= probs.sum(axis=1, keepdims=True)
    want = -(probs * log_softmax_axis1(logits)).sum(axis=1)
    out = nx.cross_entropy(tl, nx.tensor(probs), reduction=reduction)
    check(out, np.asarray(reduce_like_torch(want, reduction)), "float64")
    gradcheck(lambda x, y: nx.cross_entropy(x, y, reduction=reduction), [logits, probs])
    onehot = np.eye(shape[1])[rng.integers(0, shape[1], (shape[0],) + shape[2:])]
    onehot = np.moveaxis(onehot, -1, 1)  # one-hot probabilities give the index form's loss
    labels = onehot.argmax(axis=1)
    check(nx.cross_entropy(tl, nx.tensor(onehot), reduction=reduction),
          nx.cross_entropy(tl, nx.tensor(labels), reduction=reduction).numpy(), "float64")


def test_cross_entropy_of_one_unbatched_sample():
    logits = np.array([1.0, 2.0, 0.5])
    want = -log_softmax_axis1(logits[None])[0, 1]
    check(nx.cross_entropy(nx.tensor(logits), 1), np.asarray(want), "float64")
    assert nx.cross_entropy(nx.tensor(logits), 1, reduction="none").shape == ()


@pytest.mark.parametrize("reduction", ["max", "avg", None])
@pytest.mark.parametrize("labels", [np.array([0, 2]), np.eye(3)[[0, 2]]], ids=["indices", "probs"])
def test_cross_entropy_names_the_valid_reductions(reduction, labels):
    with pytest.raises(ValueError, match=f"reduction {reduction!r} is not one of 'none', 'mean', 'sum'$"):
        nx.cross_entropy(nx.zeros(2, 3), nx.tensor(labels), reduction=reduction)


def test_the_core_checks_the_reduction_names_too():
    x, y = nx.zeros(2, 3), nx.tensor([0, 2])
    with pytest.raises(ValueError, match="cross_entropy: reduction 'max' is not one of 'none', 'mean', 'sum'$"):
        nx._C.cross_entropy(x, y, "max")
    with pytest.raises(ValueError, match="reduction 'avg' is not one of 'none', 'sum', 'mean', 'max', 'min'$"):
        nx._C.cross_entropy(x, y, "avg")


@pytest.mark.parametrize("logits,labels,error,match", [
    ((2, 3, 4), np.zeros((2, 3), np.int64), ValueError, r"expected class indices of shape \(2, 4\)"),
    ((2, 3, 4), np.zeros((2, 3, 4), np.int64), TypeError, "must be floating point"),
    ((2, 3), np.zeros(2), TypeError, "integer class indices"),
    ((2, 3, 4), np.full((2, 4), 3), IndexError, "out of range for 3 classes"),
])
def test_cross_entropy_rejects_mismatched_labels(logits, labels, error, match):
    with pytest.raises(error, match=match):
        nx.cross_entropy(nx.zeros(*logits), nx.tensor(labels))


# --------------------------------------------------------------------------- layer_norm

LAYER_NORM_CASES = {
    "last_dim_tuple": ((2, 3, 4), (4,)),
    "last_dim_int": ((2, 3, 4), 4),
    "last_two_dims": ((2, 3, 4), (3, 4)),
    "matrix": ((5, 6), (6,)),
}


@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("case", sorted(LAYER_NORM_CASES))
@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_matches_reference(dtype, case, affine, rng):
    shape, normalized = LAYER_NORM_CASES[case]
    tx, x = values(rng, shape, dtype, scale=3.0)
    wshape = (normalized,) if isinstance(normalized, int) else normalized
    tw, w = values(rng, wshape, dtype) if affine else (None, None)
    tb, b = values(rng, wshape, dtype) if affine else (None, None)
    out = nx.layer_norm(tx, normalized, tw, tb)
    check(out, ref.layer_norm(x, normalized, w, b), dtype, TRANSCENDENTAL_TOL)


@pytest.mark.parametrize("n", [1, 7, 16, 33, 128, 300])
@pytest.mark.parametrize("dtype", FLOATS)
def test_layer_norm_kernel_matches_the_ops_it_replaces(dtype, n, rng):
    """Without a gradient to record, layer_norm is one kernel pass per row (vector lanes and a
    tail); with one, the composed ops whose gradients autograd knows. Both match the reference,
    rows far from zero mean included, and the composed path still gives a gradient."""
    x = rng.standard_normal((5, n)) * 3 + 10
    w, b = rng.standard_normal(n), rng.standard_normal(n)
    fast = nx.layer_norm(nx.tensor(x, dtype=dtype), (n,), nx.tensor(w, dtype=dtype), nx.tensor(b, dtype=dtype))
    xg = nx.tensor(x, dtype=dtype, requires_grad=True)
    composed = nx.layer_norm(xg, (n,), nx.tensor(w, dtype=dtype), nx.tensor(b, dtype=dtype))
    want = ref.layer_norm(x.astype(dtype), (n,), w.astype(dtype), b.astype(dtype))
    check(fast, want, dtype, TRANSCENDENTAL_TOL)
    check(composed.detach(), want, dtype, TRANSCENDENTAL_TOL)
    composed.sum().backward()
    g = xg.grad.numpy()  # layer_norm ignores a shift of its row: each row of the gradient sums to 0
    assert g.shape == x.shape and np.all(np.abs(g.sum(axis=1)) <= 1e-4 * n * np.abs(g).max())


def test_layer_norm_uses_the_given_eps(rng):
    tx, x = values(rng, (3, 4), "float64", scale=0.01)
    check(nx.layer_norm(tx, (4,), eps=1e-2), ref.layer_norm(x, (4,), eps=1e-2), "float64")


# --------------------------------------------------------------------------- batch_norm

@pytest.mark.parametrize("affine", [False, True])
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 2, 5)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_in_eval_mode_uses_running_statistics(dtype, shape, affine, rng):
    tx, x = values(rng, shape, dtype, scale=2.0)
    mean = round_to(rng.standard_normal(3), dtype)
    var = round_to(rng.uniform(0.5, 2.0, 3), dtype)
    tw, w = values(rng, (3,), dtype) if affine else (None, None)
    tb, b = values(rng, (3,), dtype) if affine else (None, None)
    rm, rv = make(mean, dtype), make(var, dtype)
    out = nx.batch_norm(tx, rm, rv, tw, tb, training=False)
    expected, _, _ = ref.batch_norm(x, mean, var, w, b, training=False)
    check(out, expected, dtype, TRANSCENDENTAL_TOL)
    check(rm, mean, dtype)
    check(rv, var, dtype)


@pytest.mark.parametrize("momentum", [0.1, 0.5])
@pytest.mark.parametrize("shape", [(6, 3), (4, 3, 2, 5)], ids=str)
@pytest.mark.parametrize("dtype", FLOATS)
def test_batch_norm_in_training_mode_uses_batch_statistics_and_updates_running_ones(
        dtype, shape, momentum, rng):
    tx, x = values(rng, shape, dtype, scale=2.0)
    tw, w = values(rng, (3,), dtype)
    tb, b = values(rng, (3,), dtype)
    mean, var = round_to(rng.standard_normal(3), dtype), round_to(rng.uniform(0.5, 2, 3), dtype)
    rm, rv = make(mean, dtype), make(var, dtype)
    out = nx.batch_norm(tx, rm, rv, tw, tb, training=True, momentum=momentum)
    expected, new_mean, new_var = ref.batch_norm(x, mean, var, w, b, True, momentum)
    check(out, expected, dtype, TRANSCENDENTAL_TOL)
    check(rm, new_mean, dtype, TRANSCENDENTAL_TOL)
    check(rv, new_var, dtype, TRANSCENDENTAL_TOL)


def test_batch_norm_uses_the_given_eps(rng):
    tx, x = values(rng, (4, 2), "float64", scale=0.01)
    rm, rv = nx.zeros(2, dtype="float64"), nx.ones(2, dtype="float64")
    out = nx.batch_norm(tx, rm, rv, training=True, eps=1e-2)
    expected, _, _ = ref.batch_norm(x, np.zeros(2), np.ones(2), training=True, eps=1e-2)
    check(out, expected, "float64")


# --------------------------------------------------------------------------- dropout

def test_dropout_keeps_or_zeroes_and_scales_survivors():
    x = nx.full((200, 100), 2.0)
    nx.manual_seed(3)
    out = nx.dropout(x, p=0.3).numpy()
    kept = out != 0
    np.testing.assert_allclose(out[kept], 2.0 / 0.7, rtol=1e-6)
    assert abs(1.0 - kept.mean() - 0.3) < 0.02


def test_dropout_is_reproducible_under_manual_seed():
    x = nx.ones(1000)
    nx.manual_seed(11)
    first = nx.dropout(x, 0.5).numpy().copy()
    nx.manual_seed(11)
    np.testing.assert_array_equal(nx.dropout(x, 0.5).numpy(), first)
    assert not np.array_equal(nx.dropout(x, 0.5).numpy(), first)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_in_eval_mode_or_with_p_zero_is_identity(dtype, rng):
    tx, x = values(rng, (4, 5), dtype)
    check(nx.dropout(tx, p=0.5, training=False), x, dtype)
    check(nx.dropout(tx, p=0.0), x, dtype)


@pytest.mark.parametrize("p", [-0.1, 1.5, float("nan")])
def test_dropout_probability_outside_unit_interval_raises_value_error(p):
    with pytest.raises(ValueError, match=r"p must be in \[0, 1\]"):
        nx.dropout(nx.ones(4), p=p)


@pytest.mark.parametrize("dtype", FLOATS)
def test_dropout_with_p_one_drops_everything_and_passes_no_gradient(dtype):
    # torch.nn.functional.dropout(x, p=1.0) returns x * 0: all zeros, zero gradient.
    x = nx.full((3, 4), 2.0, dtype=dtype)
    out = nx.dropout(x, p=1.0)
    assert out.dtype == dtype and out.shape == (3, 4)
    np.testing.assert_array_equal(out.astype("float32").numpy(), np.zeros((3, 4), np.float32))
    w = nx.ones(3, 4, dtype="float64", requires_grad=True)
    nx.dropout(w * 3.0, p=1.0).sum().backward()
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros((3, 4)))
    np.testing.assert_array_equal(nx.dropout(x, p=1.0, training=False).numpy(), x.numpy())


# --------------------------------------------------------------------------- concat, stack

@pytest.mark.parametrize("axis", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("dtype", FLOATS + ["int64"])
def test_concat_matches_numpy(dtype, axis, rng):
    shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
    for i, n in enumerate((1, 2, 3)):
        shapes[i][axis] = n
    pairs = [values(rng, tuple(s), dtype) for s in shapes]
    out = nx.concat([t for t, _ in pairs], axis=axis)
    check(out, np.concatenate([x for _, x in pairs], axis=axis), dtype)


def test_concat_defaults_to_axis_zero_and_takes_views(rng):
    a, b = rng.standard_normal((3, 2)), rng.standard_normal((2, 3))
    out = nx.concat([nx.tensor(a).T, nx.tensor(b)[:, ::1]])
    check(out, np.concatenate([a.T, b]), "float64")


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("dtype", FLOATS + ["int64"])
def test_stack_matches_numpy(dtype, axis, rng):
    pairs = [values(rng, (2, 3), dtype) for _ in range(3)]
    out = nx.stack([t for t, _ in pairs], axis=axis)
    check(out, np.stack([x for _, x in pairs], axis=axis), dtype)


def test_stack_defaults_to_a_new_leading_axis(rng):
    a, b = rng.standard_normal(4), rng.standard_normal(4)
    check(nx.stack([nx.tensor(a), nx.tensor(b)]), np.stack([a, b]), "float64")


@pytest.mark.parametrize("name,shapes", [("concat", [(2, 3), (2, 4)]), ("stack", [(2, 3), (3, 2)])])
def test_concat_and_stack_of_mismatched_shapes_raise_value_error(name, shapes):
    with pytest.raises(ValueError):
        getattr(nx, name)([nx.zeros(*s) for s in shapes], axis=0)
