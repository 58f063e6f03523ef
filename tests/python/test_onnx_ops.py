"""nx.onnx.load, one operator at a time: a one-node model per case (broadcast shapes, edge
attributes, constant and computed operands) run by nexus.onnx and by onnxruntime on the same random
inputs; results agree within 1e-5 (float32) or exactly (integers, booleans)."""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nexus as nx

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL
NP = {F32: np.float32, I64: np.int64, BOOL: np.bool_, TensorProto.DOUBLE: np.float64}


def model(op, inputs, outputs=1, consts=None, opset=17, **attrs):
    """A model of one node. ``inputs``: (name, elem type, shape) fed at run time; ``consts``:
    name -> array, initializers (an input name of "" leaves an optional input out)."""
    consts = consts or {}
    names = [n for n, *_ in inputs]
    node_inputs = attrs.pop("node_inputs", names + list(consts))
    out_names = [f"y{k}" for k in range(outputs)]
    node = helper.make_node(op, node_inputs, out_names, name=f"the_{op.lower()}", **attrs)
    g = helper.make_graph(
        [node], "case",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [helper.make_value_info(o, onnx.TypeProto()) for o in out_names],
        [numpy_helper.from_array(v, k) for k, v in consts.items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return onnx.shape_inference.infer_shapes(m, strict_mode=True)  # types the outputs


def random_inputs(m, seed=0):
    rng = np.random.default_rng(seed)
    feeds = {}
    for v in m.graph.input:
        t = v.type.tensor_type
        shape = [d.dim_value for d in t.shape.dim]
        dtype = NP[t.elem_type]
        if dtype == np.bool_:
            feeds[v.name] = rng.random(shape) > 0.5
        elif dtype == np.int64:
            feeds[v.name] = rng.integers(-3, 4, shape).astype(np.int64)
        else:
            feeds[v.name] = rng.standard_normal(shape).astype(dtype)
    return feeds


def check(m, feeds=None, atol=1e-5):
    feeds = random_inputs(m) if feeds is None else feeds
    want = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)
    got = nx.onnx.load(m).run(feeds)
    got = [got] if len(want) == 1 else list(got.values())
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g.shape, w.shape, g.dtype, w.dtype)
        if w.dtype.kind == "f":
            np.testing.assert_allclose(g, w, atol=atol, rtol=atol)
        else:
            np.testing.assert_array_equal(g, w)


def x(shape, t=F32, name="x"):
    return (name, t, list(shape))


def f32(*shape, seed=1):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


UNARY = ["Relu", "Sigmoid", "Tanh", "Exp", "Neg", "Abs", "Sin", "Cos", "Reciprocal", "Identity", "Dropout", "Erf"]


@pytest.mark.parametrize("op", UNARY)
def test_unary(op):
    check(model(op, [x((3, 17))]))


def test_log_and_sqrt_of_positive_values():
    for op in ("Log", "Sqrt"):
        m = model(op, [x((5, 9))])
        check(m, {"x": np.abs(f32(5, 9)) + 0.1})


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Equal", "Less", "Greater", "LessOrEqual",
                                "GreaterOrEqual", "Max", "Min"])
@pytest.mark.parametrize("shapes", [((4, 5), (4, 5)), ((4, 5), (5,)), ((2, 1, 5), (3, 1)), ((1,), (3, 4))])
def test_binary_broadcasts(op, shapes):
    a, b = shapes
    check(model(op, [x(a, name="a"), x(b, name="b")]))


@pytest.mark.parametrize("op", ["Add", "Mul", "Div", "Sub"])
def test_binary_with_a_constant(op):
    check(model(op, [x((3, 4), name="a")], consts={"c": np.array([2.5], np.float32)}))
    check(model(op, [x((3, 4), name="a")], consts={"c": f32(1, 3, 4)}))  # a constant that widens the rank
    check(model(op, [x((3, 4), name="a")], node_inputs=["c", "a"], consts={"c": np.array(0.5, np.float32)}))


def test_pow_with_a_constant_exponent():
    check(model("Pow", [x((4, 6))], consts={"e": np.array(2.0, np.float32)}), {"x": f32(4, 6)})
    check(model("Pow", [x((4, 6))], consts={"e": np.array(0.5, np.float32)}), {"x": np.abs(f32(4, 6)) + 0.1})


def test_integer_and_boolean_ops_are_exact():
    check(model("Add", [x((3, 4), I64, "a"), x((4,), I64, "b")]))
    a = np.array([[7, -7, 7, -7, 6, -6, 0, 1]], np.int64)
    b = np.array([[2, 2, -2, -2, 3, 3, 5, -5]], np.int64)  # integer division rounds toward zero
    check(model("Div", [x((1, 8), I64, "a"), x((1, 8), I64, "b")]), {"a": a, "b": b})
    check(model("Div", [x((1, 8), I64, "a")], consts={"b": np.array(-3, np.int64)}), {"a": a})
    check(model("Equal", [x((3, 4), I64, "a"), x((3, 4), I64, "b")]))
    check(model("Where", [x((3, 4), BOOL, "c"), x((3, 4), name="a"), x((4,), name="b")]))


@pytest.mark.parametrize("to", [TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL, TensorProto.DOUBLE])
def test_cast(to):
    check(model("Cast", [x((3, 5))], to=to), {"x": np.array(np.arange(-7, 8).reshape(3, 5) * 0.75, np.float32)})


def test_clip_and_leaky_relu():
    check(model("Clip", [x((4, 7))], consts={"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)}))
    check(model("Clip", [x((4, 7))], node_inputs=["x", "", "hi"], consts={"hi": np.array(0.2, np.float32)}))
    check(model("LeakyRelu", [x((4, 7))], alpha=0.2))


@pytest.mark.parametrize("approximate", ["tanh", "none"])
def test_gelu(approximate):
    check(model("Gelu", [x((6, 33))], opset=20, approximate=approximate), atol=2e-6)


@pytest.mark.parametrize("a,b", [((3, 4), (4, 5)), ((2, 3, 4), (4, 5)), ((2, 3, 4), (2, 4, 6)),
                                 ((1, 3, 4), (5, 4, 2)), ((4,), (4, 3))])
def test_matmul_batched_and_broadcast(a, b):
    check(model("MatMul", [x(a, name="a"), x(b, name="b")]))


@pytest.mark.parametrize("attrs", [{}, {"transB": 1}, {"transA": 1}, {"alpha": 0.5, "beta": 2.0},
                                   {"transA": 1, "transB": 1, "alpha": 1.5}])
def test_gemm(attrs):
    a = (5, 3) if attrs.get("transA") else (3, 5)
    b = (4, 5) if attrs.get("transB") else (5, 4)
    check(model("Gemm", [x(a, name="a")], consts={"b": f32(*b), "c": f32(4)}, **attrs))
    check(model("Gemm", [x(a, name="a"), x(b, name="b")], consts={"c": f32(3, 1)}, **attrs))  # weights computed


@pytest.mark.parametrize("attrs", [
    {}, {"pads": [1, 1, 1, 1]}, {"strides": [2, 2], "pads": [2, 1, 2, 1]}, {"pads": [0, 1, 2, 0]},
    {"dilations": [2, 2]}, {"group": 2}, {"group": 4, "pads": [1, 1, 1, 1]}, {"auto_pad": "SAME_UPPER"},
    {"auto_pad": "SAME_LOWER", "strides": [2, 2]},
])
def test_conv2d(attrs):
    group = attrs.get("group", 1)
    w = f32(8, 4 // group, 3, 3, seed=2)
    check(model("Conv", [x((2, 4, 9, 10))], consts={"w": w, "b": f32(8)}, kernel_shape=[3, 3], **attrs))


def test_conv_without_bias_and_1d():
    check(model("Conv", [x((2, 3, 7, 7))], consts={"w": f32(5, 3, 2, 2)}))
    check(model("Conv", [x((2, 3, 20))], consts={"w": f32(6, 3, 5), "b": f32(6)}, pads=[2, 2], strides=[2]))


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("attrs", [
    {"kernel_shape": [2, 2], "strides": [2, 2]}, {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "strides": [2, 2]},
    {"kernel_shape": [3, 2], "strides": [1, 1]}, {"kernel_shape": [3, 3], "auto_pad": "SAME_UPPER"},
    {"kernel_shape": [3, 3], "pads": [1, 1, 1, 1], "count_include_pad": 1},
])
def test_pooling(op, attrs):
    if op == "MaxPool" and "count_include_pad" in attrs:
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    check(model(op, [x((2, 3, 9, 8))], **attrs))


def test_max_pool_ceil_mode_and_1d():
    check(model("MaxPool", [x((1, 2, 8, 8))], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1))
    check(model("MaxPool", [x((1, 2, 15))], kernel_shape=[3], strides=[2]))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pooling(op):
    check(model(op, [x((2, 5, 6, 7))]))


def test_batch_norm_and_layer_norm():
    c = 6
    stats = {"s": f32(c), "b": f32(c, seed=2), "m": f32(c, seed=3), "v": np.abs(f32(c, seed=4)) + 0.5}
    check(model("BatchNormalization", [x((3, c, 4, 5))], consts=stats, epsilon=1e-3))
    check(model("LayerNormalization", [x((3, 4, 8))], consts={"s": f32(8), "b": f32(8, seed=2)}))
    check(model("LayerNormalization", [x((3, 4, 8))], consts={"s": f32(4, 8)}, axis=1, epsilon=1e-3))


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_softmax(axis):
    check(model("Softmax", [x((3, 4, 5))], axis=axis))


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [([1], 1), ([0, 2], 0), ([-1], 1), (None, 0)])
def test_reductions(op, axes, keepdims):
    opset = 18
    consts = {} if axes is None else {"axes": np.array(axes, np.int64)}
    check(model(op, [x((3, 4, 5))], consts=consts, opset=opset, keepdims=keepdims))
    if op != "ReduceSum" and axes is not None:  # axes as an attribute before opset 18
        check(model(op, [x((3, 4, 5))], opset=13, axes=axes, keepdims=keepdims))


def test_views_and_shapes():
    check(model("Reshape", [x((2, 3, 4))], consts={"s": np.array([0, -1], np.int64)}))
    check(model("Flatten", [x((2, 3, 4, 5))], axis=2))
    check(model("Transpose", [x((2, 3, 4))], perm=[1, 2, 0]))
    check(model("Transpose", [x((2, 3, 4))]))
    check(model("Unsqueeze", [x((2, 3))], consts={"a": np.array([0, -1], np.int64)}))
    check(model("Squeeze", [x((2, 1, 3, 1))], consts={"a": np.array([1], np.int64)}))
    check(model("Squeeze", [x((2, 1, 3, 1))]))
    check(model("Concat", [x((2, 3), name="a"), x((2, 5), name="b")], axis=1))
    check(model("Concat", [x((2, 3), name="a")], consts={"c": f32(1, 3)}, axis=0))
    check(model("Expand", [x((3, 1))], consts={"s": np.array([2, 1, 4], np.int64)}))
    check(model("Shape", [x((2, 3, 4))]))
    check(model("Shape", [x((2, 3, 4))], start=1, end=-1))
    check(model("Size", [x((2, 3, 4))]))


@pytest.mark.parametrize("starts,ends,axes,steps", [
    ([1], [3], [0], [1]), ([0, 1], [2, -1], [1, 2], [1, 2]), ([-3], [1000], [2], [1]),
    ([2], [-100], [1], [1]), ([0], [9223372036854775807], [-1], [3])])
def test_slice(starts, ends, axes, steps):
    consts = {k: np.array(v, np.int64) for k, v in zip("seap", (starts, ends, axes, steps))}
    check(model("Slice", [x((4, 5, 6))], consts=consts))


def test_split_and_gather():
    check(model("Split", [x((6, 4))], outputs=3, consts={"s": np.array([1, 2, 3], np.int64)}))
    check(model("Split", [x((7, 4))], outputs=2, opset=18, axis=0, num_outputs=2))
    check(model("Gather", [x((5, 4))], consts={"i": np.array([[0, 4], [-1, 2]], np.int64)}))
    check(model("Gather", [x((5, 4, 3))], consts={"i": np.array([2, 0], np.int64)}, axis=1))
    check(model("Gather", [x((5, 4))], consts={"i": np.array(-2, np.int64)}, axis=1))
    # an embedding lookup: constant table, indices from the input
    m = model("Gather", [x((2, 3), I64, "ids")], consts={"table": f32(10, 4)}, node_inputs=["table", "ids"])
    check(m, {"ids": np.array([[0, 9, 3], [-1, 2, 2]], np.int64)})


def test_shape_arithmetic_is_folded_for_each_input_shape():
    # Reshape(x, Concat(Shape(x)[0], -1)): the shape is computed from x's shape at run time
    nodes = [
        helper.make_node("Shape", ["x"], ["s"]),
        helper.make_node("Gather", ["s", "zero"], ["n"], axis=0),
        helper.make_node("Unsqueeze", ["n", "zero_axis"], ["n1"]),
        helper.make_node("Concat", ["n1", "minus_one"], ["shape"], axis=0),
        helper.make_node("Reshape", ["x", "shape"], ["flat"]),
        helper.make_node("ConstantOfShape", ["s"], ["zeros"], value=helper.make_tensor("v", F32, [1], [1.0])),
        helper.make_node("Add", ["x", "zeros"], ["shifted"]),
        helper.make_node("Range", ["r0", "n", "r1"], ["idx"]),
        helper.make_node("Cast", ["idx"], ["idxf"], to=F32),
    ]
    consts = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in
              (("zero", 0), ("zero_axis", [0]), ("minus_one", [-1]), ("r0", 0), ("r1", 1))]
    g = helper.make_graph(nodes, "shapes", [helper.make_tensor_value_info("x", F32, ["batch", 3, 4])],
                          [helper.make_tensor_value_info(n, F32, s) for n, s in
                           (("flat", ["batch", 12]), ("shifted", ["batch", 3, 4]), ("idxf", ["batch"]))], consts)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    loaded = nx.onnx.load(m)
    for batch in (1, 5, 2):
        out = loaded.run(f32(batch, 3, 4))
        assert out["flat"].shape == (batch, 12)
        np.testing.assert_array_equal(out["idxf"], np.arange(batch, dtype=np.float32))
        np.testing.assert_allclose(out["shifted"], f32(batch, 3, 4) + 1)
    assert "for x (5, 3, 4)" in loaded.summary()


def test_constant_subgraphs_are_folded_at_load():
    nodes = [helper.make_node("Constant", [], ["c"], value=numpy_helper.from_array(f32(4), "c")),
             helper.make_node("Identity", ["two"], ["two_again"]),  # as TorchScript writes for shared weights
             helper.make_node("Mul", ["c", "two_again"], ["c2"]),
             helper.make_node("Add", ["x", "c2"], ["y"])]
    g = helper.make_graph(nodes, "fold", [helper.make_tensor_value_info("x", F32, [3, 4])],
                          [helper.make_tensor_value_info("y", F32, [3, 4])],
                          [numpy_helper.from_array(np.array(2, np.float32), "two")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    check(m)
    assert "3 constant nodes folded" in nx.onnx.load(m).summary()


def test_every_supported_op_has_a_case_here():
    import inspect
    import sys
    source = inspect.getsource(sys.modules[__name__])
    missing = [op for op in nx.onnx.supported_ops() if f'"{op}"' not in source]
    assert not missing, f"no test case for {missing}"


def test_integer_inputs_read_as_constants_key_the_plan_by_their_values():
    # starts and axes fed at run time (as ONNX's own tests do): each set of values gets its plan
    m = model("Slice", [x((4, 6)), x((1,), I64, "starts"), x((1,), I64, "ends"), x((1,), I64, "axes")])
    loaded = nx.onnx.load(m)
    data = f32(4, 6)
    for s, e, a in ((1, 3, 0), (2, 5, 1), (1, 3, 0), (0, 100, 1)):
        feeds = {"x": data, "starts": np.array([s]), "ends": np.array([e]), "axes": np.array([a])}
        check(m, feeds)
        np.testing.assert_array_equal(loaded.run(feeds), data[s:e] if a == 0 else data[:, s:e])
    assert loaded.summary().count("for x (4, 6)") == 3
    # a float tensor where a shape belongs is not specialised on: a clear refusal
    bad = model("Reshape", [x((2, 3)), x((2,), F32, "shape")])
    with pytest.raises(nx.onnx.UnsupportedError, match="Reshape .*the shape computed from the model's input values"):
        nx.onnx.load(bad).run({"x": f32(2, 3), "shape": np.array([3, 2], np.float32)})


@pytest.mark.parametrize("trans_b,c_shape", [(1, (1, 5)), (0, (5,)), (1, None)])
def test_batch_norm_after_gemm_is_folded(trans_b, c_shape):
    stats = [f32(5, seed=k) for k in range(3)] + [np.abs(f32(5, seed=3)) + 0.5]
    inits = [numpy_helper.from_array(v, n) for v, n in zip(stats, ("s", "b", "m", "v"))]
    inits.append(numpy_helper.from_array(f32(5, 4) if trans_b else f32(4, 5), "w"))
    gemm_inputs = ["x", "w"]
    if c_shape is not None:
        inits.append(numpy_helper.from_array(f32(*c_shape, seed=9), "c"))
        gemm_inputs.append("c")
    nodes = [helper.make_node("Gemm", gemm_inputs, ["h"], transB=trans_b, alpha=0.5, beta=2.0),
             helper.make_node("BatchNormalization", ["h", "s", "b", "m", "v"], ["y"], epsilon=1e-3)]
    g = helper.make_graph(nodes, "gemm_bn", [helper.make_tensor_value_info("x", F32, [3, 4])],
                          [helper.make_tensor_value_info("y", F32, [3, 5])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    check(m)
    assert "1 batch norms folded" in nx.onnx.load(m).summary()


def test_layer_norm_statistics_outputs():
    check(model("LayerNormalization", [x((3, 4, 8))], outputs=3, consts={"s": f32(8), "b": f32(8, seed=2)}))
