"""CompiledModel.forward_backward's gradient-ready hook (what data-parallel overlap rides on):
every parameter's gradient is reported once, during backward, in backward's order, pointing at
the final gradient. The hook is a capsule of a C function; ctypes makes one here."""

import ctypes

import numpy as np
import pytest

import nexus as nx

FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p, ctypes.c_int64)


class Hook(ctypes.Structure):
    _fields_ = [("fn", FN), ("ctx", ctypes.c_void_p)]


def capsule(callback):
    fn = FN(callback)
    hook = Hook(fn, None)
    new = ctypes.pythonapi.PyCapsule_New
    new.restype = ctypes.py_object
    new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
    return new(ctypes.addressof(hook), b"nexus.grad_ready", None), (fn, hook)


@pytest.mark.parametrize("fusion", [True, False])
def test_every_gradient_is_reported_once_in_backward_order_pointing_at_the_result(fusion):
    g = nx.GraphBuilder(seed=0)
    g.input("x", nx.Shape(1, 12)).dense(16, "relu").dense(8, "tanh").dense(3, "softmax")
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.SGD(lr=0.1), fusion=fusion)
    native = model._native
    seen = []
    cap, keep = capsule(lambda ctx, p, data, numel: seen.append((p, data, numel)))
    rng = np.random.default_rng(0)
    x = nx.tensor(rng.standard_normal((5, 12)).astype(np.float32))
    y = nx.tensor(rng.integers(0, 3, 5))
    loss = native.forward_backward(x, y, cap)
    grads = list(native.grads)
    assert sorted(p for p, _, _ in seen) == list(range(len(grads)))  # each one, once
    for p, data, numel in seen:
        assert data == grads[p].data_ptr() and numel == grads[p].numel()
    order = [p for p, _, _ in seen]
    assert order.index(len(grads) - 1) < order.index(0)  # the last layer's come first
    # The hook changes nothing: same loss and gradients as a pass without it.
    want = [t.numpy().copy() for t in grads]
    assert native.forward_backward(x, y) == loss
    for t, w in zip(native.grads, want):
        np.testing.assert_array_equal(t.numpy(), w)
    del keep


def test_a_hook_that_is_not_the_capsule_is_a_type_error():
    g = nx.GraphBuilder(seed=0)
    g.input("x", nx.Shape(1, 4)).dense(2, "softmax")
    model = g.compile(loss="cross_entropy")
    x, y = nx.tensor(np.zeros((2, 4), np.float32)), nx.tensor(np.zeros(2, np.int64))
    with pytest.raises(TypeError, match="OverlapReduction"):
        model._native.forward_backward(x, y, lambda *a: None)
