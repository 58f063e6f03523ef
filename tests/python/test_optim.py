"""Optimizers: nx.optim.SGD / Adam / AdamW and the native update against a numpy reference of
PyTorch's formulas (torch.optim.*, torch.nn.utils.clip_grad_norm_), in float64 with a tight
tolerance; skipping of parameters without gradients; errors; checkpoints; eager training."""

import numpy as np
import pytest

import nexus as nx
from nexus import _C

# ---- the reference: PyTorch's single-tensor formulas, written out in numpy ----------------------


def ref_clip(grads, max_norm):
    present = [g for g in grads if g is not None]
    norm = np.sqrt(sum(float(np.sum(g.astype(np.float64) ** 2)) for g in present))
    coef = max_norm / (norm + 1e-6)
    return [None if g is None else (g * coef if coef < 1 else g) for g in grads]


def ref_sgd(params, grad_steps, lr, momentum=0.0, dampening=0.0, nesterov=False,
            weight_decay=0.0, clip_norm=None):
    params = [p.copy() for p in params]
    bufs = [None] * len(params)
    for step, grads in enumerate(grad_steps):
        rate = lr(step) if callable(lr) else lr
        if clip_norm:
            grads = ref_clip(grads, clip_norm)
        for i, g in enumerate(grads):
            if g is None:
                continue
            d = g + weight_decay * params[i]
            if momentum:
                bufs[i] = d.copy() if bufs[i] is None else momentum * bufs[i] + (1 - dampening) * d
                d = d + momentum * bufs[i] if nesterov else bufs[i]
            params[i] = params[i] - rate * d
    return params


def ref_adam(params, grad_steps, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
             decoupled=False, clip_norm=None):
    b1, b2 = betas
    params = [p.copy() for p in params]
    m = [np.zeros_like(p) for p in params]
    v = [np.zeros_like(p) for p in params]
    t = [0] * len(params)
    for step, grads in enumerate(grad_steps):
        rate = lr(step) if callable(lr) else lr
        if clip_norm:
            grads = ref_clip(grads, clip_norm)
        for i, g in enumerate(grads):
            if g is None:
                continue
            t[i] += 1
            if decoupled:
                params[i] = params[i] * (1 - rate * weight_decay)
            else:
                g = g + weight_decay * params[i]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            denom = np.sqrt(v[i]) / np.sqrt(1 - b2 ** t[i]) + eps
            params[i] = params[i] - rate / (1 - b1 ** t[i]) * m[i] / denom
    return params


# ---- helpers -------------------------------------------------------------------------------------

SHAPES = [(4, 3), (5,), (2, 3, 2)]


def make_problem(rng, steps=5, dtype=np.float64, missing=()):
    """Initial parameters and a sequence of gradient lists; (step, index) in `missing` is None."""
    params = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[None if (k, i) in missing else rng.standard_normal(s).astype(dtype)
              for i, s in enumerate(SHAPES)] for k in range(steps)]
    return params, grads


def run_nx(make_opt, params, grad_steps):
    ts = [nx.tensor(p, requires_grad=True) for p in params]
    opt = make_opt(ts)
    for grads in grad_steps:
        for t, g in zip(ts, grads):
            t.grad = None if g is None else nx.tensor(g)
        opt.step()
    return [t.numpy().copy() for t in ts], opt


def assert_close(got, want, rtol=1e-12, atol=1e-14):
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)


# ---- SGD, Adam, AdamW against the reference ------------------------------------------------------

SGD_CASES = [
    dict(),
    dict(momentum=0.9),
    dict(momentum=0.9, dampening=0.3),
    dict(momentum=0.8, nesterov=True),
    dict(weight_decay=0.05),
    dict(momentum=0.9, nesterov=True, weight_decay=0.01),
    dict(momentum=0.5, dampening=0.5, weight_decay=0.1, clip_norm=1.0),
]


@pytest.mark.parametrize("kw", SGD_CASES, ids=lambda kw: ",".join(kw) or "plain")
def test_sgd_matches_torch_formulas(rng, kw):
    params, grads = make_problem(rng)
    got, _ = run_nx(lambda ts: nx.optim.SGD(ts, lr=0.1, **kw), params, grads)
    assert_close(got, ref_sgd(params, grads, 0.1, **kw))


ADAM_CASES = [
    dict(),
    dict(betas=(0.8, 0.99), eps=1e-6),
    dict(weight_decay=0.1),
    dict(weight_decay=0.1, clip_norm=0.5),
    dict(betas=(0.0, 0.5)),
]


@pytest.mark.parametrize("kw", ADAM_CASES, ids=lambda kw: ",".join(kw) or "default")
def test_adam_matches_torch_formulas(rng, kw):
    params, grads = make_problem(rng)
    got, _ = run_nx(lambda ts: nx.optim.Adam(ts, lr=0.01, **kw), params, grads)
    assert_close(got, ref_adam(params, grads, 0.01, **kw))


@pytest.mark.parametrize("kw", ADAM_CASES, ids=lambda kw: ",".join(kw) or "default")
def test_adamw_matches_torch_formulas(rng, kw):
    params, grads = make_problem(rng)
    kw = {"weight_decay": 1e-2, **kw}
    got, _ = run_nx(lambda ts: nx.optim.AdamW(ts, lr=0.01, **kw), params, grads)
    assert_close(got, ref_adam(params, grads, 0.01, decoupled=True, **kw))


def test_adamw_decay_is_decoupled_from_the_gradient(rng):
    params, grads = make_problem(rng)
    adam, _ = run_nx(lambda ts: nx.optim.Adam(ts, lr=0.01, weight_decay=0.5), params, grads)
    adamw, _ = run_nx(lambda ts: nx.optim.AdamW(ts, lr=0.01, weight_decay=0.5), params, grads)
    assert not np.allclose(adam[0], adamw[0], rtol=1e-6)
    with_default, _ = run_nx(lambda ts: nx.optim.AdamW(ts, lr=0.01), params, grads)
    assert_close(with_default, ref_adam(params, grads, 0.01, weight_decay=1e-2, decoupled=True))


def test_schedule_is_evaluated_at_the_optimizer_step(rng):
    params, grads = make_problem(rng, steps=6)
    sched = nx.optim.StepLR(0.1, step_size=2, gamma=0.5)
    got, opt = run_nx(lambda ts: nx.optim.SGD(ts, lr=sched, momentum=0.9), params, grads)
    assert_close(got, ref_sgd(params, grads, sched, momentum=0.9))
    assert opt.step_count == 6
    got, _ = run_nx(lambda ts: nx.optim.Adam(ts, lr=lambda k: 0.01 / (k + 1)), params, grads)
    assert_close(got, ref_adam(params, grads, lambda k: 0.01 / (k + 1)))


@pytest.mark.parametrize("make,ref", [
    (lambda ts: nx.optim.SGD(ts, lr=0.1, momentum=0.9, dampening=0.2),
     lambda p, g: ref_sgd(p, g, 0.1, momentum=0.9, dampening=0.2)),
    (lambda ts: nx.optim.Adam(ts, lr=0.01), lambda p, g: ref_adam(p, g, 0.01)),
], ids=["sgd", "adam"])
def test_float32_parameters_follow_the_reference(rng, make, ref):
    params, grads = make_problem(rng, dtype=np.float32)
    got, _ = run_nx(make, params, grads)
    assert all(g.dtype == np.float32 for g in got)
    want = ref([p.astype(np.float64) for p in params],
               [[g.astype(np.float64) for g in gs] for gs in grads])
    assert_close(got, want, rtol=2e-5, atol=1e-6)


# ---- parameters without gradients ----------------------------------------------------------------

MISSING = {(0, 1), (1, 1), (2, 0), (4, 2)}  # param 1 first gets a gradient at step 2


def test_sgd_skips_parameters_whose_grad_is_none(rng):
    params, grads = make_problem(rng, missing=MISSING)
    got, opt = run_nx(lambda ts: nx.optim.SGD(ts, lr=0.1, momentum=0.9, weight_decay=0.1),
                      params, grads)
    assert_close(got, ref_sgd(params, grads, 0.1, momentum=0.9, weight_decay=0.1))
    assert list(opt.native_state().param_steps) == [4, 3, 4]


def test_adam_counts_steps_per_parameter(rng):
    params, grads = make_problem(rng, missing=MISSING)
    got, _ = run_nx(lambda ts: nx.optim.Adam(ts, lr=0.01, weight_decay=0.1), params, grads)
    assert_close(got, ref_adam(params, grads, 0.01, weight_decay=0.1))


def test_parameter_never_given_a_gradient_is_untouched_and_has_no_buffers(rng):
    params, grads = make_problem(rng, missing={(k, 2) for k in range(5)})
    got, opt = run_nx(lambda ts: nx.optim.AdamW(ts, lr=0.01, weight_decay=0.1), params, grads)
    np.testing.assert_array_equal(got[2], params[2])
    state = opt.native_state()
    assert state.m[2] is None and state.v[2] is None and state.m[0] is not None
    assert "2.exp_avg" not in opt.state_dict()["state"]


# ---- gradient norm and clipping ------------------------------------------------------------------


def test_global_grad_norm_and_clip_grad_norm_follow_torch(rng):
    ts = [nx.tensor(rng.standard_normal(s), requires_grad=True) for s in SHAPES]
    for t in ts[:2]:
        t.grad = nx.tensor(rng.standard_normal(t.shape))
    want = np.sqrt(sum(np.sum(t.grad.numpy() ** 2) for t in ts[:2]))
    assert nx.optim.global_grad_norm(ts) == pytest.approx(want, rel=1e-14)
    before = [t.grad.numpy().copy() for t in ts[:2]]
    assert nx.optim.clip_grad_norm_(ts, want * 2) == pytest.approx(want, rel=1e-14)
    assert_close([t.grad.numpy() for t in ts[:2]], before, rtol=0, atol=0)  # below: untouched
    assert nx.optim.clip_grad_norm_(ts, 0.5) == pytest.approx(want, rel=1e-14)
    assert_close([t.grad.numpy() for t in ts[:2]], ref_clip(before, 0.5))
    assert nx.optim.global_grad_norm(ts) == pytest.approx(0.5, rel=1e-5)
    assert ts[2].grad is None


def test_clip_norm_above_the_gradient_norm_changes_nothing(rng):
    params, grads = make_problem(rng)
    plain, _ = run_nx(lambda ts: nx.optim.Adam(ts, lr=0.01), params, grads)
    clipped, opt = run_nx(lambda ts: nx.optim.Adam(ts, lr=0.01, clip_norm=1e6), params, grads)
    assert_close(clipped, plain, rtol=0, atol=0)
    assert "clip_norm=1000000.0" in repr(opt)


def test_clipping_inside_step_leaves_the_gradients_alone(rng):
    t = nx.tensor(rng.standard_normal(10), requires_grad=True)
    g = rng.standard_normal(10) * 100
    t.grad = nx.tensor(g)
    nx.optim.SGD([t], lr=0.1, clip_norm=1.0).step()
    np.testing.assert_array_equal(t.grad.numpy(), g)


def test_update_and_norm_are_identical_for_any_thread_count(rng):
    n = 300_001  # several thread-pool tasks and norm blocks, odd tail
    p0, g0 = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    threads = nx.get_num_threads()
    results = []
    try:
        for k in (1, 2, 3):
            nx.set_num_threads(k)
            got, opt = run_nx(lambda ts: nx.optim.AdamW(ts, lr=0.01, clip_norm=10.0),
                              [p0], [[g0]] * 3)
            results.append((got[0], nx.optim.global_grad_norm(opt.params)))
    finally:
        nx.set_num_threads(threads)
    for got, norm in results[1:]:
        np.testing.assert_array_equal(got, results[0][0])
        assert norm == results[0][1]


# ---- errors --------------------------------------------------------------------------------------

BAD = [
    (lambda: nx.optim.SGD(lr=-0.1), "lr"),
    (lambda: nx.optim.SGD(lr=float("nan")), "lr"),
    (lambda: nx.optim.SGD(lr=0.1, momentum=-0.5), "momentum must be a finite number >= 0"),
    (lambda: nx.optim.SGD(lr=0.1, nesterov=True), "nesterov momentum requires momentum > 0"),
    (lambda: nx.optim.SGD(lr=0.1, momentum=0.9, dampening=0.1, nesterov=True), "dampening == 0"),
    (lambda: nx.optim.SGD(lr=0.1, weight_decay=-1), "weight_decay must be a finite number >= 0"),
    (lambda: nx.optim.Adam(betas=(1.0, 0.999)), r"beta1 must be in \[0, 1\), got 1"),
    (lambda: nx.optim.Adam(betas=(0.9, -0.1)), r"beta2 must be in \[0, 1\)"),
    (lambda: nx.optim.AdamW(betas=(0.9,)), "betas must be a pair"),
    (lambda: nx.optim.Adam(eps=0.0), "eps must be a finite number > 0, got 0"),
    (lambda: nx.optim.AdamW(weight_decay=-0.1), "weight_decay"),
    (lambda: nx.optim.Adam(clip_norm=0), "clip_norm must be a finite number > 0"),
    (lambda: nx.optim.SGD(lr=nx.optim.StepLR(-1.0, 2)), "lr must be a finite number >= 0"),
]


@pytest.mark.parametrize("make,match", BAD)
def test_bad_hyperparameters_raise_value_error_naming_them(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_schedule_returning_a_negative_lr_fails_at_that_step():
    t = nx.tensor(np.ones(3), requires_grad=True)
    opt = nx.optim.SGD([t], lr=lambda k: 0.1 - 0.1 * k)
    t.grad = nx.tensor(np.ones(3))
    opt.step()
    opt.step()  # lr 0
    with pytest.raises(ValueError, match=r"SGD: lr must be a finite number >= 0, got -0.1"):
        opt.step()
    assert opt.step_count == 2


def test_bad_parameters_raise():
    w = nx.tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(TypeError, match="iterable of nexus Tensors"):
        nx.optim.SGD(w, lr=0.1)
    with pytest.raises(TypeError, match=r"pass lr= by keyword"):
        nx.optim.SGD(0.1)
    with pytest.raises(TypeError, match=r"params\[1\] must be a nexus Tensor"):
        nx.optim.SGD([w, np.ones(3)])
    with pytest.raises(ValueError, match=r"params\[0\] is not a leaf"):
        nx.optim.SGD([w * 2])
    with pytest.raises(ValueError, match="more than once"):
        nx.optim.Adam([w, w])
    with pytest.raises(RuntimeError, match="created without parameters"):
        nx.optim.Adam(lr=1e-3).step()


def test_bad_tensors_raise_and_a_failed_step_changes_nothing():
    a = nx.tensor(np.ones(3), requires_grad=True)
    b = nx.tensor(np.ones((2, 2)), requires_grad=True)
    config, state = nx.optim.SGD(lr=0.1, momentum=0.9).native_config(), _C.optim.State()
    ga = nx.tensor(np.ones(3))
    _C.optim.step(config, 0.1, [a, b], [ga, None], state)
    shape_msg = r"SGD: gradient 1 has shape \(4,\) but its parameter has shape \(2, 2\)"
    with pytest.raises(ValueError, match=shape_msg):
        _C.optim.step(config, 0.1, [a, b], [ga, nx.tensor(np.ones(4))], state)
    g32 = nx.tensor(np.ones((2, 2), dtype=np.float32))
    with pytest.raises(TypeError, match="gradient 1 has dtype float32 but its parameter has dtype"):
        _C.optim.step(config, 0.1, [a, b], [ga, g32], state)
    np.testing.assert_array_equal(a.numpy(), np.full(3, 0.9))
    np.testing.assert_array_equal(b.numpy(), np.ones((2, 2)))
    assert state.step == 1 and state.m[1] is None and list(state.param_steps) == [1, 0]

    ints = nx.tensor(np.ones(3, dtype=np.int64))
    with pytest.raises(TypeError, match="parameter 0 has dtype int64"):
        _C.optim.step(_C.optim.Config(), 0.1, [ints], [ints], _C.optim.State())
    strided = nx.tensor(np.ones((3, 4))).T
    with pytest.raises(ValueError, match=r"parameter 0 of shape \(4, 3\) is not contiguous"):
        _C.optim.step(_C.optim.Config(), 0.1, [strided], [None], _C.optim.State())
    with pytest.raises(ValueError, match="2 parameters but 1 gradients"):
        _C.optim.step(_C.optim.Config(), 0.1, [a, b], [None], _C.optim.State())


# ---- the native API and the compiled-model contract ----------------------------------------------


def test_native_step_matches_the_reference(rng):
    params, grads = make_problem(rng, missing={(1, 0)})
    ts = [nx.tensor(p) for p in params]  # the native API needs no autograd leaves
    config = _C.optim.Config(kind=_C.optim.Config.Kind.SGD, momentum=0.9, nesterov=True,
                             weight_decay=0.01)
    state = _C.optim.State()
    for gs in grads:
        _C.optim.step(config, 0.05, ts, [None if g is None else nx.tensor(g) for g in gs], state)
    want = ref_sgd(params, grads, 0.05, momentum=0.9, nesterov=True, weight_decay=0.01)
    assert_close([t.numpy() for t in ts], want)
    assert state.step == 5 and list(state.param_steps) == [4, 5, 5]


def test_config_only_optimizer_provides_config_and_lr_for_a_compiled_model():
    sched = nx.optim.LinearWarmup(nx.optim.CosineDecay(1e-3, total_steps=100), warmup_steps=10)
    opt = nx.optim.AdamW(lr=sched, betas=(0.8, 0.95), eps=1e-7, weight_decay=0.05, clip_norm=1.0)
    c = opt.native_config()
    assert c.kind == _C.optim.Config.Kind.AdamW
    assert (c.beta1, c.beta2, c.eps, c.weight_decay, c.clip_norm) == (0.8, 0.95, 1e-7, 0.05, 1.0)
    assert [opt.lr_at(k) for k in (0, 5, 10, 60)] == [sched(k) for k in (0, 5, 10, 60)]
    assert opt.params is None and isinstance(opt.native_state(), _C.optim.State)
    sgd = nx.optim.SGD(lr=0.1, momentum=0.9, nesterov=True).native_config()
    assert (sgd.kind, sgd.momentum, sgd.nesterov) == (_C.optim.Config.Kind.SGD, 0.9, True)
    assert sgd.clip_norm == 0.0
    assert nx.optim.SGD(lr=0.5).lr_at(1000) == 0.5


# ---- checkpoints ---------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda ts: nx.optim.SGD(ts, lr=0.1, momentum=0.9),
    lambda ts: nx.optim.Adam(ts, lr=0.01, weight_decay=0.1),
    lambda ts: nx.optim.AdamW(ts, lr=nx.optim.StepLR(0.01, 2), clip_norm=0.5),
], ids=["sgd", "adam", "adamw"])
def test_state_dict_round_trip_continues_identically(rng, make):
    params, grads = make_problem(rng, steps=6, missing={(0, 2)})
    ts = [nx.tensor(p, requires_grad=True) for p in params]
    opt = make(ts)

    def run(opt, ts, steps):
        for gs in steps:
            for t, g in zip(ts, gs):
                t.grad = None if g is None else nx.tensor(g)
            opt.step()

    run(opt, ts, grads[:3])
    sd = opt.state_dict()
    assert isinstance(sd["step"], int) and sd["step"] == 3
    assert all(isinstance(a, np.ndarray) for a in sd["state"].values())
    assert sd["param_steps"].tolist() == [3, 3, 2]
    fresh = [nx.tensor(t.numpy(), requires_grad=True) for t in ts]
    restored = make(fresh)
    restored.load_state_dict(sd)
    for a in sd["state"].values():
        a[...] = 1e9  # the optimizer holds copies
    run(opt, ts, grads[3:])
    run(restored, fresh, grads[3:])
    for a, b in zip(ts, fresh):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    assert restored.step_count == 6


def test_load_state_dict_rejects_a_mismatched_state(rng):
    ts = [nx.tensor(np.ones(3), requires_grad=True)]
    sd = nx.optim.Adam(ts).state_dict()
    with pytest.raises(ValueError, match="the state is for 'Adam', not 'SGD'"):
        nx.optim.SGD(ts).load_state_dict(sd)
    two = [nx.tensor(np.ones(3), requires_grad=True), nx.tensor(np.ones(2), requires_grad=True)]
    with pytest.raises(ValueError, match="holds 1 parameters, this optimizer has 2"):
        nx.optim.Adam(two).load_state_dict(sd)
    bad = {**sd, "param_steps": np.array([1]), "state": {"0.exp_avg": np.zeros(4)}}
    with pytest.raises(ValueError, match=r"'0.exp_avg' has shape \(4,\)"):
        nx.optim.Adam(ts).load_state_dict(bad)
    with pytest.raises(ValueError, match="unexpected entry '0.momentum_buffer'"):
        nx.optim.Adam(ts).load_state_dict({**sd, "state": {"0.momentum_buffer": np.zeros(3)}})


# ---- eager training ------------------------------------------------------------------------------


@pytest.mark.parametrize("make", [
    lambda ps: nx.optim.SGD(ps, lr=0.05, momentum=0.9),
    lambda ps: nx.optim.Adam(ps, lr=0.1),
    lambda ps: nx.optim.AdamW(ps, lr=nx.optim.LinearWarmup(0.1, 5), clip_norm=5.0),
], ids=["sgd", "adam", "adamw"])
def test_eager_linear_regression_loss_decreases(rng, make):
    x = nx.tensor(rng.standard_normal((64, 3)).astype(np.float32))
    y = x @ nx.tensor(np.array([[1.5], [-2.0], [0.5]], dtype=np.float32)) + 0.7
    w = nx.zeros(3, 1, dtype=nx.float32)
    b = nx.zeros(1, dtype=nx.float32)
    w.requires_grad = b.requires_grad = True
    opt = make([w, b])
    losses = []
    for _ in range(150):
        loss = nx.mean((x @ w + b - y) ** 2)
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
    assert w.grad is None
    assert losses[-1] < 1e-3 * losses[0]
    np.testing.assert_allclose(b.numpy(), [0.7], atol=0.05)


def test_zero_grad_to_none_or_zeros():
    w = nx.tensor(np.ones(3), requires_grad=True)
    opt = nx.optim.SGD([w], lr=0.1)
    w.grad = nx.tensor(np.ones(3))
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), np.zeros(3))
    opt.zero_grad()
    assert w.grad is None


# ---- PyTorch itself (in the test extra; an extra check, the numpy reference is the main one) ---


@pytest.mark.parametrize("name,kw", [
    ("SGD", dict(lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01)),
    ("SGD", dict(lr=0.1, momentum=0.9, nesterov=True)),
    ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, betas=(0.8, 0.9), weight_decay=0.1)),
])
def test_matches_torch_optim(rng, name, kw, torch):
    params, grads = make_problem(rng)
    got, _ = run_nx(lambda ts: getattr(nx.optim, name)(ts, **kw), params, grads)
    tp = [torch.tensor(p, requires_grad=True) for p in params]
    opt = getattr(torch.optim, name)(tp, **kw)
    for gs in grads:
        for t, g in zip(tp, gs):
            t.grad = torch.tensor(g)
        opt.step()
    assert_close(got, [t.detach().numpy() for t in tp], rtol=1e-10, atol=1e-12)
