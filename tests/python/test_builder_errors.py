"""GraphBuilder and Model at their boundaries: every builder call is all or nothing, every layer
argument is checked where it is given, refs stay within their builder, data that does not fit
the model gets one message everywhere, and fit returns a History per call."""

from __future__ import annotations

import inspect
import io

import numpy as np
import pytest

import nexus as nx
from nexus.graph import GraphBuilder, Ref, Shape

READ_ONLY = {"tap", "compile", "spec", "from_spec", "shape_of", "sample_shape", "layers",
             "training_graph"}


def base():
    """A builder at (batch, 8) and a Ref to its input, (batch, 6)."""
    g = GraphBuilder(seed=4).input("x", Shape(4, 6))
    inp = g.tap()
    return g.dense(8, "relu"), inp


def summary(g):
    return g.compile().summary(file=io.StringIO())


def fails_inside_a_residual(g, skip):
    g.residual(lambda b: b.dense(16, "relu").layer_norm().dense(5))  # 5 != 8: the add fails


def fails_inside_a_branch(g, skip):
    def block(b):
        b.use(skip).dense(8, "tanh")
        b.dense(3).concat(skip, axis=2)  # bad axis, after a branch and two layers
    g.residual(block)


def block_raises_its_own_error(g, skip):
    def block(b):
        b.dense(8).batch_norm()
        raise RuntimeError("user code failed")
    g.residual(block)


@pytest.mark.parametrize("fail, error", [
    (lambda g, skip: g.conv2d(4, 3), ValueError),                 # shape error in a layer
    (lambda g, skip: g.dense(-3), ValueError),                    # bad argument
    (lambda g, skip: g.add(skip), ValueError),                    # shapes differ
    (fails_inside_a_residual, ValueError),
    (fails_inside_a_branch, ValueError),
    (block_raises_its_own_error, RuntimeError),
    (lambda g, skip: g.use(GraphBuilder().input("y", Shape(2, 2)).tap()), ValueError),
    (lambda g, skip: g.concat(skip, axis=0), ValueError),
    (lambda g, skip: g.concat(Ref(0), axis=1), ValueError),      # a Ref not made by tap()
], ids=["layer", "argument", "add", "residual", "branch", "user-error", "use", "concat", "ref"])
def test_a_failed_call_changes_nothing_and_building_goes_on(fail, error):
    g, skip = base()
    spec, text, current = g.spec(), summary(g), g.tap()
    with pytest.raises(error):
        fail(g, skip)
    assert g.spec() == spec
    assert summary(g) == text and g.tap() == current
    # building goes on, and the model is the one that never saw the failure (same parameters)
    g.residual(lambda b: b.dense(8, "relu")).dense(3, "softmax")
    clean, _ = base()
    clean.residual(lambda b: b.dense(8, "relu")).dense(3, "softmax")
    model, want = g.compile(), clean.compile()
    assert g.spec() == clean.spec()
    for name, p in want.params.items():
        np.testing.assert_array_equal(model.params[name].numpy(), p.numpy(), err_msg=name)
    model.train_step(np.ones((4, 6), np.float32), np.array([0, 1, 2, 0]))


def test_a_failed_call_inside_a_block_is_undone_even_if_the_block_goes_on():
    def block(b):
        with pytest.raises(ValueError, match="kernel 9x9"):
            b.conv2d(2, 9)  # fails in shape inference, after drawing its weights
        b.conv2d(1, 3, padding="same")

    def build(block):
        g = GraphBuilder(seed=2).input("img", Shape(2, 1, 8, 8))
        return g.residual(block).flatten().dense(3, "softmax")

    g, clean = build(block), build(lambda b: b.conv2d(1, 3, padding="same"))
    assert g.spec() == clean.spec()
    for name, p in clean.compile().params.items():
        np.testing.assert_array_equal(g.compile().params[name].numpy(), p.numpy(), err_msg=name)


def test_every_public_builder_call_that_changes_the_builder_is_transactional():
    # the mechanism, not the instances: a new layer method without @_transaction fails here
    public = [n for n, _ in inspect.getmembers(GraphBuilder) if not n.startswith("_")]
    changing = [n for n in public if n not in READ_ONLY]
    assert "dense" in changing and "residual" in changing
    missing = [n for n in changing if not getattr(getattr(GraphBuilder, n), "transactional", False)]
    assert missing == []


def test_a_ref_from_another_builder_is_refused():
    other = GraphBuilder().input("y", Shape(2, 6)).dense(8).dense(8).dense(8)
    ref = other.tap()
    g, _ = base()
    for call in (lambda: g.use(ref), lambda: g.add(ref), lambda: g.concat(ref)):
        with pytest.raises(ValueError, match="another GraphBuilder's tap"):
            call()


@pytest.mark.parametrize("ref", [3, "nope", None, 2.0])
def test_a_ref_that_is_not_a_ref_is_a_type_error(ref):
    g, _ = base()
    with pytest.raises(TypeError, match=rf"use: ref must be a Ref from this builder's tap\(\), got {ref!r}"):
        g.use(ref)


def test_a_ref_taken_inside_a_failed_call_is_refused_and_older_refs_still_work():
    g, _ = base()
    before, inside = g.tap(), []

    def block(b):
        inside.append(b.dense(8).tap())
        b.dense(2)  # the residual add fails

    with pytest.raises(ValueError):
        g.residual(block)
    g.dense(8)  # a new value takes the id the undone one had
    with pytest.raises(ValueError, match="taken inside a call that failed"):
        g.add(inside[0])
    g.add(before)  # taken before the failed call: still there
    assert g.shape_of(g.tap()) == (None, 8)


def test_spec_records_branches_so_a_compiled_branch_model_has_the_built_wiring():
    g = GraphBuilder(seed=1).input("x", Shape(2, 8))
    start = g.tap()
    g.dense(4)
    left = g.tap()
    g.use(start).dense(4).add(left).dense(2, "softmax")  # dense_2 reads the input (8 features)
    assert g.compile().params["dense_2.weight"].shape == (8, 4)
    assert GraphBuilder.from_spec(g.spec())._graph.dump() == g._graph.dump()


def test_a_spec_that_refers_to_a_missing_value_is_a_value_error():
    g, _ = base()
    spec = g.spec()
    spec["layers"].append({"layer": "use", "ref": 99})
    with pytest.raises(ValueError, match="refers to value 99"):
        GraphBuilder.from_spec(spec)


C = Shape(2, 1, 8, 8)


@pytest.mark.parametrize("shape, call, error, message", [
    (None, lambda g: g.dense(-3), ValueError, r"layer 'dense_1' \(dense\): units must be an integer >= 1, got -3"),
    (None, lambda g: g.dense(0), ValueError, r"'dense_1' \(dense\): units must be an integer >= 1, got 0"),
    (None, lambda g: g.dense("8"), TypeError, r"'dense_1' \(dense\): units must be .*got '8' \(str\)"),
    (None, lambda g: g.dense(2.5), TypeError, r"units must be an integer >= 1, got 2.5"),
    (None, lambda g: g.dense(True), TypeError, r"units must be an integer >= 1, got True"),
    (None, lambda g: g.dense(4, "swish"), ValueError, r"'dense_1' \(dense\): unknown activation 'swish'; valid"),
    (None, lambda g: g.dense(4, name=""), TypeError, r"dense: name must be a non-empty string or None"),
    (None, lambda g: g.dense(4, name="x"), ValueError, r"dense: name 'x' is already taken"),
    (C, lambda g: g.conv2d(0, 3), ValueError, r"'conv2d_1' \(conv2d\): filters must be an integer >= 1, got 0"),
    (C, lambda g: g.conv2d(2, 0), ValueError, r"'conv2d_1' \(conv2d\): kernel_size must be an integer >= 1, got 0"),
    (C, lambda g: g.conv2d(2, (3, 3, 3)), TypeError, r"kernel_size must be an integer >= 1 or a pair"),
    (C, lambda g: g.conv2d(2, 3, stride=0), ValueError, r"stride must be an integer >= 1, got 0"),
    (C, lambda g: g.conv2d(2, 3, padding=-1), ValueError, r"padding must be 'valid', 'same', .*got -1"),
    (C, lambda g: g.conv2d(2, 3, padding="full"), ValueError, r"padding must be 'valid', 'same', .*got 'full'"),
    (C, lambda g: g.conv2d(2, 3, groups=0), ValueError, r"'conv2d_1' \(conv2d\): groups must be an integer >= 1"),
    (C, lambda g: g.conv2d(2, 3, use_bias=0), TypeError,
     r"'conv2d_1' \(conv2d\): use_bias must be True or False, got 0"),
    (Shape(2, 4, 8, 8), lambda g: g.conv2d(6, 3, groups=4), ValueError,
     r"'conv2d_1' \(conv2d\): groups=4 must divide both the 4 input channels and the 6 filters"),
    (C, lambda g: g.max_pool2d(0), ValueError, r"'max_pool2d_1' \(max_pool2d\): k must be an integer >= 1, got 0"),
    (C, lambda g: g.avg_pool2d(2, stride=0), ValueError, r"'avg_pool2d_1' \(avg_pool2d\): stride must be .*got 0"),
    (None, lambda g: g.dropout(1.5), ValueError, r"'dropout_1' \(dropout\): p must be a number in \[0, 1\], got 1.5"),
    (None, lambda g: g.dropout("0.5"), TypeError, r"p must be a number in \[0, 1\], got '0.5'"),
    (C, lambda g: g.batch_norm(momentum=2), ValueError, r"'batch_norm_1' \(batch_norm\): momentum .*\[0, 1\], got 2"),
    (C, lambda g: g.batch_norm(eps=0), ValueError, r"eps must be a number in \(0, inf\), got 0"),
    (None, lambda g: g.layer_norm(eps=float("nan")), ValueError, r"'layer_norm_1' \(layer_norm\): eps must be"),
    (None, lambda g: g.concat(g.tap(), axis=2), ValueError, r"'concat_1' \(concat\): axis 2 is out of .*valid: 1..1"),
    (None, lambda g: g.concat(g.tap(), axis="1"), TypeError, r"'concat_1' \(concat\): axis must be an integer"),
    (None, lambda g: g.residual("dense"), TypeError, r"residual: block must be a callable"),
    (None, lambda g: g.input("y", Shape(2, 3)), ValueError, r"already has an input"),
])
def test_layer_arguments_are_checked_where_they_are_given(shape, call, error, message):
    g = GraphBuilder().input("x", shape or Shape(2, 6))
    spec = g.spec()
    with pytest.raises(error, match=message):
        call(g)
    assert g.spec() == spec


def test_builder_and_input_arguments_are_checked():
    with pytest.raises(TypeError, match="input: name must be a non-empty string, got 5"):
        GraphBuilder().input(5, Shape(2, 3))
    with pytest.raises(ValueError, match="GraphBuilder: seed must be an integer >= 0, got -1"):
        GraphBuilder(seed=-1)
    with pytest.raises(ValueError, match="call input"):
        GraphBuilder().dense(3)


def test_generated_names_skip_names_the_user_took():
    g = GraphBuilder().input("x", Shape(2, 6)).dense(4, name="dense_2").dense(4).dense(3)
    names = [e["name"] for e in g.spec()["layers"]]
    assert len(names) == len(set(names)) == 4


# ---- Model: data that does not fit, History per fit, empty batches, the default optimizer -------
def model63():
    return GraphBuilder(seed=0).input("x", Shape(8, 63)).dense(10, "softmax").compile()


@pytest.mark.parametrize("where, call", [
    ("fit", lambda m, x, y: m.fit(x, y, progress=False)),
    ("evaluate", lambda m, x, y: m.evaluate(x, y)),
    ("predict", lambda m, x, y: m.predict(x)),
    ("train_step", lambda m, x, y: m.train_step(x, y)),
    ("fit: validation_data", lambda m, x, y: m.fit(np.zeros((16, 63)), y, validation_data=(x, y), progress=False)),
])
def test_data_that_does_not_fit_the_model_gets_the_nexus_train_message(where, call):
    m = model63()
    before = {n: p.numpy().copy() for n, p in m.params.items()}
    x, y = np.zeros((16, 64), np.float32), np.zeros(16, np.int64)
    with pytest.raises(ValueError, match=rf"^{where}: the data's samples have shape \(64,\) but the "
                                         r"model's input takes \(63,\)"):
        call(m, x, y)
    for name, p in m.params.items():  # checked before any step
        np.testing.assert_array_equal(p.numpy(), before[name])


def test_train_step_refuses_an_empty_or_mismatched_batch():
    m = model63()
    with pytest.raises(ValueError, match="train_step: no samples"):
        m.train_step(np.zeros((0, 63)), np.zeros(0, np.int64))
    with pytest.raises(ValueError, match="train_step: 3 samples but 2 labels"):
        m.train_step(np.zeros((3, 63)), np.zeros(2, np.int64))
    assert m.optimizer.step_count == 0


def test_fit_returns_a_new_history_per_call():
    m = model63()
    x, y = np.random.default_rng(0).standard_normal((16, 63)), np.arange(16) % 10
    first = m.fit(x, y, epochs=2, progress=False)
    second = m.fit(x, y, epochs=1, progress=False)
    none = m.fit(x, y, epochs=0, progress=False)
    assert (len(first), len(second), len(none)) == (2, 1, 0)
    assert first is not second and m.history is none
    assert [r["epoch"] for r in first.epochs] == [1, 2]


def test_compile_without_an_optimizer_uses_the_documented_sgd():
    m = model63()
    assert isinstance(m.optimizer, nx.optim.SGD)
    assert "nx.optim.SGD(lr=0.01)" in GraphBuilder.compile.__doc__
    assert m.optimizer.lr_at(0) == pytest.approx(0.01)
