"""Calls the API fuzzer (test_fuzz_api.py) once crashed the process with, kept as named cases."""

import math

import numpy as np
import pytest

import nexus as nx
from nexus import _C


@pytest.mark.parametrize("fn, expected", [(nx.softmax, 1.0), (nx.log_softmax, 0.0)])
def test_softmax_of_a_0d_tensor_is_one_not_a_read_past_its_shape(fn, expected):
    # axis 0 of a 0-d tensor is valid (as in numpy and torch) and reduces nothing; it used to
    # index the empty shape and crash.
    assert fn(nx.tensor(2.0), axis=0).item() == expected
    assert fn(nx.tensor(-3.5), axis=-1).item() == expected
    assert math.isnan(fn(nx.tensor(float("inf")), axis=0).item())  # inf - inf, as torch


@pytest.mark.parametrize("call", [lambda t: _C.slice(t, 0, 0, 1, 1), lambda t: _C.select(t, 0, 0)])
def test_slicing_a_0d_tensor_natively_is_an_index_error(call):
    with pytest.raises(IndexError, match="0-d tensor"):
        call(nx.tensor(1.0))


@pytest.mark.parametrize("step", [2**62, 2**63 - 1])
def test_a_step_past_the_axis_keeps_one_element_without_overflow(step):
    t = nx.arange(10)
    assert t[2:9:step].tolist() == [2] and t[::step].tolist() == [0]


INT_LIMITS = [(nx.int32, np.int32), (nx.int64, np.int64)]


@pytest.mark.parametrize("dtype, np_dtype", INT_LIMITS, ids=["int32", "int64"])
def test_integer_arithmetic_at_the_limits_wraps_as_numpy(dtype, np_dtype):
    # abs and negation of INT_MIN, and sums past INT_MAX, were signed overflow (undefined
    # behaviour, found by UBSan); they wrap as in numpy and torch.
    info = np.iinfo(np_dtype)
    a = np.array([info.min, info.max, -1, 0, 7], dtype=np_dtype)
    b = np.array([-1, 1, info.min, info.max, info.max], dtype=np_dtype)
    ta, tb = nx.tensor(a, dtype=dtype), nx.tensor(b, dtype=dtype)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(nx.abs(ta).numpy(), np.abs(a))
        np.testing.assert_array_equal((-ta).numpy(), -a)
        np.testing.assert_array_equal((ta + tb).numpy(), a + b)
        np.testing.assert_array_equal((ta - tb).numpy(), a - b)
        np.testing.assert_array_equal((ta * tb).numpy(), a * b)
        np.testing.assert_array_equal((ta // -1).numpy(), a // -1)
    big = np.full((3, 5), info.max, dtype=np.int64)
    np.testing.assert_array_equal(nx.sum(nx.tensor(big), axis=0).numpy(), big.sum(axis=0))
    np.testing.assert_array_equal(nx.sum(nx.tensor(big), axis=1).numpy(), big.sum(axis=1))
    assert nx.sum(nx.tensor(big)).item() == int(big.sum())


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_integer_powers_are_exact_and_wrap_as_numpy(dtype):
    # Integer pow went through a float pow (not exact where that rounds down); it is by
    # squaring now, on the host as on a device.
    x = np.array([3, -3, 7, 2, 160000, -1, 0, 1], dtype=dtype)
    y = np.array([2, 3, 0, 62, 2, 7, 0, 50], dtype=dtype)
    np.testing.assert_array_equal(nx.pow(nx.tensor(x), nx.tensor(y)).numpy(), x**y)


def test_an_empty_tensor_with_a_huge_dim_goes_to_numpy_without_overflow():
    # Its byte strides (2^62 * itemsize) overflowed int64 on the way to numpy (UBSan); numpy
    # itself refuses such a shape, with a ValueError.
    t = nx.full([0, 2**62], 0.0)
    assert t.numel() == 0
    with pytest.raises(ValueError):
        t.numpy()


@pytest.mark.parametrize("build", [lambda g: g.input("x", nx.Shape(1, 2**50)).dense(4),
                                   lambda g: g.input("x", nx.Shape(1, 3)).dense(2**62),
                                   lambda g: g.input("x", nx.Shape(1, 2**40, 8, 8)).conv2d(2**40, 3)])
def test_a_layer_no_allocation_can_hold_is_a_memory_error_naming_it(build):
    # The model fuzzer's finding: numpy's "array is too big" ValueError came through unexplained.
    with pytest.raises(MemoryError, match="layer '(dense|conv2d)_1': a weight of shape .* cannot be allocated"):
        build(nx.GraphBuilder())


@pytest.mark.parametrize("padding", [2**62, 2**63 - 1])
def test_a_padding_past_int64_is_a_value_error_not_a_wrapped_size(padding):
    # h + 2 * padding overflowed (undefined behaviour) and the message showed a negative size.
    with pytest.raises(ValueError, match=f"conv2d: padding {padding} is too large"):
        nx.conv2d(nx.ones((1, 1, 3, 3)), nx.ones((1, 1, 3, 3)), padding=padding)


@pytest.mark.parametrize("shape", [(2, 2**62), (2**50, 2**50), (-1, 2**62, 4)])
def test_a_reshape_to_dims_multiplying_past_int64_is_a_value_error(shape):
    # The product of the target dims overflowed (UBSan) before it was compared with numel.
    with pytest.raises(ValueError, match="reshape: cannot reshape"):
        nx.ones(5).reshape(*shape)
    assert nx.ones(0).reshape(0, 2**62, 2**62).shape == (0, 2**62, 2**62)
