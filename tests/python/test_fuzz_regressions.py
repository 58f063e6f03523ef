"""Calls the API fuzzer (test_fuzz_api.py) once crashed the process with, kept as named cases."""

import math

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
