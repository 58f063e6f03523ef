"""Finite-difference gradient check for the eager autograd tape.

gradcheck(fn, inputs) builds float64 leaves from `inputs`, runs `fn(*leaves)`, back-propagates a
random upstream gradient `v` (or calls .backward() for a one-element output) and compares every
leaf's .grad with central differences of sum(fn(*inputs) * v).
"""

import numpy as np

import nexus as nx


def numeric_grads(fn, arrays, v, eps):
    def objective(values):
        out = fn(*[nx.tensor(a) for a in values])
        return float(np.sum(np.asarray(out.numpy(), dtype=np.float64) * v))

    grads = []
    for i, base in enumerate(arrays):
        grad = np.zeros_like(base)
        for j in range(base.size):
            values = [a.copy() for a in arrays]
            flat = values[i].reshape(-1)
            flat[j] = base.reshape(-1)[j] + eps
            plus = objective(values)
            flat[j] = base.reshape(-1)[j] - eps
            minus = objective(values)
            grad.reshape(-1)[j] = (plus - minus) / (2 * eps)
        grads.append(grad)
    return grads


def gradcheck(fn, inputs, *, eps=1e-6, rtol=1e-5, atol=1e-6, seed=0):
    """Check analytic gradients of `fn` against central finite differences, in float64."""
    arrays = [np.array(x, dtype=np.float64) for x in inputs]
    leaves = [nx.tensor(a.copy(), requires_grad=True) for a in arrays]
    out = fn(*leaves)
    assert out.requires_grad, "output of a differentiable op on leaves must require grad"
    shape = tuple(out.shape)
    if int(np.prod(shape)) == 1:
        v = np.ones(shape)
        out.backward()
    else:
        rng = np.random.default_rng(seed)
        v = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        out.backward(nx.tensor(v))
    expected = numeric_grads(fn, arrays, v, eps)
    for k, (leaf, want) in enumerate(zip(leaves, expected)):
        assert leaf.grad is not None, f"input {k} got no gradient"
        assert tuple(leaf.grad.shape) == want.shape, f"input {k}: grad shape {leaf.grad.shape}"
        assert leaf.grad.dtype == nx.float64, f"input {k}: grad dtype {leaf.grad.dtype}"
        got = np.asarray(leaf.grad.numpy(), dtype=np.float64)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"input {k}")
