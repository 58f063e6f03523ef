"""GraphBuilder → graph IR → generated backward: compiled gradients equal eager autograd."""

from __future__ import annotations

import numpy as np
import pytest

import nexus as nx
from nexus.graph import GraphBuilder, Shape


def eager_mlp_loss(params, x, y):
    P = {n: nx.tensor(p.numpy(), requires_grad=True) for n, p in params.items()}
    h = nx.relu(nx.tensor(x) @ P["dense_1.weight"] + P["dense_1.bias"])
    h = nx.layer_norm(h, 16, P["layer_norm_1.weight"], P["layer_norm_1.bias"])
    h = nx.tanh(h @ P["dense_2.weight"] + P["dense_2.bias"])
    h = nx.gelu(h @ P["dense_3.weight"] + P["dense_3.bias"]) + h
    loss = nx.cross_entropy(h @ P["dense_4.weight"] + P["dense_4.bias"], nx.tensor(y))
    loss.backward()
    return loss.item(), {n: p.grad.numpy() for n, p in P.items()}


def residual_mlp(dtype="float64"):
    g = GraphBuilder(seed=0, dtype=dtype)
    g.input("features", Shape(8, 12)).dense(16, "relu").layer_norm().dense(16, "tanh")
    g.residual(lambda b: b.dense(16, "gelu"))
    return g.dense(5, "softmax").compile(loss="cross_entropy")


def test_compiled_gradients_equal_eager_autograd():
    model = residual_mlp()
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((8, 12)), rng.integers(0, 5, 8)
    loss = model._native.forward_backward(nx.tensor(x), nx.tensor(y))
    ref_loss, ref_grads = eager_mlp_loss(model.params, x, y)
    assert loss == pytest.approx(ref_loss, rel=1e-12)
    for name, grad in model.grads.items():
        np.testing.assert_allclose(grad.numpy(), ref_grads[name], rtol=1e-10, atol=1e-12, err_msg=name)


def test_cnn_gradients_equal_eager_autograd():
    g = GraphBuilder(seed=3, dtype="float64")
    g.input("image", Shape(4, 1, 8, 8)).conv2d(3, 3, padding="same", activation="relu").max_pool2d(2)
    g.batch_norm().conv2d(4, 3, activation="relu").avg_pool2d(1).flatten().dropout(0.0).dense(3, "softmax")
    model = g.compile(loss="cross_entropy")
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((4, 1, 8, 8)), rng.integers(0, 3, 4)
    loss = model._native.forward_backward(nx.tensor(x), nx.tensor(y))
    P = {n: nx.tensor(p.numpy(), requires_grad=True) for n, p in model.params.items()}
    h = nx.relu(nx.conv2d(nx.tensor(x), P["conv2d_1.weight"], P["conv2d_1.bias"], padding=1))
    h = nx.max_pool2d(h, 2)
    h = nx.batch_norm(h, nx.zeros(3, dtype="float64"), nx.ones(3, dtype="float64"),
                      P["batch_norm_1.weight"], P["batch_norm_1.bias"], training=True)
    h = nx.relu(nx.conv2d(h, P["conv2d_2.weight"], P["conv2d_2.bias"]))
    h = h.reshape(4, -1) @ P["dense_1.weight"] + P["dense_1.bias"]
    ref = nx.cross_entropy(h, nx.tensor(y))
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    for name, grad in model.grads.items():
        np.testing.assert_allclose(grad.numpy(), P[name].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def resnet_block(dtype="float64", fusion=True):
    """A ResNet basic block without conv biases: conv - batch norm - relu - conv - batch norm,
    plus the input, relu; then global average pooling and a dense head."""
    g = GraphBuilder(seed=4, dtype=dtype).input("image", Shape(6, 3, 6, 6))
    g.conv2d(4, 3, padding=1, use_bias=False).batch_norm().activation("relu")
    g.residual(lambda b: b.conv2d(4, 3, padding=1, use_bias=False).batch_norm(momentum=0.3)
               .activation("relu").conv2d(4, 3, padding=1, use_bias=False).batch_norm())
    g.activation("relu").avg_pool2d(6).flatten().dense(3, "softmax")
    return g.compile(loss="cross_entropy", optimizer=nx.optim.SGD(lr=0.1), fusion=fusion)


def eager_resnet_block(P, x, training, stats):
    """The block with eager ops; stats: name -> [running_mean, running_var] tensors (updated)."""
    def bn(h, name, momentum=0.1):
        return nx.batch_norm(h, *stats[name], P[f"{name}.weight"], P[f"{name}.bias"], training=training,
                             momentum=momentum)
    h = nx.relu(bn(nx.conv2d(nx.tensor(x), P["conv2d_1.weight"], padding=1), "batch_norm_1"))
    r = nx.relu(bn(nx.conv2d(h, P["conv2d_2.weight"], padding=1), "batch_norm_2", momentum=0.3))
    h = nx.relu(bn(nx.conv2d(r, P["conv2d_3.weight"], padding=1), "batch_norm_3") + h)
    return nx.avg_pool2d(h, 6).reshape(len(x), -1) @ P["dense_1.weight"] + P["dense_1.bias"]


def test_a_residual_conv_batch_norm_block_trains_with_eager_autograd_s_gradients_and_statistics():
    model = resnet_block()
    assert not [n for n in model.params if n.startswith("conv2d") and n.endswith(".bias")]
    rng = np.random.default_rng(6)
    x, y = rng.standard_normal((6, 3, 6, 6)) * 3 + 2, rng.integers(0, 3, 6)
    loss = model._native.forward_backward(nx.tensor(x), nx.tensor(y))
    P = {n: nx.tensor(p.numpy(), requires_grad=True) for n, p in model.params.items()}
    stats = {f"batch_norm_{i}": [nx.zeros(4, dtype="float64"), nx.ones(4, dtype="float64")] for i in (1, 2, 3)}
    ref = nx.cross_entropy(eager_resnet_block(P, x, True, stats), nx.tensor(y))
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    for name, grad in model.grads.items():
        np.testing.assert_allclose(grad.numpy(), P[name].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)
    for name, (mean, var) in stats.items():  # the running statistics moved alike (momentum 0.3 on one)
        np.testing.assert_allclose(model.buffers[f"{name}.running_mean"].numpy(), mean.numpy(), rtol=1e-12)
        np.testing.assert_allclose(model.buffers[f"{name}.running_var"].numpy(), var.numpy(), rtol=1e-12)
    # inference normalizes by the running statistics
    want = eager_resnet_block(P, x, False, stats).numpy()
    logits = want - want.max(axis=1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    np.testing.assert_allclose(model.predict(x), probs, rtol=1e-10, atol=1e-12)


def test_a_residual_conv_batch_norm_block_trains_fused_bit_for_bit_as_unfused():
    rng = np.random.default_rng(7)
    x, y = rng.standard_normal((6, 3, 6, 6)).astype(np.float32), rng.integers(0, 3, 6)
    fused, unfused = resnet_block("float32", True), resnet_block("float32", False)
    stats = fused.fusion_stats(6)
    assert stats["step_bytes_fused"] < 0.7 * stats["step_bytes_unfused"]
    assert [fused.train_step(x, y) for _ in range(3)] == [unfused.train_step(x, y) for _ in range(3)]
    for name, p in fused.params.items():
        np.testing.assert_array_equal(p.numpy(), unfused.params[name].numpy(), err_msg=name)
    for name, b in fused.buffers.items():
        np.testing.assert_array_equal(b.numpy(), unfused.buffers[name].numpy(), err_msg=name)


def test_a_depthwise_separable_block_trains_with_eager_autograd_s_gradients():
    g = GraphBuilder(seed=5, dtype="float64")
    g.input("image", Shape(3, 4, 7, 7)).conv2d(8, 3, padding="same", groups=4, activation="relu")
    g.conv2d(6, 1, groups=2).flatten().dense(3)
    model = g.compile(loss="cross_entropy")
    assert model.params["conv2d_1.weight"].shape == (8, 1, 3, 3)
    assert model.params["conv2d_2.weight"].shape == (6, 4, 1, 1)
    rng = np.random.default_rng(4)
    x, y = rng.standard_normal((3, 4, 7, 7)), rng.integers(0, 3, 3)
    loss = model._native.forward_backward(nx.tensor(x), nx.tensor(y))
    P = {n: nx.tensor(p.numpy(), requires_grad=True) for n, p in model.params.items()}
    h = nx.relu(nx.conv2d(nx.tensor(x), P["conv2d_1.weight"], P["conv2d_1.bias"], padding=1, groups=4))
    h = nx.conv2d(h, P["conv2d_2.weight"], P["conv2d_2.bias"], groups=2)
    ref = nx.cross_entropy(h.reshape(3, -1) @ P["dense_1.weight"] + P["dense_1.bias"], nx.tensor(y))
    ref.backward()
    assert loss == pytest.approx(ref.item(), rel=1e-12)
    for name, grad in model.grads.items():
        np.testing.assert_allclose(grad.numpy(), P[name].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=name)


def test_any_batch_size_runs_on_one_compiled_graph():
    model = residual_mlp("float32")
    for n in (1, 3, 8, 33):
        probs = model.predict(np.ones((n, 12), np.float32))
        assert probs.shape == (n, 5)
        np.testing.assert_allclose(probs.sum(1), 1.0, rtol=1e-5)


def deep_mlp():
    g = GraphBuilder(seed=0)
    return g.input("x", Shape(128, 784)).dense(256, "relu").dense(256, "relu").dense(256, "relu").dense(10, "softmax")


def test_freeing_after_the_last_reader_keeps_peak_activation_memory_under_the_sum():
    stats = deep_mlp().compile().memory_stats(128)
    assert 0 < stats["peak_bytes"] < 0.5 * stats["total_bytes"]
    assert stats["grad_bytes"] == 4 * (784 * 256 + 2 * 256 * 256 + 256 * 10 + 3 * 256 + 10)


def test_memory_stats_count_what_the_executor_stores():
    fused, unfused = (deep_mlp().compile(fusion=f).memory_stats(128) for f in (True, False))
    # a fused kernel stores its outputs only, never the values between its ops
    assert fused["total_bytes"] < unfused["total_bytes"]
    assert fused["peak_bytes"] <= unfused["peak_bytes"]
    half = deep_mlp().compile().memory_stats(64)
    assert 0 < half["peak_bytes"] < fused["peak_bytes"]  # activations scale with the batch
    assert half["grad_bytes"] == fused["grad_bytes"]  # gradients do not


def test_memory_stats_refuse_a_batch_size_below_one():
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        deep_mlp().compile().memory_stats(0)


def test_profile_times_every_op_and_kernel_of_a_step_once():
    model = resnet_block("float32")
    rng = np.random.default_rng(8)
    x, y = rng.standard_normal((6, 3, 6, 6)).astype(np.float32), rng.integers(0, 3, 6)
    before = {n: p.numpy().copy() for n, p in model.params.items()}
    rows = model.profile(x, y, steps=3)
    assert rows == sorted(rows, key=lambda r: -r["ms"])
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    ops = [r["op"] for r in rows]
    assert ops.count("conv2d") == 3 and ops.count("conv2d_grad") == 3 and ops.count("batch_norm_stats") == 3
    kernels = {g["kernel"] for g in model.fusion_stats(6)["groups"]}
    assert {op[len("fused "):] for op in ops if op.startswith("fused ")} == kernels
    assert len({r["node"] for r in rows}) == len(rows)
    assert all(r["ms"] > 0 and r["layer"] for r in rows)
    for name, p in model.params.items():  # no update
        np.testing.assert_array_equal(p.numpy(), before[name], err_msg=name)
    with pytest.raises(ValueError, match="steps must be a positive int, got 0"):
        model.profile(x, y, steps=0)
    with pytest.raises(ValueError, match="6 samples but 5 labels"):
        model.profile(x, y[:5])


def test_backward_is_generated_as_graph_nodes():
    dump = residual_mlp().graph_dump()
    backward = dump[dump.index("ones_like"):]
    # every rule becomes graph nodes the fusion pass and the executor see: elementwise ops, the
    # matmuls of transposes, the layer norm's reductions, the loss's gradient kernel; nothing
    # replays the eager tape
    for rule in ("binary.relu_grad", "binary.tanh_grad", "unary.gelu_grad", "cross_entropy_grad"):
        assert rule in backward
    assert "grad[" not in backward
    assert backward.count("= matmul(") == 7  # two per dense layer, none for the features
    assert backward.count("reduce.sum[0]") == 6  # each bias gradient, and layer norm's two
    assert backward.count("reduce.mean[1]k") == 4  # layer norm's statistics and projections
    assert "binary.add" in backward  # the residual's input feeds two nodes: their gradients add


def dense_then_add_the_input(g):
    ref = g.tap()
    g.dense(8).add(ref)


@pytest.mark.parametrize("build, message", [
    (lambda g: g.conv2d(4, 3), "layer 'conv2d_1' (conv2d)"),
    (dense_then_add_the_input, "layer 'add_1' (add)"),
    (lambda g: g.max_pool2d(2), "layer 'max_pool2d_1'"),
])
def test_shape_errors_name_the_layer(build, message):
    g = GraphBuilder().input("x", Shape(4, 10))
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        build(g)
    g.dense(3)  # the builder stays usable after a failed layer
    assert g.shape_of(g.tap()) == (None, 3)


def test_conv_layer_errors_name_the_layer_and_shapes():
    g = GraphBuilder().input("img", Shape(2, 1, 4, 4))
    with pytest.raises(ValueError, match="layer 'conv2d_1' \\(conv2d\\).*kernel 5x5"):
        g.conv2d(2, 5)


def test_graph_spec_replays_to_the_same_model():
    g = GraphBuilder(seed=5)
    g.input("x", Shape(2, 6)).dense(4, "relu")
    g.residual(lambda b: b.dense(4, "tanh"))
    g.dense(3, "softmax")
    again = GraphBuilder.from_spec(g.spec())
    a, b = g.compile(), again.compile()
    for (na, pa), (nb, pb) in zip(a.params.items(), b.params.items()):
        assert na == nb
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())


def test_a_builder_compiles_more_than_once_into_independent_models():
    g = GraphBuilder(seed=2).input("x", Shape(2, 3)).dense(4, "relu").dense(2, "softmax")
    a, b = g.compile(), g.compile()
    for (na, pa), (nb, pb) in zip(a.params.items(), b.params.items()):
        assert na == nb
        np.testing.assert_array_equal(pa.numpy(), pb.numpy())
    a.train_step(np.ones((2, 3), np.float32), np.array([0, 1]))
    assert not np.array_equal(a.params["dense_1.weight"].numpy(), b.params["dense_1.weight"].numpy())
    g.dense(3)  # the builder is still usable after compile
