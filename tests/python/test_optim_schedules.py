"""Learning-rate schedules in nx.optim: values at given steps (PyTorch's formulas, step counted in
optimizer steps), composition, argument checking, repr, and checkpoints of every schedule."""

import math

import numpy as np
import pytest

import nexus as nx
from nexus import GraphBuilder, Shape
from nexus.optim import CosineAnnealing, CosineDecay, LinearWarmup, Schedule, StepLR


def test_step_lr_multiplies_by_gamma_every_step_size_steps():
    s = StepLR(0.1, step_size=3, gamma=0.5)
    assert [s(k) for k in range(8)] == pytest.approx(
        [0.1, 0.1, 0.1, 0.05, 0.05, 0.05, 0.025, 0.025], rel=1e-15)
    assert StepLR(1.0, 1)(2) == pytest.approx(0.01)  # default gamma 0.1


def test_cosine_decay_follows_the_closed_form_then_holds_min_lr():
    s = CosineDecay(0.1, total_steps=10, min_lr=0.01)
    for k in range(11):
        want = 0.01 + 0.09 * (1 + math.cos(math.pi * k / 10)) / 2
        assert s(k) == pytest.approx(want, rel=1e-15)
    assert (s(0), s(5), s(10)) == pytest.approx((0.1, 0.055, 0.01))
    assert s(11) == s(1000) == pytest.approx(0.01)
    assert CosineAnnealing is CosineDecay
    assert CosineDecay(1.0, 4)(4) == 0.0  # min_lr defaults to 0


def test_linear_warmup_ramps_to_a_constant():
    s = LinearWarmup(0.1, warmup_steps=4)
    want = [0, 0.025, 0.05, 0.075, 0.1, 0.1, 0.1]
    assert [s(k) for k in range(7)] == pytest.approx(want, rel=1e-15)
    f = LinearWarmup(0.1, warmup_steps=4, start_factor=0.5)
    assert [f(k) for k in range(5)] == pytest.approx([0.05, 0.0625, 0.075, 0.0875, 0.1], rel=1e-15)
    assert LinearWarmup(0.3, warmup_steps=0)(0) == 0.3


def test_linear_warmup_then_the_wrapped_schedule_starts():
    cos = CosineDecay(1e-3, total_steps=100, min_lr=1e-5)
    s = LinearWarmup(cos, warmup_steps=10, start_factor=0.1)
    assert s(0) == pytest.approx(1e-4)
    assert s(5) == pytest.approx(1e-3 * (0.1 + 0.9 * 0.5))
    for k in (10, 11, 60, 110, 500):
        assert s(k) == cos(k - 10)
    nested = LinearWarmup(StepLR(0.2, step_size=2), warmup_steps=2)
    assert [nested(k) for k in range(6)] == pytest.approx([0, 0.1, 0.2, 0.2, 0.02, 0.02])


def test_any_callable_composes_with_warmup():
    s = LinearWarmup(lambda k: 1.0 / (k + 1), warmup_steps=2)
    assert [s(k) for k in range(5)] == pytest.approx([0, 0.5, 1.0, 0.5, 1 / 3])


def test_repr_shows_the_arguments():
    assert repr(StepLR(0.1, 30)) == "StepLR(lr=0.1, step_size=30, gamma=0.1)"
    assert repr(CosineDecay(0.1, 100, min_lr=0.001)) == (
        "CosineDecay(lr=0.1, total_steps=100, min_lr=0.001)")
    assert repr(LinearWarmup(CosineDecay(0.1, 100), 10)) == (
        "LinearWarmup(schedule=CosineDecay(lr=0.1, total_steps=100, min_lr=0.0), "
        "warmup_steps=10, start_factor=0.0)")
    assert "lr=StepLR(lr=0.1" in repr(nx.optim.SGD(lr=StepLR(0.1, 5)))


@pytest.mark.parametrize("make,match", [
    (lambda: StepLR(0.1, 0), "StepLR: step_size must be an integer >= 1, got 0"),
    (lambda: StepLR(0.1, 2.5), "step_size must be an integer"),
    (lambda: StepLR(-0.1, 2), "StepLR: lr must be a finite number >= 0"),
    (lambda: StepLR(0.1, 2, gamma=-1), "gamma"),
    (lambda: CosineDecay(0.1, 0), "total_steps must be an integer >= 1"),
    (lambda: CosineDecay(0.1, 10, min_lr=float("inf")), "min_lr"),
    (lambda: LinearWarmup(0.1, -1), "warmup_steps must be an integer >= 0"),
    (lambda: LinearWarmup(0.1, 5, start_factor=1.5), r"start_factor must be in \[0, 1\]"),
    (lambda: LinearWarmup("fast", 5), "schedule must be a finite number"),
])
def test_bad_schedule_arguments_raise_value_error(make, match):
    with pytest.raises(ValueError, match=match):
        make()


def test_matches_torch_schedulers(torch):
    p = torch.zeros(1, requires_grad=True)

    def torch_lrs(make, steps):
        opt = torch.optim.SGD([p], lr=0.1)
        sched, out = make(opt), []
        for _ in range(steps):
            out.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        return out

    ours = StepLR(0.1, 3, gamma=0.5)
    want = torch_lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, 3, gamma=0.5), 10)
    assert [ours(k) for k in range(10)] == pytest.approx(want, rel=1e-12)
    ours = CosineDecay(0.1, 8, min_lr=0.01)
    want = torch_lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, 8, eta_min=0.01), 9)
    assert [ours(k) for k in range(9)] == pytest.approx(want, rel=1e-9)
    ours = LinearWarmup(0.1, 4, start_factor=0.25)
    want = torch_lrs(lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.25, total_iters=4), 8)
    assert [ours(k) for k in range(8)] == pytest.approx(want, rel=1e-12)


# ---- checkpoints ---------------------------------------------------------------------------------

# One example of each schedule nx.optim defines, from the schedules it may wrap. A schedule class
# added to nx.optim without an entry here fails test_every_schedule_class_has_an_example.
LEAVES = {StepLR: lambda: StepLR(1e-3, 5), CosineDecay: lambda: CosineDecay(0.1, 10, min_lr=0.01)}
WRAPPERS = {LinearWarmup: lambda inner: LinearWarmup(inner, 5, start_factor=0.25)}


def test_every_schedule_class_has_an_example():
    defined = {v for v in vars(nx.optim).values()
               if isinstance(v, type) and issubclass(v, Schedule) and v is not Schedule}
    assert defined == set(LEAVES) | set(WRAPPERS)


def _all_learning_rates():
    """Floats, every leaf schedule, every wrapper around each of those, and wrappers nested two
    deep around each: every composition of nx.optim's schedules up to that depth."""
    leaves = [1e-3] + [make() for make in LEAVES.values()]
    once = [wrap(x) for wrap in WRAPPERS.values() for x in leaves]
    twice = [wrap(x) for wrap in WRAPPERS.values() for x in once]
    return leaves + once + twice


def _model(optimizer):
    g = GraphBuilder(seed=0, dtype="float64")
    g.input("x", Shape(8, 6)).dense(8, "tanh").dense(4, "softmax")
    return g.compile(loss="cross_entropy", optimizer=optimizer)


@pytest.mark.parametrize("make_optimizer", [nx.optim.SGD, nx.optim.Adam, nx.optim.AdamW])
@pytest.mark.parametrize("lr", _all_learning_rates(), ids=repr)
def test_every_schedule_and_composition_survives_save_and_load(tmp_path, lr, make_optimizer):
    rng = np.random.default_rng(0)
    data = [(rng.standard_normal((8, 6)), rng.integers(0, 4, 8)) for _ in range(14)]
    model = _model(make_optimizer(lr=lr))
    for x, y in data[:7]:  # into the warm-up's second schedule, past StepLR's first drop
        model.train_step(x, y)
    model.save(tmp_path / "m.nexus")
    restored = nx.load(tmp_path / "m.nexus")
    assert repr(restored.optimizer) == repr(model.optimizer)
    for step in (0, 1, 4, 5, 6, 9, 10, 11, 15, 40):
        assert restored.optimizer.lr_at(step) == model.optimizer.lr_at(step)
    for x, y in data[7:]:
        assert restored.train_step(x, y) == model.train_step(x, y)
    for k, v in model.params.items():
        np.testing.assert_array_equal(restored.params[k].numpy(), v.numpy(), err_msg=k)


def test_a_learning_rate_that_is_not_data_cannot_be_saved(tmp_path):
    for lr in (lambda k: 0.1, LinearWarmup(lambda k: 0.1, 3)):
        with pytest.raises(ValueError, match="cannot store the learning rate"):
            _model(nx.optim.SGD(lr=lr)).save(tmp_path / "m.nexus")


def test_stored_learning_rates_are_checked_and_the_older_flat_form_still_loads():
    config = nx.optim.Adam(lr=StepLR(0.1, 3)).get_config()
    older = {**config, "lr": {"schedule": "StepLR", "lr": 0.1, "step_size": 3, "gamma": 0.1}}
    assert repr(nx.optim.from_config(older)) == repr(nx.optim.from_config(config))
    for bad, match in ((["StepLR"], "must be a number or"),
                       ({"class": "Cyclic", "config": {}}, "unknown schedule 'Cyclic'; valid: "),
                       ({"class": "StepLR", "config": {"lr": 0.1}}, "cannot be built from")):
        with pytest.raises(ValueError, match=match):
            nx.optim.from_config({**config, "lr": bad})
