"""Gradients of every differentiable op against central finite differences (float64).

Tape behaviour (accumulation, no_grad, detach, errors) is in test_autograd_tape.py.
"""

import zlib

import numpy as np
import pytest

import nexus as nx
from gradcheck import gradcheck


def normal(*shape):
    return lambda rng: rng.standard_normal(shape)


def positive(*shape):
    return lambda rng: rng.uniform(0.5, 2.0, shape)


def away_from_zero(*shape):
    """Values at least 0.2 from zero, where relu, abs and division are smooth."""
    return lambda rng: rng.uniform(0.2, 2.0, shape) * rng.choice([-1.0, 1.0], shape)


COND = np.array([[True, False, True, True], [False, False, True, False], [True, True, False, True]])
LABELS = [0, 2, 1, 2]


def where(a, b):
    return nx.where(nx.tensor(COND), a, b)


def dropout(x):
    nx.manual_seed(5)
    return nx.dropout(x, p=0.4)


def mlp(x, w1, b1, w2):
    hidden = nx.relu(x @ w1 + b1)
    return nx.cross_entropy(hidden @ w2, nx.tensor(LABELS))


# name -> (function of the leaves, input generators)
CASES = {
    # binary ops, with broadcasting on either side
    "add": (nx.add, [normal(3, 4), normal(4)]),
    "add_operator_both_broadcast": (lambda a, b: a + b, [normal(3, 1), normal(1, 4)]),
    "sub": (nx.sub, [normal(2, 3), normal(3)]),
    "sub_operator_lhs_broadcast": (lambda a, b: a - b, [normal(3), normal(2, 3)]),
    "mul": (nx.mul, [normal(2, 3), normal(2, 1)]),
    "mul_operator_0d": (lambda a, b: a * b, [normal(2, 3, 4), normal()]),
    "div": (nx.div, [normal(2, 3), away_from_zero(3)]),
    "div_operator_lhs_broadcast": (lambda a, b: a / b, [normal(3), away_from_zero(2, 3)]),
    "pow": (nx.pow, [positive(2, 3), normal(2, 3)]),
    "pow_operator_broadcast": (lambda a, b: a**b, [positive(2, 3), normal(3)]),
    "maximum": (nx.maximum, [normal(3, 4), normal(3, 4)]),
    "minimum_broadcast": (nx.minimum, [normal(3, 4), normal(4)]),
    "where": (where, [normal(3, 4), normal(4)]),
    "same_input_twice": (lambda a: a * a + a, [normal(2, 3)]),
    # python scalars
    "scalar_add": (lambda a: 2.0 + a, [normal(3)]),
    "scalar_rsub": (lambda a: 2.0 - a, [normal(3)]),
    "scalar_mul": (lambda a: a * 3.0, [normal(3)]),
    "scalar_rdiv": (lambda a: 2.0 / a, [away_from_zero(3)]),
    "scalar_div": (lambda a: a / 4.0, [normal(3)]),
    "scalar_rpow": (lambda a: 2.0**a, [normal(3)]),
    "scalar_pow": (lambda a: a**3.0, [normal(3)]),
    "scalar_pow_fraction": (lambda a: a**0.5, [positive(3)]),
    "negate_operator": (lambda a: -a, [normal(2, 2)]),
    # unary ops
    "exp": (nx.exp, [normal(2, 3)]),
    "log": (nx.log, [positive(2, 3)]),
    "sqrt": (nx.sqrt, [positive(2, 3)]),
    "tanh": (nx.tanh, [normal(2, 3)]),
    "sigmoid": (nx.sigmoid, [normal(2, 3)]),
    "relu": (nx.relu, [away_from_zero(2, 3)]),
    "gelu": (nx.gelu, [normal(2, 3)]),
    "erf": (nx.erf, [normal(2, 3)]),
    "sin": (nx.sin, [normal(2, 3)]),
    "cos": (nx.cos, [normal(2, 3)]),
    "abs": (nx.abs, [away_from_zero(2, 3)]),
    "neg": (nx.neg, [normal(2, 3)]),
    "unary_method_chain": (lambda a: a.exp().tanh().sin(), [normal(2, 3)]),
    # matmul
    "matmul_vector_vector": (nx.matmul, [normal(4), normal(4)]),
    "matmul_matrix_vector": (nx.matmul, [normal(2, 4), normal(4)]),
    "matmul_vector_matrix": (nx.matmul, [normal(4), normal(4, 3)]),
    "matmul_matrix_matrix": (nx.matmul, [normal(2, 4), normal(4, 3)]),
    "matmul_broadcast_batch": (nx.matmul, [normal(2, 1, 3, 4), normal(3, 4, 2)]),
    "matmul_operator_transposed": (lambda a, b: a.T @ b, [normal(4, 2), normal(4, 3)]),
    # reductions
    "sum_all": (lambda a: nx.sum(a), [normal(2, 3, 4)]),
    "sum_axis": (lambda a: nx.sum(a, axis=1), [normal(2, 3, 4)]),
    "sum_tuple_keepdims": (lambda a: nx.sum(a, axis=(0, 2), keepdims=True), [normal(2, 3, 4)]),
    "sum_method_negative_axis": (lambda a: a.sum(axis=-1), [normal(2, 3)]),
    "mean_all": (lambda a: nx.mean(a), [normal(2, 3, 4)]),
    "mean_axis": (lambda a: nx.mean(a, axis=0), [normal(2, 3, 4)]),
    "max_all": (lambda a: nx.max(a), [normal(3, 4)]),
    "max_axis": (lambda a: nx.max(a, axis=1), [normal(3, 4)]),
    "min_tuple": (lambda a: nx.min(a, axis=(0, 1)), [normal(2, 3, 4)]),
    "var_axis": (lambda a: nx.var(a, axis=1), [normal(3, 4)]),
    "var_ddof1": (lambda a: nx.var(a, ddof=1), [normal(3, 4)]),
    "logsumexp_all": (lambda a: nx.logsumexp(a), [normal(3, 4)]),
    "logsumexp_last": (lambda a: nx.logsumexp(a, axis=-1), [normal(3, 4)]),
    "logsumexp_tuple_keepdims": (
        lambda a: nx.logsumexp(a, axis=(0, 2), keepdims=True), [normal(2, 3, 2)]),
    "softmax_last": (lambda a: nx.softmax(a), [normal(3, 4)]),
    "softmax_first": (lambda a: nx.softmax(a, axis=0), [normal(3, 4)]),
    "log_softmax_last": (lambda a: nx.log_softmax(a), [normal(3, 4)]),
    "log_softmax_middle": (lambda a: nx.log_softmax(a, axis=1), [normal(2, 3, 2)]),
    # joining
    "concat_axis1": (lambda a, b, c: nx.concat([a, b, c], axis=1),
                     [normal(2, 1), normal(2, 3), normal(2, 2)]),
    "concat_axis0": (lambda a, b: nx.concat([a, b]), [normal(1, 3), normal(2, 3)]),
    "stack": (lambda a, b: nx.stack([a, b], axis=1), [normal(2, 3), normal(2, 3)]),
    # nn ops
    "cross_entropy_mean": (lambda z: nx.cross_entropy(z, nx.tensor(LABELS)), [normal(4, 3)]),
    "cross_entropy_sum": (lambda z: nx.cross_entropy(z, nx.tensor(LABELS), reduction="sum"),
                          [normal(4, 3)]),
    "cross_entropy_none": (lambda z: nx.cross_entropy(z, nx.tensor(LABELS), reduction="none"),
                           [normal(4, 3)]),
    "conv2d_bias_stride_padding": (
        lambda x, w, b: nx.conv2d(x, w, b, stride=2, padding=1),
        [normal(1, 2, 5, 4), normal(3, 2, 3, 2), normal(3)]),
    "conv2d_no_bias": (lambda x, w: nx.conv2d(x, w), [normal(2, 1, 4, 4), normal(2, 1, 2, 2)]),
    "conv2d_stride1_padded": (lambda x, w: nx.conv2d(x, w, padding=1),
                              [normal(2, 2, 4, 5), normal(3, 2, 3, 2)]),
    "conv2d_stride1_pad_beyond_kernel": (lambda x, w: nx.conv2d(x, w, padding=1),
                                         [normal(1, 2, 3, 3), normal(2, 2, 1, 1)]),
    # up to 32 output channels take the direct kernels (forward and weight gradient)
    "conv2d_direct": (lambda x, w, b: nx.conv2d(x, w, b), [normal(2, 2, 4, 7), normal(8, 2, 2, 3), normal(8)]),
    # three vectors of output channels a block: 24 float64 or 48 float32 channels on AVX-512
    "conv2d_direct_24_channels": (lambda x, w, b: nx.conv2d(x, w, b, stride=(2, 1), padding=(1, 2)),
                                  [normal(2, 2, 5, 9), normal(24, 2, 2, 4), normal(24)]),
    "conv2d_direct_48_channels": (lambda x, w, b: nx.conv2d(x, w, b, padding=1),
                                  [normal(1, 2, 4, 11), normal(48, 2, 3, 3), normal(48)]),
    "conv2d_direct_padded_strided": (
        lambda x, w, b: nx.conv2d(x, w, b, stride=2, padding=1),
        [normal(2, 1, 5, 6), normal(8, 1, 3, 3), normal(8)]),
    "conv2d_depthwise_strided": (lambda x, w, b: nx.conv2d(x, w, b, stride=2, padding=1, groups=3),
                                 [normal(2, 3, 5, 6), normal(3, 1, 3, 3), normal(3)]),
    "conv2d_grouped_multiplier": (lambda x, w: nx.conv2d(x, w, padding=(1, 0), groups=2),
                                  [normal(1, 4, 4, 5), normal(6, 2, 3, 2)]),
    "conv2d_grouped_wide": (lambda x, w, b: nx.conv2d(x, w, b, stride=2, groups=2),
                            [normal(1, 4, 5, 5), normal(16, 2, 2, 2), normal(16)]),
    "max_pool2d": (lambda x: nx.max_pool2d(x, 2), [normal(1, 2, 4, 4)]),
    "max_pool2d_overlapping": (lambda x: nx.max_pool2d(x, 2, 1), [normal(1, 1, 4, 4)]),
    "avg_pool2d": (lambda x: nx.avg_pool2d(x, 2), [normal(1, 2, 4, 4)]),
    "avg_pool2d_overlapping": (lambda x: nx.avg_pool2d(x, 3, 1), [normal(1, 1, 4, 5)]),
    "dropout": (dropout, [normal(4, 5)]),
    "layer_norm_affine": (lambda x, w, b: nx.layer_norm(x, (4,), w, b),
                          [normal(3, 4), normal(4), normal(4)]),
    "layer_norm_two_dims": (lambda x: nx.layer_norm(x, (3, 2)), [normal(2, 3, 2)]),
    "batch_norm_training": (
        lambda x, w, b: nx.batch_norm(x, nx.zeros(3, dtype="float64"),
                                      nx.ones(3, dtype="float64"), w, b, training=True),
        [normal(4, 3), normal(3), normal(3)]),
    "batch_norm_training_4d": (
        lambda x: nx.batch_norm(x, nx.zeros(2, dtype="float64"), nx.ones(2, dtype="float64"),
                                training=True),
        [normal(2, 2, 2, 3)]),
    "batch_norm_eval": (
        lambda x, w, b: nx.batch_norm(x, nx.tensor([0.5, -1.0, 0.0], dtype="float64"),
                                      nx.tensor([2.0, 0.5, 1.0], dtype="float64"), w, b),
        [normal(4, 3), normal(3), normal(3)]),
    "mlp_loss": (mlp, [normal(4, 3), normal(3, 5), normal(5), normal(5, 3)]),
    # views
    "reshape": (lambda a: a.reshape(3, -1), [normal(2, 3, 2)]),
    "transpose": (lambda a: a.transpose(0, 2), [normal(2, 3, 2)]),
    "permute": (lambda a: a.permute(2, 0, 1), [normal(2, 3, 2)]),
    "T": (lambda a: a.T, [normal(3, 4)]),
    "expand": (lambda a: a.expand(2, 3, 4), [normal(3, 1)]),
    "contiguous_of_transpose": (lambda a: a.T.contiguous(), [normal(3, 4)]),
    "slice_with_step": (lambda a: a[1:, ::2], [normal(3, 5)]),
    "int_index": (lambda a: a[1], [normal(3, 4)]),
    "ellipsis_and_new_axis": (lambda a: a[..., 1][None], [normal(2, 3, 4)]),
    "gather_repeated": (lambda a: a[[0, 2, 0, 0]], [normal(3, 2)]),
    "gather_2d_index": (lambda a: a[np.array([[1, 1], [0, 2]])], [normal(3, 2)]),
    "view_then_op": (lambda a: (a.T[1:] * 2.0).exp(), [normal(3, 4)]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_gradient_matches_finite_differences(name):
    fn, generators = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    gradcheck(fn, [make_input(rng) for make_input in generators])


# Cases whose function builds float64 constants or draws a dtype-dependent random mask.
FLOAT64_ONLY = {"dropout", "batch_norm_training", "batch_norm_training_4d", "batch_norm_eval"}


@pytest.mark.parametrize("name", [n for n in CASES if n not in FLOAT64_ONLY])
def test_float32_gradient_agrees_with_float64(name):
    fn, generators = CASES[name]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    inputs = [np.asarray(g(rng), np.float32).astype(np.float64) for g in generators]
    grads = {}
    for dtype in ("float32", "float64"):
        leaves = [nx.tensor(x, dtype=dtype, requires_grad=True) for x in inputs]
        out = fn(*leaves)
        assert out.dtype == getattr(nx, dtype)
        if out.numel() == 1:
            out.backward()
        else:
            out.backward(nx.tensor(np.ones(out.shape), dtype=dtype))
        grads[dtype] = [np.asarray(leaf.grad.numpy(), np.float64) for leaf in leaves]
    for k, (g32, g64) in enumerate(zip(grads["float32"], grads["float64"])):
        np.testing.assert_allclose(g32, g64, rtol=1e-4, atol=1e-5, err_msg=f"input {k}")
