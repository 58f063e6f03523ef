"""Model.export_onnx: GraphBuilder models written as ONNX run in onnxruntime with the outputs of
Model.predict (within 1e-5), at any batch size, for every layer kind and activation."""

import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import nexus as nx


def mlp(g, activation):
    return g.input("features", nx.Shape(1, 12)).dense(16, activation).dropout(0.25).dense(5)


def cnn(g):
    return (g.input("image", nx.Shape(1, 2, 10, 10)).conv2d(4, 3, padding="same", activation="relu").batch_norm()
            .max_pool2d(2).conv2d(6, (3, 2), stride=(2, 1), padding=(1, 0), activation="tanh")
            .avg_pool2d(2, stride=1).flatten().dense(3))


def separable(g):
    return (g.input("image", nx.Shape(1, 3, 9, 9)).conv2d(6, 3, stride=2, padding=1, groups=3, activation="relu")
            .conv2d(4, 1, groups=2).flatten().dense(2))


def resnet(g):
    g.input("image", nx.Shape(1, 3, 8, 8)).conv2d(4, 3, padding=1, use_bias=False).batch_norm().activation("relu")
    g.residual(lambda b: b.conv2d(4, 3, padding=1, use_bias=False).batch_norm())
    return g.activation("relu").avg_pool2d(8).flatten().dense(3, "softmax")


def residual(g):
    g.input("x", nx.Shape(1, 8)).dense(8, "relu")
    skip = g.tap()
    g.dense(8, "sigmoid").layer_norm().add(skip)
    return g.concat(skip).batch_norm().dense(4, "softmax")


MODELS = {
    **{f"mlp_{a}": (lambda g, a=a: mlp(g, a)) for a in ("relu", "gelu", "tanh", "sigmoid", "softmax", None)},
    "cnn": cnn,
    "separable": separable,
    "resnet": resnet,
    "residual": residual,
}


def trained(build, dtype="float32"):
    """The model after a few steps (so batch-norm statistics and weights are not the initial ones)."""
    g = nx.GraphBuilder(seed=3, dtype=dtype)
    model = build(g).compile(optimizer=nx.optim.Adam(lr=1e-2))
    x = sample(model, 8, dtype)
    for _ in range(3):
        model.train_step(x, np.arange(8) % model.predict(x[:1]).shape[1])
    return model


def sample(model, batch, dtype="float32"):
    shape = model.builder.spec()["layers"][0]["shape"][1:]
    return np.random.default_rng(batch).standard_normal((batch, *shape)).astype(dtype)


@pytest.mark.parametrize("opset", [17, 20, 21])
@pytest.mark.parametrize("name", MODELS)
def test_onnxruntime_gives_the_model_s_outputs_at_any_batch(tmp_path, name, opset):
    model = trained(MODELS[name])
    path = tmp_path / "model.onnx"
    model.export_onnx(path, opset=opset)
    proto = onnx.load(path)
    onnx.checker.check_model(proto, full_check=True)
    assert proto.opset_import[0].version == opset
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (inp,) = session.get_inputs()
    assert inp.name == model.builder.spec()["layers"][0]["name"] and inp.shape[0] == "batch"
    for batch in (1, 17):
        x = sample(model, batch)
        (got,) = session.run(["output"], {inp.name: x})
        np.testing.assert_allclose(got, model.predict(x), rtol=1e-5, atol=1e-5)


def test_gelu_is_one_operator_from_opset_20_and_decomposed_before(tmp_path):
    model = trained(MODELS["mlp_gelu"])
    ops = {}
    for opset in (17, 20):
        model.export_onnx(tmp_path / f"{opset}.onnx", opset=opset)
        ops[opset] = {n.op_type for n in onnx.load(tmp_path / f"{opset}.onnx").graph.node}
    assert "Gelu" in ops[20] and "Gelu" not in ops[17] and "Sigmoid" in ops[17]


def test_a_float64_model_exports_as_float64(tmp_path):
    model = trained(MODELS["mlp_tanh"], dtype="float64")
    model.export_onnx(tmp_path / "m.onnx")
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    x = sample(model, 4, "float64")
    (got,) = session.run(None, {"features": x})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, model.predict(x), rtol=1e-12, atol=1e-12)


def test_the_exported_weights_are_the_trained_ones(tmp_path):
    model = trained(MODELS["cnn"])
    model.export_onnx(tmp_path / "m.onnx")
    init = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(tmp_path / "m.onnx").graph.initializer}
    for name, value in {**model.params, **model.buffers}.items():
        np.testing.assert_array_equal(init[name], value.numpy())


@pytest.mark.parametrize("opset", [16, 22, "17", 17.0, True])
def test_an_opset_out_of_range_is_a_value_error_naming_the_range(tmp_path, opset):
    with pytest.raises(ValueError, match=r"opset must be an integer in \[17, 21\]"):
        trained(MODELS["mlp_relu"]).export_onnx(tmp_path / "m.onnx", opset=opset)
    assert not (tmp_path / "m.onnx").exists()


def test_a_missing_folder_is_file_not_found_naming_the_path(tmp_path):
    target = tmp_path / "no" / "such" / "m.onnx"
    with pytest.raises(FileNotFoundError, match="m.onnx"):
        trained(MODELS["mlp_relu"]).export_onnx(target)


def test_without_the_onnx_package_the_error_says_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(ImportError, match=r"pip install 'nexus\[onnx\]'"):
        trained(MODELS["mlp_relu"]).export_onnx(tmp_path / "m.onnx")
