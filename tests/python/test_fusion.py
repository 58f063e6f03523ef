"""nx.jit and the fusion pass: fused results against the eager ops, kernel counts, refusals,
retracing, kernel reuse and untraceable code."""

import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import nexus as nx
from jit_cases import chain, chain_sum


def test_chain_is_one_kernel_bitwise_equal_to_eager(rng):
    f = nx.jit(chain)
    x = nx.tensor(rng.standard_normal((300, 70)).astype(np.float32))
    got = f(x)
    assert np.array_equal(got.numpy(), chain(x).numpy())
    s = f.stats()
    assert s["kernels"] == 1 and s["traces"] == 1
    assert s["bytes_fused"] == 2 * 300 * 70 * 4
    assert s["bytes_fused"] < s["bytes_unfused"]


def test_reduction_epilogue_joins_the_chain(rng):
    f = nx.jit(chain_sum)
    x = nx.tensor(rng.standard_normal((64, 1000)).astype(np.float32))
    got = f(x)
    assert got.shape == (64,)
    np.testing.assert_allclose(got.numpy(), chain_sum(x).numpy(), rtol=1e-5)
    assert f.stats()["kernels"] == 1


def test_matmul_runs_between_fused_groups(rng):
    w = nx.tensor(rng.standard_normal((16, 8)).astype(np.float32))
    b = nx.tensor(rng.standard_normal(8).astype(np.float32))
    f = nx.jit(lambda t: chain(nx.relu((t * 2.0) @ w + b)))
    x = nx.tensor(rng.standard_normal((5, 16)).astype(np.float32))
    ref = chain(nx.relu((x * 2.0) @ w + b))
    np.testing.assert_array_equal(f(x).numpy(), ref.numpy())
    # bias + relu + chain after the matmul are one kernel; t*2 alone before it runs as its op
    assert f.stats()["kernels"] == 1
    assert "1 fused kernel(s), 2 regular op(s) per call" in f.explain()
    assert "epilogue of node" in f.explain()


def test_explain_lists_groups_bytes_refusals_and_source(rng):
    f = nx.jit(lambda a, b: (nx.exp(a) + 1.0, nx.sum(nx.exp(a), axis=0) * b))
    a = nx.tensor(rng.standard_normal((4, 3)).astype(np.float32))
    b = nx.tensor(rng.standard_normal(3).astype(np.float32))
    out1, out2 = f(a, b)
    np.testing.assert_allclose(out2.numpy(), (nx.sum(nx.exp(a), axis=0) * b).numpy(), rtol=1e-6)
    text = f.explain()
    assert "bytes read+written per call" in text
    assert "refused: cannot fuse" in text
    assert "extern \"C\"" in text and "nx_key" in text


def test_retraces_only_when_the_shape_class_or_dtype_changes(rng):
    f = nx.jit(chain)
    for n in (4, 9, 31):
        f(nx.randn(n, 3))
    assert f.stats()["traces"] == 1
    f(nx.randn(5, 1))  # a broadcast dimension: another class
    f(nx.randn(4, 3, dtype="float64"))
    assert f.stats()["traces"] == 3


def test_identical_subgraphs_share_kernels():
    f = nx.jit(lambda t: nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(t) - 0.5 * t)
    g = nx.jit(lambda t: nx.gelu(t * 2.5 + 0.1) * nx.sigmoid(t) - 0.25 * t)  # other constants
    x = nx.randn(8, 8)
    f(x)
    before = nx._C.codegen.cache_stats()
    got = g(x)
    np.testing.assert_array_equal(got.numpy(), (nx.gelu(x * 2.5 + 0.1) * nx.sigmoid(x) - 0.25 * x).numpy())
    assert nx._C.codegen.cache_stats()["compiles"] == before["compiles"]  # same program reused
    assert g.stats()["kernels"] == 1


def test_untraceable_code_raises_a_clear_error():
    x = nx.randn(3)
    with pytest.raises(nx.TraceError, match="item"):
        nx.jit(lambda t: t * t.sum().item())(x)
    with pytest.raises(nx.TraceError, match="control flow"):
        nx.jit(lambda t: t if t.sum() > 0 else -t)(x)
    with pytest.raises(nx.TraceError, match="numpy"):
        nx.jit(lambda t: t.numpy())(x)
    with pytest.raises(nx.TraceError, match="must return a tensor"):
        nx.jit(lambda t: 3)(x)
    assert float(x.sum()) == pytest.approx(float(np.sum(x.numpy())), rel=1e-5)  # restored after


def test_other_threads_run_eagerly_while_a_function_is_traced():
    # The trace records only its own thread's ops: another thread's ops and conversions in the
    # middle of it run as usual and never enter the trace.
    started, done, seen = threading.Event(), threading.Event(), {}

    def traced(t):
        started.set()
        assert done.wait(30)
        return nx.tanh(t) * 2.0

    def other():
        assert started.wait(30)
        a = nx.tensor(np.arange(4.0, dtype=np.float32))
        seen["sum"] = (a * 3.0).sum().item()
        seen["numpy"] = nx.exp(a).numpy()
        done.set()

    worker = threading.Thread(target=other)
    worker.start()
    x = nx.tensor(np.linspace(-1, 1, 8, dtype=np.float32))
    f = nx.jit(traced)
    y = f(x)
    worker.join()
    assert seen["sum"] == 18.0
    np.testing.assert_allclose(seen["numpy"], np.exp(np.arange(4.0)), rtol=1e-6)
    np.testing.assert_array_equal(y.numpy(), (nx.tanh(x) * 2.0).numpy())
    graph = f.explain().split("\ngroup ")[0]  # the traced graph: the function's ops only
    assert "unary.tanh" in graph and "exp" not in graph and "sum" not in graph
    assert "input()" in graph and "capture" not in graph


def test_calls_from_many_threads_at_once_each_get_their_own_result(rng):
    # A traced function keeps one executor for its calls; calls that overlap it (the native call
    # runs without the GIL) must neither share its values nor see another call's.
    f = nx.jit(chain)
    xs = [nx.tensor(rng.standard_normal(8).astype(np.float32)) for _ in range(8)]
    refs = [chain(x).numpy() for x in xs]
    f(xs[0])
    wrong = []

    def calls(k):
        for _ in range(500):
            if not np.array_equal(f(xs[k]).numpy(), refs[k]):
                wrong.append(k)

    workers = [threading.Thread(target=calls, args=(k,)) for k in range(len(xs))]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert wrong == []
    assert f.stats()["traces"] == 1


def test_a_result_outlives_the_next_call(rng):
    f = nx.jit(chain)
    a, b = (nx.tensor(rng.standard_normal(50).astype(np.float32)) for _ in range(2))
    first = f(a)
    f(b)
    np.testing.assert_array_equal(first.numpy(), chain(a).numpy())


# ---- gradients: a traced loss gets its backward from the graph's autodiff ----------------------

def loss_of(x, w, y):
    h = nx.tanh(x * w + 0.5) - y
    return nx.mean(h * h)


def eager_grads(fn, *args):
    for t in args:
        if t.requires_grad:
            t.grad = None
    fn(*args).backward()
    return [None if t.grad is None else t.grad.numpy().copy() for t in args if t.requires_grad]


def test_a_traced_loss_has_the_gradients_of_eager_autograd(rng):
    x, w = (nx.tensor(rng.standard_normal(300).astype(np.float32), requires_grad=True) for _ in range(2))
    y = nx.tensor(rng.standard_normal(300).astype(np.float32))
    f = nx.jit(loss_of)
    want = eager_grads(loss_of, x, w, y)
    for _ in range(2):  # traced once, then reused
        got = eager_grads(f, x, w, y)
        for g, r in zip(got, want):
            np.testing.assert_allclose(g, r, rtol=1e-6, atol=1e-9)
    assert f.traces == 1 and f.stats()["kernels"] >= 1  # the loss and its backward: one kernel
    # the gradient that reaches the value is scaled by it; gradients accumulate
    x.grad = w.grad = None
    (f(x, w, y) * 3.0).backward()
    f(x, w, y).backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * want[0], rtol=1e-5, atol=1e-9)
    # without grad mode the same function runs its forward-only trace
    with nx.no_grad():
        assert not f(x, w, y).requires_grad


def kernel_groups(f, *args):
    return [grp for grp, _, _ in f._plan(args, {})[0].kernels]


def test_a_traced_loss_and_its_backward_run_as_one_kernel(rng):
    # The backward does not read the loss (its seed is the constant 1): the loss's kernel also
    # computes the gradients as it reads, and stores nothing else. Same instructions, same bits.
    x, w = (nx.tensor(rng.standard_normal(4096).astype(np.float32), requires_grad=True) for _ in range(2))
    y = nx.tensor(rng.standard_normal(4096).astype(np.float32))
    f = nx.jit(loss_of)
    want = eager_grads(loss_of, x, w, y)
    got = eager_grads(f, x, w, y)
    for g, r in zip(got, want):
        np.testing.assert_array_equal(g, r)
    [group] = kernel_groups(f, x, w, y)
    assert len(group.outputs) == 3 and not len(group.recomputed)  # two gradients, then the loss
    assert float(f(x, w, y)) == float(loss_of(x, w, y))
    # loss.backward() hands the gradients over as they are, so only once per result
    loss = f(x, w, y)
    loss.backward()
    with pytest.raises(RuntimeError, match="a second time"):
        loss.backward()


def test_a_backward_that_reads_the_loss_recomputes_the_chain_instead_of_storing_it(rng):
    # d(m^2)/dh needs m: the backward is a kernel of its own after the loss's, and computes the
    # chain again from x, w and y rather than have the loss's kernel store it. Bits as eager's.
    def squared_loss(x, w, y):
        m = loss_of(x, w, y)
        return m * m
    x, w = (nx.tensor(rng.standard_normal(4096).astype(np.float32), requires_grad=True) for _ in range(2))
    y = nx.tensor(rng.standard_normal(4096).astype(np.float32))
    f = nx.jit(squared_loss)
    want = eager_grads(squared_loss, x, w, y)
    for g, r in zip(eager_grads(f, x, w, y), want):
        np.testing.assert_array_equal(g, r)
    groups = kernel_groups(f, x, w, y)
    forward = next(grp for grp in groups if not len(grp.recomputed))
    backward = next(grp for grp in groups if len(grp.recomputed))
    assert len(forward.outputs) == 1  # the loss alone
    assert set(backward.recomputed) <= set(forward.nodes) and len(backward.outputs) == 2
    assert "recomputing nodes" in f.explain(x, w, y)
    # with a seed other than 1 the gradients are scaled, and a result can go backward again
    x.grad = w.grad = None
    loss = f(x, w, y)
    (loss * 2.0).backward()
    (loss * 2.0).backward()
    np.testing.assert_allclose(x.grad.numpy(), 4 * want[0], rtol=1e-6, atol=1e-12)


def test_weights_read_from_the_closure_get_gradients(rng):
    w = nx.tensor(rng.standard_normal(50).astype(np.float32), requires_grad=True)
    y = nx.tensor(rng.standard_normal(50).astype(np.float32))

    def model_loss(x):
        return nx.sum(nx.sigmoid(x * w) * y)
    x = nx.tensor(rng.standard_normal(50).astype(np.float32))
    model_loss(x).backward()
    want = w.grad.numpy().copy()
    w.grad = None
    nx.jit(model_loss)(x).backward()
    np.testing.assert_allclose(w.grad.numpy(), want, rtol=1e-6, atol=1e-9)
    assert x.grad is None


def test_results_that_are_not_a_scalar_loss_run_eagerly_with_gradients(rng):
    x = nx.tensor(rng.standard_normal(20).astype(np.float32), requires_grad=True)
    f = nx.jit(chain)  # an elementwise result: no loss to differentiate in the graph
    out = f(x)
    np.testing.assert_array_equal(out.numpy(), chain(x).numpy())
    nx.sum(out).backward()
    got = x.grad.numpy().copy()
    x.grad = None
    nx.sum(chain(x)).backward()
    np.testing.assert_array_equal(got, x.grad.numpy())
    assert "not one floating scalar" in next(iter(f._plans.values())).eager


def test_program_errors_name_what_is_wrong():
    f = nx.jit(chain)
    f(nx.randn(4))
    program = next(iter(f._plans.values())).kernels[0][1]
    with pytest.raises(TypeError, match="dtype int32"):
        program.run([nx.zeros(4, dtype="int32")], [1.7, 0.3, 0.5])
    with pytest.raises(ValueError, match="expected 3 constants"):
        program.run([nx.randn(4)], [1.0])


# ---- random chains against eager, in the interpreter (the definition of every kernel) ----------

UNARY = ["exp", "tanh", "sigmoid", "gelu", "relu", "abs", "neg", "sin"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "div"]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32"]
SHAPES = [((5, 4), (4,)), ((5, 4), (5, 1)), ((3, 1, 4), (2, 4)), ((6,), ())]


def build_chain(ops):
    def f(a, b):
        x = a
        for kind, name, k in ops:
            if kind == "u":
                x = getattr(nx, name)(x if name not in ("exp", "sin", "tanh", "sigmoid", "gelu") else x * 0.25)
            elif kind == "b":
                x = getattr(nx, name)(x, b if k else 0.5)
            else:
                x = x.astype(name)
        return x
    return f


op = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(UNARY), st.just(0)),
    st.tuples(st.just("b"), st.sampled_from(BINARY), st.integers(0, 1)),
    st.tuples(st.just("c"), st.sampled_from(["float32", "float16", "float64"]), st.just(0)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=st.lists(op, min_size=1, max_size=6), dt=st.tuples(st.sampled_from(DTYPES), st.sampled_from(DTYPES)),
       shapes=st.sampled_from(SHAPES), reduce=st.sampled_from([None, "sum", "mean", "max"]), seed=st.integers(0, 99))
def test_random_chains_match_eager(monkeypatch, ops, dt, shapes, reduce, seed):
    monkeypatch.setenv("NEXUS_JIT", "0")
    rng = np.random.default_rng(seed)
    a = nx.tensor(rng.uniform(-3, 3, shapes[0]).astype(np.float32)).astype(dt[0])
    b = nx.tensor(rng.uniform(0.5, 3, shapes[1]).astype(np.float32)).astype(dt[1])
    body = build_chain(ops)
    fn = body if reduce is None else (lambda a, b: getattr(nx, reduce)(body(a, b), axis=-1, keepdims=True))
    try:
        ref = fn(a, b)
    except (TypeError, ValueError):
        return  # eager refuses this chain (e.g. unary on bool); so does the trace
    got = nx.jit(fn)(a, b)
    assert got.dtype == ref.dtype and got.shape == ref.shape
    g, r = got.astype("float64").numpy(), ref.astype("float64").numpy()
    if reduce in (None, "max"):
        np.testing.assert_array_equal(g, r)  # same arithmetic, op by op
    else:
        tol = 1e-2 if ref.dtype in (nx.float16, nx.bfloat16) else 1e-5
        np.testing.assert_allclose(g, r, rtol=tol, atol=tol)


GRAD_UNARY = ["exp", "tanh", "sigmoid", "gelu", "relu", "abs", "neg", "sin"]
grad_op = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(GRAD_UNARY), st.just(0)),
    st.tuples(st.just("b"), st.sampled_from(["add", "sub", "mul", "div"]), st.integers(0, 1)),
)


@settings(max_examples=40, deadline=None)
@given(ops=st.lists(grad_op, min_size=1, max_size=6), shapes=st.sampled_from(SHAPES[:3]),
       reduce=st.sampled_from(["sum", "mean"]), seed=st.integers(0, 99))
def test_random_chains_have_the_gradients_of_eager_autograd(ops, shapes, reduce, seed):
    rng = np.random.default_rng(seed)
    a = nx.tensor(rng.uniform(-3, 3, shapes[0]).astype(np.float32), requires_grad=True)
    b = nx.tensor(rng.uniform(0.5, 3, shapes[1]).astype(np.float32), requires_grad=True)
    body = build_chain(ops)

    def fn(a, b):
        return getattr(nx, reduce)(body(a, b))
    want = eager_grads(fn, a, b)
    got = eager_grads(nx.jit(fn), a, b)
    for g, r in zip(got, want):
        assert (g is None) == (r is None)  # b unused: no gradient either way
        if r is not None:
            np.testing.assert_allclose(g, r, rtol=1e-5, atol=1e-6)


def test_strided_and_broadcast_inputs_in_a_compiled_kernel(rng):
    """A transposed (strided) input and a broadcast row: the kernel's other access variants."""
    a = nx.tensor(rng.standard_normal((40, 30)).astype(np.float32))
    b = nx.tensor(rng.standard_normal(40).astype(np.float32))
    f = nx.jit(lambda a, b: chain(a.T * b))
    np.testing.assert_array_equal(f(a, b).numpy(), chain(a.T * b).numpy())
    assert f.stats()["kernels"] == 1


def bias_grad_like(t, b):
    """An elementwise chain that is also summed over the leading axes: one kernel stores both."""
    y = nx.relu(t * 2.0 + b) * nx.sigmoid(t)
    return y, nx.sum(y, axis=0)


@pytest.mark.parametrize("jit", ["1", "0"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_sum_over_leading_axes_stores_its_chain_too(monkeypatch, rng, jit, dtype):
    monkeypatch.setenv("NEXUS_JIT", jit)
    f = nx.jit(bias_grad_like)
    t = nx.tensor(rng.standard_normal((67, 300)).astype(dtype))
    b = nx.tensor(rng.standard_normal(300).astype(dtype))
    y, s = f(t, b)
    ref_y, ref_s = bias_grad_like(t, b)
    # the rows add in order, as the eager sum over axis 0 adds them: equal bit for bit
    np.testing.assert_array_equal(y.numpy(), ref_y.numpy())
    np.testing.assert_array_equal(s.numpy(), ref_s.numpy())
    assert f.stats()["kernels"] == 1
    assert f.stats()["bytes_fused"] == (2 * 67 * 300 + 300 + 300) * np.dtype(dtype).itemsize


def scaled_tanh_and_mean(t):
    y = nx.tanh(t) * 3.0
    return y, nx.mean(y, axis=(0, 1), keepdims=True)


def exp_and_row_sum(t):
    y = nx.exp(t)
    return y, nx.sum(y, axis=-1)


def test_side_outputs_with_several_leading_axes_keepdims_mean_and_strides(rng):
    f = nx.jit(scaled_tanh_and_mean)
    t = nx.tensor(rng.standard_normal((70, 5, 4)).astype(np.float32)).permute(1, 2, 0)  # strided
    y, m = f(t)
    ref_y = nx.tanh(t) * 3.0
    np.testing.assert_array_equal(y.numpy(), ref_y.numpy())
    assert m.shape == (1, 1, 70)
    np.testing.assert_allclose(m.numpy(), ref_y.numpy().mean(axis=(0, 1), keepdims=True), rtol=1e-5, atol=1e-6)
    assert f.stats()["kernels"] == 1


def scaled_and_channel_sums(t):
    y = nx.relu(t) * 2.0
    return y, nx.sum(y, axis=(0, 2, 3), keepdims=True)


@pytest.mark.parametrize("transposed", [False, True])
def test_a_sum_over_axes_with_the_last_also_stores_its_chain(transposed, rng):
    f = nx.jit(exp_and_row_sum)
    x = rng.standard_normal((37, 45)).astype(np.float32)
    t = nx.tensor(x.T.copy()).T if transposed else nx.tensor(x)  # a strided input too
    y, s = f(t)
    np.testing.assert_array_equal(y.numpy(), nx.exp(nx.tensor(x)).numpy())
    np.testing.assert_allclose(s.numpy(), np.exp(x.astype(np.float64)).sum(axis=1), rtol=1e-5)
    assert f.stats()["kernels"] == 1


def test_per_channel_sums_over_batch_and_pixels_store_their_chain_in_one_kernel(rng):
    # a batch norm's backward: the gradient it sums is written in the same pass
    f = nx.jit(scaled_and_channel_sums)
    x = rng.standard_normal((5, 3, 7, 9)).astype(np.float32)
    y, s = f(nx.tensor(x))
    ref = np.maximum(x, 0) * 2
    np.testing.assert_array_equal(y.numpy(), ref)
    np.testing.assert_allclose(s.numpy(), ref.astype(np.float64).sum(axis=(0, 2, 3), keepdims=True), rtol=1e-5)
    assert f.stats()["kernels"] == 1
