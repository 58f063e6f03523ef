"""nx.onnx.load end to end: models exported by PyTorch (an MLP, LeNet, a ResNet-style CNN with batch
norm, a transformer encoder with dynamic batch and sequence) give onnxruntime's outputs within
1e-4 at batch 1 and 17; Nexus's own exports load back; bad input gets a clear exception."""

import io
import threading
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from onnx import helper

import nexus as nx


def export(module, args, input_names, dynamic_axes, opset=17, fold=True) -> bytes:
    """PyTorch's TorchScript exporter (``fold``: its constant folding, which folds batch norms)."""
    module.eval()
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the TorchScript exporter's deprecation notice
        torch.onnx.export(module, args, f, dynamo=False, input_names=input_names, output_names=["out"],
                          dynamic_axes=dynamic_axes, opset_version=opset, do_constant_folding=fold)
    return f.getvalue()


def export_dynamo(module, args, input_names, dynamic_shapes, opset=18) -> bytes:
    """PyTorch's default exporter (torch.export), which keeps every dimension symbolic."""
    module.eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, args, dynamo=True, input_names=input_names, output_names=["out"],
                                    dynamic_shapes=dynamic_shapes, opset_version=opset, verbose=False)
    return program.model_proto.SerializeToString()


class Block(torch.nn.Module):
    def __init__(self, c_in, c_out, stride):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = torch.nn.BatchNorm2d(c_out)
        self.conv2 = torch.nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = torch.nn.BatchNorm2d(c_out)
        self.skip = (torch.nn.Sequential(torch.nn.Conv2d(c_in, c_out, 1, stride, bias=False),
                                         torch.nn.BatchNorm2d(c_out)) if stride != 1 or c_in != c_out else None)

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return torch.relu(y + (x if self.skip is None else self.skip(x)))


def resnet():
    torch.manual_seed(0)
    m = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
        torch.nn.MaxPool2d(3, 2, 1), Block(16, 16, 1), Block(16, 32, 2),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(32, 10))
    for mod in m.modules():  # statistics that are not the initial ones, so folding them matters
        if isinstance(mod, torch.nn.BatchNorm2d):
            mod.running_mean.uniform_(-0.5, 0.5)
            mod.running_var.uniform_(0.5, 2.0)
            mod.weight.data.uniform_(0.5, 1.5)
            mod.bias.data.uniform_(-0.2, 0.2)
    return m


def lenet():
    torch.manual_seed(1)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.Tanh(), torch.nn.AvgPool2d(2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.Tanh(), torch.nn.AvgPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(400, 120), torch.nn.Tanh(), torch.nn.Linear(120, 84), torch.nn.Tanh(),
        torch.nn.Linear(84, 10))


def mlp():
    torch.manual_seed(2)
    return torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10),
                               torch.nn.Softmax(-1))


class Encoder(torch.nn.Module):
    def __init__(self, vocab=50, d=32, heads=4, layers=2):
        super().__init__()
        torch.manual_seed(3)
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, dim_feedforward=64, dropout=0.1, batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, 3)

    def forward(self, ids, mask):
        h = self.encoder(self.embed(ids), src_key_padding_mask=mask == 0)
        return self.head(h.mean(1))


CNNS = {"lenet": (lenet, (1, 28, 28)), "resnet": (resnet, (3, 32, 32))}


@pytest.fixture(scope="module")
def exported():
    out = {"mlp": export(mlp(), (torch.randn(2, 784),), ["x"], {"x": {0: "batch"}})}
    for name, (build, shape) in CNNS.items():
        out[name] = export(build(), (torch.randn(2, *shape),), ["x"], {"x": {0: "batch"}})
    out["resnet_bn"] = export(resnet(), (torch.randn(2, 3, 32, 32),), ["x"], {"x": {0: "batch"}}, fold=False)
    # The TorchScript exporter bakes the sequence length into the attention's reshapes; torch.export
    # keeps it symbolic.
    ids, mask = torch.randint(0, 50, (2, 7)), torch.ones(2, 7, dtype=torch.int64)
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("seq")
    out["encoder"] = export_dynamo(Encoder(), (ids, mask), ["input_ids", "attention_mask"],
                                   {"ids": {0: batch, 1: seq}, "mask": {0: batch, 1: seq}})
    return out


def ort_run(model_bytes, feeds):
    return ort.InferenceSession(model_bytes, providers=["CPUExecutionProvider"]).run(None, feeds)[0]


@pytest.mark.parametrize("name", ["mlp", "lenet", "resnet"])
@pytest.mark.parametrize("batch", [1, 17])
def test_pytorch_models_match_onnxruntime(exported, name, batch):
    shape = (784,) if name == "mlp" else CNNS[name][1]
    x = np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)
    m = nx.onnx.load(exported[name])
    assert [i.name for i in m.inputs] == ["x"] and m.inputs[0].shape[0] == "batch"
    np.testing.assert_allclose(m.run(x), ort_run(exported[name], {"x": x}), atol=1e-4, rtol=1e-4)


def test_batch_norms_are_folded_into_the_convolutions(exported):
    m = nx.onnx.load(exported["resnet_bn"])  # exported with its batch norms as nodes
    x = np.random.default_rng(5).standard_normal((3, 3, 32, 32)).astype(np.float32)
    np.testing.assert_allclose(m.run(x), ort_run(exported["resnet_bn"], {"x": x}), atol=1e-4, rtol=1e-4)
    s = m.summary()
    assert "6 batch norms folded" in s and "fused kernels" in s, s
    assert "BatchNormalization" not in s


@pytest.mark.parametrize("batch,seq", [(1, 5), (17, 12), (3, 1)])
def test_transformer_encoder_with_dynamic_batch_and_sequence(exported, batch, seq):
    rng = np.random.default_rng(seq)
    ids = rng.integers(0, 50, (batch, seq)).astype(np.int64)
    mask = np.ones((batch, seq), np.int64)
    mask[0, seq // 2 + 1:] = 0  # padding at the end of the first sequence
    m = nx.onnx.load(exported["encoder"])
    want = ort_run(exported["encoder"], {"input_ids": ids, "attention_mask": mask})
    np.testing.assert_allclose(m.run({"input_ids": ids, "attention_mask": mask}), want, atol=1e-4, rtol=1e-4)
    # the same model, other shapes, no reload; keyword inputs
    np.testing.assert_allclose(m.run(input_ids=ids[:1, :3], attention_mask=mask[:1, :3]),
                               ort_run(exported["encoder"], {"input_ids": ids[:1, :3], "attention_mask": mask[:1, :3]}),
                               atol=1e-4, rtol=1e-4)


def test_nexus_models_round_trip(tmp_path):
    g = (nx.GraphBuilder(seed=1).input("image", nx.Shape(1, 2, 10, 10))
         .conv2d(4, 3, padding="same", activation="relu").batch_norm().max_pool2d(2).flatten().dense(3, "softmax"))
    model = g.compile(optimizer=nx.optim.SGD(lr=0.1))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((8, 2, 10, 10)).astype(np.float32)
    model.fit(x, rng.integers(0, 3, 8), epochs=1, batch_size=4, progress=False)
    path = tmp_path / "model.onnx"
    model.export_onnx(str(path), opset=17)
    np.testing.assert_allclose(nx.onnx.load(str(path)).run(x), model.predict(x), atol=1e-5, rtol=1e-5)


def test_tensors_in_tensors_out_and_concurrent_calls(exported):
    m = nx.onnx.load(exported["mlp"])
    x = np.random.default_rng(4).standard_normal((5, 784)).astype(np.float32)
    want = m.run(x)
    out = m.run(nx.from_numpy(x))
    assert isinstance(out, nx.Tensor)
    np.testing.assert_array_equal(out.numpy(), want)
    results = in_threads(4, lambda: [m.run(x) for _ in range(20)])
    assert len(results) == 80
    for r in results:
        np.testing.assert_array_equal(r, want)


def in_threads(n: int, work) -> list:
    """The lists `work` returns, run in n threads at once, joined; a thread's exception is raised."""
    results, errors = [], []

    def worker():
        try:
            results.extend(work())
        except Exception as e:  # surfaced below
            errors.append(e)
    threads = [threading.Thread(target=worker) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def test_convolutions_of_packed_constant_weights_match_unpacked_ones(exported):
    # The importer marks its weights constant: their packed form is made by the first call that
    # needs it and kept. Calls from several threads at once (racing to pack) and at other batch
    # sizes (other plans, the same weights) must all give the first calls' results.
    m = nx.onnx.load(exported["resnet"])
    rng = np.random.default_rng(8)
    xs = [rng.standard_normal((b, 3, 32, 32)).astype(np.float32) for b in (1, 2)]
    first = [m.run(x) for x in xs + xs[:1]]  # batch 1, 2, then 1 again
    fresh = nx.onnx.load(exported["resnet"])  # nothing packed yet: the threads race to pack
    results = in_threads(3, lambda: [(i, fresh.run(xs[i])) for i in (0, 1) * 5])
    assert len(results) == 30
    for i, r in results:
        np.testing.assert_array_equal(r, first[i])
    np.testing.assert_array_equal(first[0], first[2])
    np.testing.assert_allclose(first[1], ort_run(exported["resnet"], {"x": xs[1]}), atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("name", ["mlp", "resnet"])
def test_a_samples_output_does_not_depend_on_its_batch(exported, name):
    # Every sum runs in an order fixed by the model, not by the batch (the packed GEMM and the
    # direct convolution sum over k and taps in order): a sample alone gives the same bits.
    shape = (784,) if name == "mlp" else CNNS[name][1]
    x = np.random.default_rng(6).standard_normal((17, *shape)).astype(np.float32)
    m = nx.onnx.load(exported[name])
    batch = m.run(x)
    for i in (0, 9, 16):
        np.testing.assert_array_equal(m.run(x[i:i + 1]), batch[i:i + 1])


def test_convolutions_take_the_add_and_relu_after_them(exported):
    # A ResNet's conv -> relu and conv -> add -> relu run as one op each (the Add and Relu applied
    # as the conv stores), with the bits of the ops run one by one.
    m, plain = nx.onnx.load(exported["resnet"]), nx.onnx.load(exported["resnet"], fuse=False)
    x = np.random.default_rng(7).standard_normal((3, 3, 32, 32)).astype(np.float32)
    np.testing.assert_array_equal(m.run(x), plain.run(x))
    s = m.summary()
    assert "convolutions or products apply the Add/Relu after them as they store" in s, s
    ops = [r["op"] for r in m.profile(x, runs=1)]
    assert "conv2d+relu" in ops and "conv2d+add+relu" in ops, ops
    assert "unary.relu" not in ops, ops
    assert "as they store" not in plain.summary()


def test_gemms_take_their_bias_and_relu(exported):
    m, plain = nx.onnx.load(exported["mlp"]), nx.onnx.load(exported["mlp"], fuse=False)
    x = np.random.default_rng(8).standard_normal((5, 784)).astype(np.float32)
    np.testing.assert_array_equal(m.run(x), plain.run(x))
    ops = sorted(r["op"] for r in m.profile(x, runs=1) if r["op"].startswith(("matmul", "binary", "unary")))
    assert ops == ["matmul+add", "matmul+add+relu"]


def test_a_conv_output_read_twice_or_added_to_a_later_value_folds_where_it_can():
    # a: Conv -> Relu, and a's conv output is also a model output: nothing folds into it.
    # b + c -> Relu: the Add and Relu fold into b's conv (the first), which then runs where the
    # Relu ran, after c's.
    rng = np.random.default_rng(9)
    w = [helper.make_tensor(f"w{i}", 1, (4, 2, 3, 3), rng.standard_normal((4, 2, 3, 3)).astype(np.float32).ravel())
         for i in range(3)]
    conv = [helper.make_node("Conv", ["x", f"w{i}"], [f"c{i}"], pads=[1, 1, 1, 1], name=f"conv{i}") for i in range(3)]
    nodes = [conv[0], helper.make_node("Relu", ["c0"], ["a"], name="relu_a"), conv[1], conv[2],
             helper.make_node("Add", ["c1", "c2"], ["s"], name="add"),
             helper.make_node("Relu", ["s"], ["y"], name="relu_y")]
    out = [helper.make_tensor_value_info(n, 1, ["N", 4, 5, 5]) for n in ("a", "c0", "y")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, ["N", 2, 5, 5])], out, w)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    x = rng.standard_normal((2, 2, 5, 5)).astype(np.float32)
    m = nx.onnx.load(model)
    got, want = m.run(x), ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    for name, expected in zip(("a", "c0", "y"), want):
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
    folded = m.summary().split("as they store:")[1].strip().splitlines()
    assert folded == ["conv1 + add + relu_y"], m.summary()


def test_scalar_factors_of_a_products_operands_move_to_its_output():
    # q * a @ (k^T * b) + mask, as PyTorch exports attention: the scalars move past the MatMul
    # and join the Add in one kernel. A Mul whose output is also read elsewhere (kv, an output
    # of the model) and a non-scalar factor stay where they are; every output still matches.
    rng = np.random.default_rng(4)
    consts = [helper.make_tensor("a", 1, (1,), [0.5]), helper.make_tensor("b", 1, (), [0.25]),
              helper.make_tensor("v", 1, (6,), rng.standard_normal(6).astype(np.float32))]
    nodes = [helper.make_node("Mul", ["q", "a"], ["qa"]),
             helper.make_node("Transpose", ["k"], ["kt"], perm=[0, 2, 1]),
             helper.make_node("Mul", ["b", "kt"], ["kb"]),
             helper.make_node("MatMul", ["qa", "kb"], ["s"], name="scores"),
             helper.make_node("Add", ["s", "mask"], ["y"], name="mask_add"),
             helper.make_node("Mul", ["q", "a"], ["kv"]),
             helper.make_node("MatMul", ["kv", "kt"], ["u"], name="shared"),
             helper.make_node("Mul", ["kt", "v"], ["kw"]),
             helper.make_node("MatMul", ["q", "kw"], ["w"], name="vector"),
             helper.make_node("Mul", ["p", "a"], ["pa"]),
             helper.make_node("MatMul", ["pa", "p"], ["dot"], name="dot")]
    inputs = [helper.make_tensor_value_info(n, 1, ["B", 6, 5]) for n in ("q", "k")]
    inputs += [helper.make_tensor_value_info("mask", 1, ["B", 1, 6]), helper.make_tensor_value_info("p", 1, [5])]
    outs = [helper.make_tensor_value_info(n, 1, ["B", 6, 6 if n != "kv" else 5]) for n in ("y", "kv", "u", "w")]
    outs.append(helper.make_tensor_value_info("dot", 1, []))  # vector . vector: a 0-d product
    graph = helper.make_graph(nodes, "g", inputs, outs, consts)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()
    feeds = {"q": rng.standard_normal((3, 6, 5)).astype(np.float32),
             "k": rng.standard_normal((3, 6, 5)).astype(np.float32),
             "mask": rng.standard_normal((3, 1, 6)).astype(np.float32), "p": rng.standard_normal(5).astype(np.float32)}
    m = nx.onnx.load(model)
    got, want = m.run(feeds), ort.InferenceSession(model, providers=["CPUExecutionProvider"]).run(None, feeds)
    for name, expected in zip(("y", "kv", "u", "w", "dot"), want):
        assert got[name].shape == expected.shape, name
        np.testing.assert_allclose(got[name], expected, rtol=1e-5, atol=1e-5)
    s = m.summary()
    assert "2 products' scalar factors moved" in s, s
    assert "2 ops from scores.scale, mask_add" in s, s


def test_plans_for_other_input_shapes_share_the_weight_tensors(exported):
    # Each set of input shapes gets its own plan, but the weights (a Gemm's transposed one too)
    # are the same tensors in all of them: packed once, kept once.
    m = nx.onnx.load(exported["mlp"])
    for batch in (1, 3):
        m.run(np.zeros((batch, 784), np.float32))
    weights = [{id(t) for t in plan.template if t is not None and t.numel() > 1000} for plan in m._plans.values()]
    assert len(weights) == 2 and len(weights[0]) == 2 and weights[0] == weights[1]


def test_a_constant_weight_storage_packed_for_several_views():
    # Two convolutions reading halves of one constant storage: each gets its own weights, on every
    # call, though the storage keeps one packed form at a time.
    rng = np.random.default_rng(2)
    x = nx.from_numpy(rng.standard_normal((1, 8, 12, 12)).astype(np.float32))
    both = rng.standard_normal((2, 32, 8, 3, 3)).astype(np.float32)
    want = [nx.conv2d(x, nx.from_numpy(both[i].copy()), padding=1).numpy() for i in (0, 1)]
    w = nx.from_numpy(both)
    w._mark_constant()
    halves = [w[0], w[1]]
    for _ in range(3):
        for i in (0, 1):
            np.testing.assert_array_equal(nx.conv2d(x, halves[i], padding=1).numpy(), want[i])


def test_profile_times_each_op_or_kernel(exported):
    m = nx.onnx.load(exported["lenet"])
    x = np.random.default_rng(3).standard_normal((2, 1, 28, 28)).astype(np.float32)
    rows = m.profile(x, runs=3)
    assert rows == sorted(rows, key=lambda r: -r["ms"]) and all(r["ms"] >= 0 for r in rows)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    ops = [r["op"] for r in rows]
    assert ops.count("conv2d") == 2 and ops.count("avg_pool2d") == 2, ops  # the test LeNet averages
    assert ops.count("matmul+add") == 3 and "unary.tanh" in ops, ops  # the Gemms' biases folded in
    convs = {n.name for n in onnx.load_from_string(exported["lenet"]).graph.node if n.op_type == "Conv"}
    assert {r["node"] for r in rows if r["op"] == "conv2d"} == convs
    np.testing.assert_array_equal(m.run(x), m.run(x))  # profiling leaves the model as it was
    with pytest.raises(ValueError, match="runs must be a positive int"):
        m.profile(x, runs=0)
    with pytest.raises(ValueError, match="missing input"):
        m.profile({})


def test_repeated_calls_with_one_array_are_checked_like_the_first(exported):
    # a call with an array of the last call's shape skips the checks and plan lookup it made;
    # anything else still gets them
    m = nx.onnx.load(exported["mlp"])
    rng = np.random.default_rng(5)
    x1, x2 = (rng.standard_normal((3, 784)).astype(np.float32) for _ in range(2))
    first, again = m.run(x1), m.run(x2)
    np.testing.assert_array_equal(m.run(x1), first)
    np.testing.assert_array_equal(m.run({"x": x2}), again)
    np.testing.assert_array_equal(m.run({"x": x2}), again)  # a dict of the last shape: fast too
    with pytest.raises(ValueError, match=r"unknown input\(s\) \['y'\]"):
        m.run({"y": x2})
    with pytest.raises(TypeError, match="must be float32, got float64"):
        m.run(x1.astype(np.float64))
    with pytest.raises(ValueError, match=r"must have shape \('batch', 784\)"):
        m.run(np.zeros((3, 783), np.float32))
    wide = np.zeros((3, 1568), np.float32)
    np.testing.assert_array_equal(m.run(wide[:, ::2]), m.run(np.zeros((3, 784), np.float32)))  # not contiguous
    np.testing.assert_allclose(m.run(x1[:1]), first[:1], rtol=1e-5, atol=1e-6)  # another batch, plan


def test_bad_inputs_are_clear_errors(exported):
    m = nx.onnx.load(exported["encoder"])
    ids = np.zeros((2, 4), np.int64)
    with pytest.raises(ValueError, match=r"unknown input\(s\) \['ids'\]"):
        m.run({"ids": ids, "input_ids": ids, "attention_mask": ids})
    with pytest.raises(ValueError, match=r"missing input\(s\) \['attention_mask'\]"):
        m.run({"input_ids": ids})
    with pytest.raises(TypeError, match="'input_ids' must be int64, got float32"):
        m.run({"input_ids": ids.astype(np.float32), "attention_mask": ids})
    with pytest.raises(ValueError, match="must have rank 2"):
        m.run({"input_ids": ids[0], "attention_mask": ids})
    with pytest.raises(ValueError, match="dimension 'seq' is 4 in input 'input_ids' but 3"):
        m.run({"input_ids": ids, "attention_mask": ids[:, :3]})
    with pytest.raises(ValueError, match="takes 2 inputs"):
        m.run(ids)
    cnn = nx.onnx.load(exported["lenet"])
    with pytest.raises(ValueError, match=r"must have shape \('batch', 1, 28, 28\)"):
        cnn.run(np.zeros((1, 1, 28, 27), np.float32))


def test_bad_files_are_clear_errors(exported, tmp_path):
    with pytest.raises(FileNotFoundError, match="no ONNX file"):
        nx.onnx.load(str(tmp_path / "missing.onnx"))
    truncated = tmp_path / "truncated.onnx"
    truncated.write_bytes(exported["resnet"][: len(exported["resnet"]) // 2])
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        nx.onnx.load(str(truncated))
    with pytest.raises(ValueError, match="not a valid ONNX model"):
        nx.onnx.load(b"\x08\x07garbage that is not protobuf \xff\xff")
    with pytest.raises(TypeError, match="expected a path, bytes or an onnx.ModelProto"):
        nx.onnx.load(42)


def test_unsupported_ops_name_the_op_node_and_opset():
    node = helper.make_node("Einsum", ["x", "x"], ["y"], name="mix", equation="ij,ij->i")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                          [helper.make_tensor_value_info("y", 1, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(nx.onnx.UnsupportedError, match=r"ONNX Einsum \(node 'mix', opset 17\) is not supported.*Conv"):
        nx.onnx.load(m)
    gelu = helper.make_node("Gelu", ["x"], ["y"], name="act", approximate="exact")
    g = helper.make_graph([gelu], "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                          [helper.make_tensor_value_info("y", 1, [2, 3])])
    m = nx.onnx.load(helper.make_model(g, opset_imports=[helper.make_opsetid("", 20)]))
    with pytest.raises(nx.onnx.UnsupportedError, match=r"Gelu \(node 'act', opset 20\): approximate='exact'"):
        m.run(np.zeros((2, 3), np.float32))


def test_the_readme_lists_the_supported_operators():
    import pathlib
    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    listed = readme.split("<!-- onnx-ops -->")[1].split("<!-- /onnx-ops -->")[0]
    assert listed.strip() == ", ".join(f"`{op}`" for op in nx.onnx.supported_ops()), \
        "README's ONNX operator list is stale: python tools/onnx_ops.py rewrites it"


def test_older_opsets_are_converted():
    node = helper.make_node("Softmax", ["x"], ["y"], axis=1)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                          [helper.make_tensor_value_info("y", 1, [2, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11)])
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    loaded = nx.onnx.load(m)
    assert loaded.opset == 13
    np.testing.assert_allclose(loaded.run(x), ort_run(m.SerializeToString(), {"x": x}), atol=1e-6)
