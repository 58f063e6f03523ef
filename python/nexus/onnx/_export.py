"""GraphBuilder models to ONNX: each layer of the model's description (``GraphBuilder.spec``)
becomes the ONNX operators that compute its forward pass at inference, with the model's current
parameters and batch-norm statistics as initializers and the batch dimension symbolic."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # the model module imports this one lazily
    from ..model import Model

MIN_OPSET, MAX_OPSET = 17, 21  # LayerNormalization is 17; onnxruntime runs up to 21 here
GELU_OPSET = 20  # Gelu(approximate="tanh") is an operator from 20; before, it is decomposed
# gelu(x) = x * sigmoid(A * (x + B * x^3)): Nexus's tanh form (ops/cpu/vec_math.h)
GELU_A, GELU_B = 1.5957691216057308, 0.044715


class _Emitter:
    """The ONNX graph under construction: nodes, initializers, and the ONNX name of each value
    of the Nexus graph (a layer's output is named after the layer)."""

    def __init__(self, onnx, opset: int, dtype: np.dtype):
        self.onnx, self.opset, self.dtype = onnx, opset, dtype
        self.nodes, self.initializers, self.names = [], [], {}

    def node(self, op: str, inputs: list[str], output: str, **attrs) -> str:
        self.nodes.append(self.onnx.helper.make_node(op, inputs, [output], name=output, **attrs))
        return output

    def constant(self, name: str, values) -> str:
        self.initializers.append(self.onnx.numpy_helper.from_array(np.asarray(values, self.dtype), name))
        return name

    def tensor(self, name: str, values: np.ndarray) -> str:
        self.initializers.append(self.onnx.numpy_helper.from_array(np.ascontiguousarray(values), name))
        return name

    def activation(self, x: str, activation: str, layer: str) -> str:
        if activation == "none":
            return x
        out = f"{layer}.{activation}"
        if activation == "relu":
            return self.node("Relu", [x], out)
        if activation == "tanh":
            return self.node("Tanh", [x], out)
        if activation == "sigmoid":
            return self.node("Sigmoid", [x], out)
        if activation == "softmax":
            return self.node("Softmax", [x], out, axis=-1)
        if self.opset >= GELU_OPSET:
            return self.node("Gelu", [x], out, approximate="tanh")
        cube = self.node("Mul", [self.node("Mul", [x, x], f"{out}.x2"), x], f"{out}.x3")
        inner = self.node("Add", [x, self.node("Mul", [cube, self.constant(f"{out}.b", GELU_B)], f"{out}.bx3")],
                          f"{out}.u0")
        gate = self.node("Sigmoid", [self.node("Mul", [inner, self.constant(f"{out}.a", GELU_A)], f"{out}.u")],
                         f"{out}.s")
        return self.node("Mul", [x, gate], out)


def _layer(em: _Emitter, e: dict, x: str, refs: dict, params: dict) -> str:
    """The ONNX nodes of one layer entry; returns its output's name."""
    kind, name = e["layer"], e.get("name", "")
    w, b = f"{name}.weight", f"{name}.bias"
    if kind == "dense":
        y = em.node("Gemm", [x, em.tensor(w, params[w]), em.tensor(b, params[b])], f"{name}.linear")
        return em.activation(y, e["activation"], name)
    if kind == "conv2d":
        (sh, sw), pad = e["stride"], e["padding"]
        kh, kw = e["kernel_size"]
        ph, pw = (0, 0) if pad == "valid" else (kh // 2, kw // 2) if pad == "same" else pad
        bias = [em.tensor(b, params[b])] if e["use_bias"] else []
        y = em.node("Conv", [x, em.tensor(w, params[w]), *bias], f"{name}.conv",
                    kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ph, pw], group=e["groups"])
        return em.activation(y, e["activation"], name)
    if kind in ("max_pool2d", "avg_pool2d"):
        op = "MaxPool" if kind == "max_pool2d" else "AveragePool"
        return em.node(op, [x], name, kernel_shape=list(e["k"]), strides=list(e["stride"]))
    if kind == "flatten":
        return em.node("Flatten", [x], name, axis=1)
    if kind == "dropout":  # inference: the identity, as in torch's eval mode
        return em.node("Identity", [x], name)
    if kind == "batch_norm":
        stats = [em.tensor(f"{name}.{s}", params[f"{name}.{s}"]) for s in ("running_mean", "running_var")]
        return em.node("BatchNormalization", [x, em.tensor(w, params[w]), em.tensor(b, params[b]), *stats], name,
                       epsilon=float(e["eps"]))
    if kind == "layer_norm":
        return em.node("LayerNormalization", [x, em.tensor(w, params[w]), em.tensor(b, params[b])], name, axis=1,
                       epsilon=float(e["eps"]))
    if kind == "activation":
        return em.activation(x, e["activation"], name)
    if kind == "add":
        return em.node("Add", [refs[e["ref"]], x], name)
    if kind == "concat":
        return em.node("Concat", [refs[e["ref"]], x], name, axis=int(e["axis"]))
    if kind == "use":
        return refs[e["ref"]]
    raise ValueError(f"export_onnx: layer {name!r} of kind {kind!r} has no ONNX form yet")


def export(model: Model, path: str | os.PathLike, opset: int = MIN_OPSET) -> None:
    """Writes ``model``'s inference graph (its current weights, batch-norm statistics, dropout as
    the identity) to ``path`` as an ONNX model with a symbolic batch dimension. See
    ``Model.export_onnx``."""
    try:
        import onnx
    except ImportError as e:
        raise ImportError("export_onnx needs the onnx package: pip install 'nexus[onnx]'") from e
    from ..checkpoint import write_atomic
    from ..graph import GraphBuilder

    if not isinstance(opset, int) or isinstance(opset, bool) or not MIN_OPSET <= opset <= MAX_OPSET:
        raise ValueError(f"export_onnx: opset must be an integer in [{MIN_OPSET}, {MAX_OPSET}], got {opset!r}")
    spec = model.builder.spec()
    dtype = np.dtype(spec["dtype"])
    params = {k: v.numpy() for k, v in {**model.params, **model.buffers}.items()}
    em = _Emitter(onnx, opset, dtype)
    # Replaying the description gives each entry's output value, which later entries' refs name.
    replay = GraphBuilder(seed=spec["seed"], dtype=spec["dtype"])
    refs, current, graph_input = {}, None, None
    for e in spec["layers"]:
        replay._apply(dict(e))
        if e["layer"] == "input":
            graph_input = onnx.helper.make_tensor_value_info(
                e["name"], onnx.helper.np_dtype_to_tensor_dtype(dtype), ["batch", *e["shape"][1:]])
            current = e["name"]
        else:
            current = _layer(em, e, current, refs, params)
        refs[replay._current] = current
    if graph_input is None:
        raise ValueError("export_onnx: the model has no input layer")
    out_shape = ["batch", *replay.shape_of(replay._current)[1:]]
    output = em.node("Identity", [current], "output")
    graph = onnx.helper.make_graph(
        em.nodes, "nexus_model", [graph_input],
        [onnx.helper.make_tensor_value_info(output, onnx.helper.np_dtype_to_tensor_dtype(dtype), out_shape)],
        em.initializers)
    proto = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)],
                                   producer_name="nexus")
    onnx.checker.check_model(proto, full_check=True)
    write_atomic(os.fspath(path), proto.SerializeToString())
