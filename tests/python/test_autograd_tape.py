"""How the eager tape behaves: accumulation, reset, no_grad, detach, broadcasting and view
gradients, and the errors it raises. Per-op gradient values are in test_autograd.py."""

import numpy as np
import pytest

import nexus as nx


def leaf(values, dtype="float64"):
    return nx.tensor(np.asarray(values, dtype=np.float64), dtype=dtype, requires_grad=True)


def grad_of(t):
    assert t.grad is not None
    return np.asarray(t.grad.numpy())


def test_leaf_created_with_requires_grad_reports_it():
    x = leaf([1.0, 2.0])
    assert x.requires_grad is True
    assert x.grad is None


def test_grad_accumulates_over_backward_calls():
    x = leaf([1.0, -2.0, 3.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2.0, -4.0, 6.0])
    (x * x).sum().backward()
    np.testing.assert_allclose(grad_of(x), [4.0, -8.0, 12.0])


def test_setting_grad_to_none_resets_accumulation():
    x = leaf([1.0, 2.0])
    (x * 3.0).sum().backward()
    x.grad = None
    assert x.grad is None
    (x * 5.0).sum().backward()
    np.testing.assert_allclose(grad_of(x), [5.0, 5.0])


def test_backward_with_a_gradient_weights_a_non_scalar_output():
    x = leaf([[1.0, 2.0], [3.0, 4.0]])
    y = x * 2.0
    y.backward(nx.tensor([[1.0, 0.5], [-1.0, 2.0]], dtype="float64"))
    np.testing.assert_allclose(grad_of(x), [[2.0, 1.0], [-2.0, 4.0]])


def test_backward_of_a_one_element_non_0d_output_needs_no_gradient():
    x = leaf([[2.0]])
    (x * x).backward()
    np.testing.assert_allclose(grad_of(x), [[4.0]])


def test_backward_of_a_non_scalar_without_gradient_raises_value_error():
    y = leaf([1.0, 2.0]) * 2.0
    with pytest.raises(ValueError):
        y.backward()


def test_a_tensor_reused_along_two_paths_sums_both_contributions():
    x = leaf([1.5, -0.5])
    y = x * x + x * 3.0 + nx.exp(x)
    y.sum().backward()
    np.testing.assert_allclose(grad_of(x), 2 * np.array([1.5, -0.5]) + 3 + np.exp([1.5, -0.5]))


def test_requires_grad_propagates_only_from_leaves_that_require_it():
    x = leaf([1.0, 2.0])
    c = nx.tensor([3.0, 4.0], dtype="float64")
    assert (x + c).requires_grad is True
    assert (c * c).requires_grad is False
    assert nx.sum(x).requires_grad is True


def test_requires_grad_can_be_set_on_a_leaf():
    x = nx.tensor([1.0, 2.0])
    x.requires_grad = True
    assert x.requires_grad
    (x * 2.0).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2.0, 2.0])


def test_constants_in_the_graph_get_no_gradient():
    x = leaf([1.0, 2.0])
    c = nx.tensor([3.0, 4.0], dtype="float64")
    (x * c).sum().backward()
    assert c.grad is None
    np.testing.assert_allclose(grad_of(x), [3.0, 4.0])


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_leaf_gradient_has_the_leaf_dtype_and_shape(dtype):
    x = leaf([[1.0, 2.0, 0.5]], dtype=dtype)
    (x * x).sum().backward()
    assert x.grad.dtype == getattr(nx, dtype)
    assert x.grad.shape == (1, 3)
    np.testing.assert_allclose(x.grad.astype("float32").numpy(), [[2.0, 4.0, 1.0]])


# --------------------------------------------------------------------------- no_grad, detach

def test_no_grad_records_nothing():
    x = leaf([1.0, 2.0])
    with nx.no_grad():
        y = x * 2.0
        z = nx.exp(x).sum()
    assert y.requires_grad is False
    assert z.requires_grad is False
    np.testing.assert_allclose(y.numpy(), [2.0, 4.0])
    assert (x * 2.0).requires_grad is True


def test_no_grad_restores_recording_after_an_exception():
    x = leaf([1.0])
    with pytest.raises(RuntimeError):
        with nx.no_grad():
            raise RuntimeError("boom")
    assert (x * 2.0).requires_grad is True


def test_no_grad_decorates_with_or_without_parentheses_as_torch():
    x = leaf([1.0, 2.0])

    @nx.no_grad
    def bare(t):
        """doc kept"""
        return t * 2.0

    @nx.no_grad()
    def called(t):
        return t * 3.0

    assert bare(x).requires_grad is False and called(x).requires_grad is False
    assert bare.__name__ == "bare" and bare.__doc__ == "doc kept"
    np.testing.assert_allclose(called(x).numpy(), [3.0, 6.0])
    assert nx.is_grad_enabled() and (x * 2.0).requires_grad is True
    with pytest.raises(TypeError, match="decorates a function"):
        nx.no_grad(3)


def test_requires_grad_underscore_sets_the_flag_and_returns_the_tensor():
    x = nx.tensor([1.0, 2.0])
    assert x.requires_grad_() is x and x.requires_grad is True
    (x * x).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2.0, 4.0])
    assert x.requires_grad_(False) is x and x.requires_grad is False
    w = nx.ones(2).requires_grad_()  # the torch idiom for a fresh parameter
    assert w.is_leaf and w.requires_grad
    with pytest.raises(TypeError, match="only floating-point tensors"):
        nx.tensor([1, 2]).requires_grad_()


def test_detach_shares_values_but_cuts_the_graph():
    x = leaf([1.0, 2.0])
    d = x.detach()
    assert d.requires_grad is False
    np.testing.assert_array_equal(d.numpy(), [1.0, 2.0])
    (d * x * 1.0 + x).sum().backward()
    np.testing.assert_allclose(grad_of(x), [2.0, 3.0])


# --------------------------------------------------------------------------- shapes of gradients

def test_broadcast_gradients_are_summed_back_to_each_input_shape():
    a, b, c = leaf(np.ones((3, 1))), leaf(np.ones(4) * 2), leaf(3.0)
    (a * b + c).sum().backward()
    assert a.grad.shape == (3, 1) and b.grad.shape == (4,) and c.grad.shape == ()
    np.testing.assert_allclose(grad_of(a), np.full((3, 1), 8.0))
    np.testing.assert_allclose(grad_of(b), np.full(4, 3.0))
    np.testing.assert_allclose(grad_of(c), 12.0)


def test_gather_with_repeated_indices_accumulates():
    x = leaf([10.0, 20.0, 30.0])
    x[[0, 2, 0, 0]].sum().backward()
    np.testing.assert_allclose(grad_of(x), [3.0, 0.0, 1.0])


def test_gather_with_a_tensor_index_accumulates_rows():
    x = leaf(np.arange(6.0).reshape(3, 2))
    x[nx.tensor([[2, 2], [1, 2]])].sum().backward()
    np.testing.assert_allclose(grad_of(x), [[0.0, 0.0], [1.0, 1.0], [3.0, 3.0]])


def test_slice_gradient_is_zero_outside_the_slice():
    x = leaf(np.zeros((3, 4)))
    x[1:, ::2].sum().backward()
    expected = np.zeros((3, 4))
    expected[1:, ::2] = 1.0
    np.testing.assert_array_equal(grad_of(x), expected)


def test_expand_gradient_sums_over_expanded_dimensions():
    x = leaf([[1.0], [2.0]])
    x.expand(3, 2, 4).sum().backward()
    np.testing.assert_array_equal(grad_of(x), [[12.0], [12.0]])


def test_transpose_gradient_is_transposed_back():
    x = leaf(np.zeros((2, 3)))
    w = np.arange(6.0).reshape(3, 2)
    (x.T * nx.tensor(w)).sum().backward()
    np.testing.assert_array_equal(grad_of(x), w.T)


def test_gradient_reaches_a_leaf_through_reshape_and_views():
    x = leaf(np.arange(6.0))
    y = x.reshape(2, 3).T[1:].contiguous().reshape(-1)
    (y * nx.tensor([1.0, 2.0, 3.0, 4.0], dtype="float64")).sum().backward()
    # y = [x1, x4, x2, x5]
    np.testing.assert_array_equal(grad_of(x), [0.0, 1.0, 3.0, 0.0, 2.0, 4.0])


# --------------------------------------------------------------------------- what cannot have grad

@pytest.mark.parametrize("dtype", ["int32", "int64", "bool"])
def test_integer_and_bool_tensors_cannot_require_grad(dtype):
    with pytest.raises(TypeError):
        nx.tensor([1, 0], dtype=dtype, requires_grad=True)
    t = nx.zeros(2, dtype=dtype)
    with pytest.raises(TypeError):
        t.requires_grad = True
    assert t.requires_grad is False


def test_comparison_and_argmax_results_do_not_require_grad():
    x = leaf([1.0, 3.0, 2.0])
    assert (x > 1.5).requires_grad is False
    assert nx.argmax(x).requires_grad is False
