"""nx.jit gives eager's results on every call: every op a trace meets is recorded on its inputs,
a trace is reused only while its guards hold (shapes, dtypes, the Python values it read), and
what cannot be guarded raises TraceError naming the line. Fused kernels are interpreted here
(NEXUS_JIT=0: the same programs, bit for bit, without compiles)."""

import random
import types

import nexus as nx
import numpy as np
import pytest
from nexus import _C, _trace


@pytest.fixture(autouse=True)
def interpreted(monkeypatch):
    monkeypatch.setenv("NEXUS_JIT", "0")


def same(jitted, eager, *args, **kwargs):
    got, ref = jitted(*args, **kwargs), eager(*args, **kwargs)
    got, ref = (got, ref) if isinstance(ref, tuple) else ((got,), (ref,))
    for g, r in zip(got, ref, strict=True):
        assert g.dtype == r.dtype and g.shape == r.shape
        # A fused mean may add in another order than the eager one (last-bit differences);
        # stale or misplaced data is far outside this tolerance.
        np.testing.assert_allclose(g.numpy(), r.numpy(), rtol=1e-5, atol=1e-6)


VIEWS = {
    "slice": lambda a: a[1:] + 1,
    "transpose": lambda a: a.T + 1,
    "select": lambda a: a[0] + 1,
    "column slice": lambda a: a[:, 1:] + 1,
    "new axis": lambda a: a[None] * 2,
    "gather": lambda a: a[[0]] + 1,
    "negative index": lambda a: a[-1] - 1,
    "expand": lambda a: a[:1].expand(3, a.shape[1]) + 1,
    "contiguous": lambda a: a.T.contiguous() + 1,
    "astype": lambda a: a.astype("float64") + 1,
    "detach": lambda a: a.detach() * 3,
    "iterate": lambda a: sum(row for row in a) + 0,
    "reshape": lambda a: a.reshape(-1) + 1,
}


@pytest.mark.parametrize("fn", VIEWS.values(), ids=VIEWS.keys())
def test_views_and_conversions_read_each_calls_input(fn):
    f = nx.jit(fn)
    for a in (nx.ones(3, 4), nx.full((3, 4), 3.0), nx.randn(3, 4), nx.randn(5, 2), nx.randn(2, 6).T):
        same(f, fn, a)


def test_a_new_shape_never_gets_the_old_data():
    f = nx.jit(lambda a: a[2:] + 1)
    f(nx.zeros(100_000))
    assert f(nx.full((3,), 5.0)).tolist() == [6.0]


def test_shape_dependent_python_retraces():
    def fn(t):
        return t * 2 if t.shape[0] > 3 else t * 3

    f = nx.jit(fn)
    assert f(nx.ones(5)).tolist() == [2.0] * 5
    assert f(nx.ones(2)).tolist() == [3.0] * 2
    g = nx.jit(lambda a: a * a.shape[0])
    assert g(nx.ones(3)).tolist() == [3.0] * 3
    assert g(nx.ones(2)).tolist() == [2.0] * 2
    h = nx.jit(lambda a: a * len(a))
    assert h(nx.ones(4)).tolist() == [4.0] * 4 and h(nx.ones(1)).tolist() == [1.0]


def test_a_shape_free_trace_serves_other_shapes_without_retracing():
    f = nx.jit(lambda t: nx.exp(t) * 2.0 + t)
    for n in (3, 8, 21):
        same(f, f.fn, nx.randn(n, 2))
    assert f.stats()["traces"] == 1


k = 2


def test_globals_closures_and_defaults_are_guarded():
    global k
    f = nx.jit(lambda t: t * k)
    assert f(nx.ones(2)).tolist() == [2.0, 2.0]
    k = 5
    assert f(nx.ones(2)).tolist() == [5.0, 5.0]
    k = 2

    scales = [1.0, 2.0]

    def g(t):
        return t * scales[0] + scales[1]

    jg = nx.jit(g)
    assert jg(nx.ones(1)).tolist() == [3.0]
    scales[1] = 10.0
    assert jg(nx.ones(1)).tolist() == [11.0]

    cfg = types.SimpleNamespace(power=2.0)
    jh = nx.jit(lambda t, c=cfg: t ** c.power)
    assert jh(nx.full((1,), 3.0)).tolist() == [9.0]
    cfg.power = 3.0
    assert jh(nx.full((1,), 3.0)).tolist() == [27.0]


def helper(t):
    return t + offset


offset = 1.0


def test_helpers_a_function_calls_are_guarded_too():
    global offset
    f = nx.jit(lambda t: helper(t) * 2)
    assert f(nx.zeros(1)).tolist() == [2.0]
    offset = 4.0
    assert f(nx.zeros(1)).tolist() == [8.0]
    offset = 1.0


def test_captured_tensors_are_read_on_every_call():
    w = nx.ones(3)
    f = nx.jit(lambda t: t * w)
    assert f(nx.full((3,), 2.0)).tolist() == [2.0] * 3
    w = nx.full((3,), 4.0)  # rebound
    assert f(nx.full((3,), 2.0)).tolist() == [8.0] * 3
    w.numpy()[:] = 5.0  # updated in place
    assert f(nx.full((3,), 2.0)).tolist() == [10.0] * 3
    assert f.stats()["traces"] == 1


def test_keyword_and_structured_arguments():
    f = nx.jit(lambda a, *, scale=1.0, pair=None: a * scale + pair[0] - pair[1])
    a, b, c = nx.ones(2), nx.full((2,), 3.0), nx.full((2,), 1.0)
    assert f(a, scale=2.0, pair=(b, c)).tolist() == [4.0, 4.0]
    assert f(a, scale=3.0, pair=(c, b)).tolist() == [1.0, 1.0]
    assert f(a, pair=[b, c]).tolist() == [3.0, 3.0]
    d = nx.jit(lambda x: x["a"] - x["b"])
    assert d({"a": b, "b": c}).tolist() == [2.0, 2.0]


def test_what_cannot_be_guarded_raises_naming_the_line():
    mod = types.ModuleType("weights")
    mod.w = nx.ones(2)
    with pytest.raises(nx.TraceError, match=r"test_jit_guards.py:\d+.*not an argument"):
        nx.jit(lambda t: t + mod.w)(nx.ones(2))
    with pytest.raises(nx.TraceError, match=r"test_jit_guards.py:\d+.*`item`"):
        nx.jit(lambda t: t * t.sum().item())(nx.ones(2))
    with pytest.raises(nx.TraceError, match=r"test_jit_guards.py:\d+.*__array__"):
        nx.jit(lambda t: t + float(np.asarray(t).sum()))(nx.ones(2))

    def write(t):
        t[0] = 5.0
        return t + 1

    with pytest.raises(nx.TraceError, match=r"test_jit_guards.py:\d+.*in-place"):
        nx.jit(write)(nx.ones(2))

    def reseed(t):
        nx.manual_seed(0)
        return t + nx.rand(2)

    with pytest.raises(nx.TraceError, match="reseeding"):
        nx.jit(reseed)(nx.ones(2))
    assert np.asarray(nx.ones(2)).tolist() == [1.0, 1.0]  # everything is restored after a failure


def test_captured_tensors_that_require_grad_get_their_gradients():
    w = nx.ones(2, requires_grad=True)
    out = nx.jit(lambda t: t * w)(nx.ones(2) * 3.0)  # not a scalar loss: it runs eagerly
    assert out.requires_grad
    nx.sum(out).backward()
    assert w.grad.tolist() == [3.0, 3.0]
    w.grad = None
    nx.jit(lambda t: nx.sum(t * w))(nx.ones(2) * 3.0).backward()  # a loss: the graph's backward
    assert w.grad.tolist() == [3.0, 3.0]


def test_random_ops_draw_new_numbers_on_every_call():
    f = nx.jit(lambda t: t + nx.rand(4))
    assert f(nx.zeros(4)).tolist() != f(nx.zeros(4)).tolist()


def test_every_native_function_is_recorded_refused_or_not_an_op():
    names = {n for n in dir(_C) if not n.startswith("_") and callable(getattr(_C, n))
             and not isinstance(getattr(_C, n), type)}
    kinds = [_trace.RECORDED, set(_trace.REFUSED), _trace.NOT_OPS]
    for name in names:
        found = sum(name in kind for kind in kinds)
        assert found == 1, f"_C.{name} must be in exactly one of RECORDED, REFUSED, NOT_OPS (is in {found})"
    for kind in kinds:
        assert set(kind) <= names, f"stale names: {set(kind) - names}"


# ---- differential: random traced programs against eager ---------------------------------------

STEPS = [
    lambda t, s: t[1:] if t.shape[0] > 1 else t,
    lambda t, s: t.T,
    lambda t, s: t[None][0],
    lambda t, s: t[:, ::2] if t.ndim == 2 and t.shape[1] > 1 else t,
    lambda t, s: t[[0, -1]],
    lambda t, s: t.astype("float64").astype("float32"),
    lambda t, s: t.contiguous(),
    lambda t, s: t.detach(),
    lambda t, s: t * s["k"],
    lambda t, s: t + s["w"][: t.shape[-1]] if t.ndim == 2 else t,
    lambda t, s: nx.tanh(t) if t.shape[0] % 2 else nx.sigmoid(t),
    lambda t, s: t.reshape(-1)[None].reshape(t.shape),
    lambda t, s: nx.where(t > 0, t, -t),
    lambda t, s: t - nx.mean(t, axis=0, keepdims=True),
    lambda t, s: nx.concat([t, t * 0.5], axis=0),
]


@pytest.mark.parametrize("seed", range(60))
def test_random_programs_match_eager_on_varied_inputs(seed):
    r = random.Random(seed)
    program = [r.randrange(len(STEPS)) for _ in range(r.randint(2, 6))]
    state = {"k": 2.0, "w": nx.tensor(np.arange(8, dtype=np.float32))}

    def fn(t):
        for i in program:
            t = STEPS[i](t, state)
        return t

    f = nx.jit(fn)
    rng = np.random.default_rng(seed)
    for call in range(6):
        shape = (r.randint(1, 5), r.randint(1, 8))
        x = nx.tensor(rng.standard_normal(shape).astype(np.float32))
        if call % 2:
            x = nx.tensor(rng.standard_normal(shape[::-1]).astype(np.float32)).T  # strided input
        if call == 3:
            state["k"] = -1.5  # a closure value changes
        if call == 4:
            state["w"] = nx.tensor(rng.standard_normal(8).astype(np.float32))  # a captured tensor
        same(f, fn, x)


# ---- every recorded op runs in the core's executor with eager's result -------------------------

x4 = np.random.default_rng(3).standard_normal((2, 3, 6, 6)).astype(np.float32)
OPS = {
    "conv2d": lambda t: nx.conv2d(t, nx.ones(4, 3, 3, 3), None, stride=2, padding=1),
    "conv2d bias": lambda t: nx.conv2d(t, nx.ones(4, 3, 3, 3) * 0.1, nx.ones(4), padding=(1, 0)),
    "conv2d depthwise": lambda t: nx.conv2d(t, nx.ones(6, 1, 3, 3) * 0.1, nx.ones(6), stride=2, padding=1, groups=3),
    "pools": lambda t: nx.max_pool2d(t, 2) + nx.avg_pool2d(t, 3, stride=3).sum(),
    "layer_norm": lambda t: nx.layer_norm(t, (6, 6)),
    "layer_norm affine": lambda t: nx.layer_norm(t, 6, weight=nx.full((6,), 2.0), bias=nx.ones(6)),
    "layer_norm bias only": lambda t: nx.layer_norm(t, 6, bias=nx.ones(6)),
    "batch_norm": lambda t: nx.batch_norm(t, nx.zeros(3), nx.ones(3), training=True),
    "batch_norm eval": lambda t: nx.batch_norm(t, nx.full((3,), 0.5), nx.ones(3), weight=nx.ones(3)),
    "dropout off": lambda t: nx.dropout(t, 0.5, training=False),
    "reductions": lambda t: (nx.argmax(t, axis=1), nx.argmax(t), nx.var(t, axis=(0, 2), ddof=1),
                             nx.logsumexp(t, axis=-1, keepdims=True)),
    "softmax": lambda t: (nx.softmax(t, axis=1), nx.log_softmax(t)),
    "cross_entropy": lambda t: nx.cross_entropy(t.reshape(6, 36)[:, :10], nx.arange(6) % 10),
    "creation": lambda t: t + nx.full((6,), 2.5) + nx.arange(6) + nx.tensor([1.0, 2, 3, 4, 5, 6]),
    "stack and gather": lambda t: nx.stack([t[0], t[1]], axis=1)[nx.tensor([1, 0])],
    "clone and transpose": lambda t: t.astype("float64").transpose(1, 3).contiguous() * 1.0,
    "floor ops": lambda t: (t // 0.3, t % 0.7),
}


@pytest.mark.parametrize("fn", OPS.values(), ids=OPS.keys())
def test_every_recorded_op_runs_in_the_executor(fn):
    f = nx.jit(fn)
    for scale in (1.0, -2.0):
        same(f, fn, nx.tensor(x4 * scale))
    assert "opaque" not in f.explain()


def test_random_ops_keep_their_shape_and_dtype_and_draw_afresh():
    f = nx.jit(lambda t: (t + nx.rand(2, 3), nx.randn(4, dtype="float64"), nx.dropout(t, 0.5)))
    a, b, c = f(nx.zeros(2, 3))
    a2, b2, c2 = f(nx.zeros(2, 3))
    assert a.shape == (2, 3) and b.dtype == nx.float64 and b.shape == (4,)
    assert not np.array_equal(a.numpy(), a2.numpy()) and not np.array_equal(b.numpy(), b2.numpy())
    assert set(np.unique(f(nx.ones(2, 3))[2].numpy())) <= {0.0, 2.0}
