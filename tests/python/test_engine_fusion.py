"""Compiled models run the forward's elementwise chains as fused kernels (on by default): same
weights, predictions and losses as running every op on its own, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.graph import GraphBuilder, Shape


def build(activation, fusion, dtype="float32"):
    g = GraphBuilder(seed=3, dtype=dtype)
    g.input("features", Shape(16, 12)).dense(24, activation).dense(24, activation)
    g.residual(lambda b: b.dense(24, activation))
    return g.dense(4, "softmax").compile(loss="cross_entropy",
                                         optimizer=nx.optim.SGD(lr=0.1, momentum=0.9), fusion=fusion)


@pytest.mark.parametrize("activation", ["relu", "tanh", "sigmoid", "gelu"])
def test_fused_training_matches_unfused_bit_for_bit(activation):
    fused, plain = build(activation, True), build(activation, False)
    rng = np.random.default_rng(0)
    for _ in range(4):
        x = rng.standard_normal((16, 12)).astype(np.float32)
        y = rng.integers(0, 4, 16)
        assert fused.train_step(x, y) == plain.train_step(x, y)
    for name, p in fused.params.items():
        np.testing.assert_array_equal(p.numpy(), plain.params[name].numpy(), err_msg=name)
    x = rng.standard_normal((5, 12)).astype(np.float32)  # another batch size, no recompiling
    np.testing.assert_array_equal(np.asarray(fused.predict(x)), np.asarray(plain.predict(x)))


def test_fused_gradients_in_float64_match_unfused():
    fused, plain = build("tanh", True, "float64"), build("tanh", False, "float64")
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((16, 12)), rng.integers(0, 4, 16)
    assert fused._native.forward_backward(nx.tensor(x), nx.tensor(y)) == \
        plain._native.forward_backward(nx.tensor(x), nx.tensor(y))
    for name, grad in fused.grads.items():
        np.testing.assert_array_equal(grad.numpy(), plain.grads[name].numpy(), err_msg=name)


def test_fusion_stats_count_kernels_and_bytes():
    stats = build("relu", True).fusion_stats(batch_size=64)
    # bias + relu per hidden dense (3), the residual add joins the third; the head's bias alone
    assert stats["kernels"] >= 3 and stats["ops_fused"] > stats["kernels"]
    assert 0 < stats["bytes_fused"] < stats["bytes_unfused"]
    assert all(g["kernel"].startswith("nx_fused_") for g in stats["groups"])
    # the backward's relu rules run as kernels too
    assert any("relu_grad" in g["kernel"] for g in stats["groups"])
    # the whole step moves fewer bytes fused, by what the kernels save
    saved = stats["bytes_unfused"] - stats["bytes_fused"]
    assert stats["step_bytes_unfused"] - stats["step_bytes_fused"] == saved
    assert stats["step_bytes_unfused"] > stats["bytes_unfused"]  # GEMMs and the loss count too
    off = build("relu", False).fusion_stats(batch_size=64)
    assert off["kernels"] == 0 and off["bytes_fused"] == off["bytes_unfused"] == 0
    assert off["step_bytes_fused"] == off["step_bytes_unfused"] == stats["step_bytes_unfused"]


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_fused_training_in_the_interpreter_matches_compiled_kernels(monkeypatch, activation):
    """NEXUS_JIT=0 runs the same forward and backward kernels (bias-gradient rows included)
    in the interpreter: the same bits as the compiled kernels."""
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((16, 12)).astype(np.float32), rng.integers(0, 4, 16)
    compiled = build(activation, True)
    compiled.train_step(x, y)
    monkeypatch.setenv("NEXUS_JIT", "0")
    interpreted = build(activation, True)
    interpreted.train_step(x, y)
    groups = interpreted.fusion_stats(16)["groups"]
    assert any("_grad_sum_" in g["kernel"] and g["program"].stats()["interpreted"] for g in groups)
    for name, p in compiled.params.items():
        np.testing.assert_array_equal(p.numpy(), interpreted.params[name].numpy(), err_msg=name)


def conv_branchy_model(fusion):
    """Conv, batch norm, pooling, flatten, dropout, a residual with layer norm and a concat: every
    layer kind whose backward mixes gradient kernels with fused elementwise rules."""
    g = GraphBuilder(seed=1).input("img", Shape(8, 1, 12, 12))
    g.conv2d(4, 3, padding="same", activation="relu").batch_norm().max_pool2d(2).flatten()
    g.dense(16, "gelu").dropout(0.1).residual(lambda b: b.layer_norm().dense(16, "tanh"))
    ref = g.tap()
    g.dense(16, "sigmoid").concat(ref).dense(5, "softmax")
    return g.compile(optimizer=nx.optim.Adam(lr=1e-3), fusion=fusion)


def test_fused_training_of_a_conv_and_branch_model_matches_unfused_bit_for_bit():
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((8, 1, 12, 12)).astype(np.float32), rng.integers(0, 5, 8)
    losses = {}
    for fusion in (True, False):
        nx.manual_seed(0)  # the same dropout masks
        model = conv_branchy_model(fusion)
        losses[fusion] = [model.train_step(x, y) for _ in range(3)]
        if fusion:
            assert model.fusion_stats(8)["kernels"] >= 4
            fused_params = {k: v.numpy().copy() for k, v in model.params.items()}
    assert losses[True] == losses[False]
    for name, p in model.params.items():
        np.testing.assert_array_equal(fused_params[name], p.numpy(), err_msg=name)
