"""CompiledModel.train_step's reducer hook (what data-parallel training rides on): begin() sees the
step's rows, every parameter's gradient reaches on_grad_ready once, during backward, in
backward's order, pointing at the final gradient; finish() gets all of them before the update,
which applies what it leaves, and its loss is the step's. A Python GradReducer stands in for
nexus._C_mpi's DataParallelReducer here."""

import numpy as np
import pytest

import nexus as nx
from nexus import _C


class Recorder(_C.GradReducer):
    """Records the calls; finish() multiplies the gradients by `scale` and returns loss + 1."""

    def __init__(self, scale=1.0):
        super().__init__()
        self.scale, self.calls, self.ready = scale, [], []

    def begin(self, samples):
        self.calls.append(("begin", samples))

    def on_grad_ready(self, param, grad):
        self.ready.append((param, grad.data_ptr(), grad.numpy().copy()))

    def finish(self, grads, loss):
        self.calls.append(("finish", [g.data_ptr() for g in grads]))
        for g in grads:
            g.numpy()[...] *= self.scale
        return loss + 1.0


def model(fusion=True):
    g = nx.GraphBuilder(seed=0)
    g.input("x", nx.Shape(1, 12)).dense(16, "relu").dense(8, "tanh").dense(3, "softmax")
    return g.compile(loss="cross_entropy", optimizer=nx.optim.SGD(lr=0.1), fusion=fusion)


def batch(rows=5):
    rng = np.random.default_rng(0)
    return (nx.tensor(rng.standard_normal((rows, 12)).astype(np.float32)),
            nx.tensor(rng.integers(0, 3, rows)))


def step(m, x, y, reducer=None, lr=0.1):
    state = m.optimizer.native_state()
    return m._native.train_step(x, y, m._opt_config, lr, state, reducer)


def params(m):
    return [p.numpy().copy() for p in m._native.params]


@pytest.mark.parametrize("fusion", [True, False])
def test_every_gradient_is_reported_once_in_backward_order_pointing_at_the_result(fusion):
    m = model(fusion)
    x, y = batch()
    r = Recorder()
    loss = step(m, x, y, r)
    grads = list(m._native.grads)
    assert r.calls[0] == ("begin", 5)
    assert r.calls[1] == ("finish", [g.data_ptr() for g in grads])
    assert sorted(p for p, _, _ in r.ready) == list(range(len(grads)))  # each one, once
    for p, ptr, values in r.ready:
        assert ptr == grads[p].data_ptr()
        np.testing.assert_array_equal(values, grads[p].numpy())  # final when reported
    order = [p for p, _, _ in r.ready]
    assert order.index(len(grads) - 1) < order.index(0)  # the last layer's come first
    # The hook changes nothing else: the same loss (plus finish's 1) and weights as without it.
    plain = model(fusion)
    assert step(plain, x, y) + 1.0 == loss
    for a, b in zip(params(plain), params(m)):
        np.testing.assert_array_equal(a, b)


def test_the_update_applies_the_gradients_the_reducer_leaves():
    halved, plain = model(), model()
    x, y = batch()
    step(halved, x, y, Recorder(scale=0.5), lr=0.1)
    step(plain, x, y, lr=0.05)  # a power of two: lr * (g / 2) == (lr / 2) * g bit for bit
    for a, b in zip(params(plain), params(halved)):
        np.testing.assert_array_equal(a, b)


def test_a_step_without_rows_runs_no_backward_and_hands_over_zeros():
    m = model()
    before = params(m)
    r = Recorder()
    x = nx.tensor(np.zeros((0, 12), np.float32))
    y = nx.tensor(np.zeros(0, np.int64))
    assert step(m, x, y, r) == 1.0  # finish's loss + 1, from a loss of 0
    assert r.calls[0] == ("begin", 0) and r.ready == []
    assert all(not g.numpy().any() for g in m._native.grads)
    for a, b in zip(before, params(m)):  # SGD on zero gradients
        np.testing.assert_array_equal(a, b)


def test_a_reducer_that_raises_leaves_the_weights_untouched():
    class Failing(Recorder):
        def finish(self, grads, loss):
            raise RuntimeError("the ring broke")

    m = model()
    before = params(m)
    with pytest.raises(RuntimeError, match="the ring broke"):
        step(m, *batch(), Failing())
    for a, b in zip(before, params(m)):
        np.testing.assert_array_equal(a, b)


def test_a_reducer_that_is_not_a_grad_reducer_is_a_type_error():
    m = model()
    with pytest.raises(TypeError):
        step(m, *batch(), lambda *a: None)
