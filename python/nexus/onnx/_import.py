"""ONNX models into Nexus: ``load`` reads a model (``onnx`` parses it), folds what does not depend
on the inputs' values (constants, then per input shape the shape arithmetic), folds batch norms
into the convolutions and GEMMs before them, and for each set of input shapes traces the remaining
nodes into one Nexus graph (``_ops.py`` holds a handler per operator). That graph runs like an
``nx.jit`` function: elementwise chains fused into generated kernels, buffers freed after their
last reader, one native call per ``run`` with the GIL released."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from .. import _C, _trace
from .. import functional as F
from ..tensor import Tensor
from ._ops import DTYPES, HANDLERS, Context, NeedsValue, Node, UnsupportedError, contiguous, supported_ops

MIN_IMPORT_OPSET, MAX_IMPORT_OPSET = 13, 21  # older models are converted up to 13 by onnx first
_PLANS_KEPT = 32  # input-shape plans kept per model (past it, the oldest goes first)
_VALUE_KEY_MAX = 64  # an integer input of at most this many elements may key a plan by its values


class IOInfo(NamedTuple):
    """A model input or output: its name, shape (an int per fixed dimension, the dimension's
    name for a symbolic one, None for an unnamed one) and numpy dtype name."""

    name: str
    shape: tuple
    dtype: str


def _onnx():
    try:
        import onnx
    except ImportError as e:
        raise ImportError("nexus.onnx.load needs the onnx package: pip install 'nexus[onnx]'") from e
    return onnx


def _parse(model: Any) -> Any:
    onnx = _onnx()
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray, memoryview)):
        what, read = "the bytes given", lambda: onnx.load_from_string(bytes(model))
    elif isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"nexus.onnx.load: no ONNX file at {path!r}")
        what, read = repr(path), lambda: onnx.load(path)  # external data from the file's directory
    else:
        raise TypeError(f"nexus.onnx.load: expected a path, bytes or an onnx.ModelProto, got {type(model).__name__}")
    try:
        proto = read()
    except OSError:
        raise
    except Exception as e:  # protobuf's DecodeError and friends: a truncated or foreign file
        raise ValueError(f"nexus.onnx.load: {what} is not a valid ONNX model ({type(e).__name__}: {e})") from None
    return proto


def _check(proto) -> int:
    """Validates the model and returns its default-domain opset."""
    onnx = _onnx()
    try:
        onnx.checker.check_model(proto)
    except Exception as e:
        raise ValueError(f"nexus.onnx.load: the model is not valid ONNX: {e}") from None
    opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset is None:
        raise ValueError("nexus.onnx.load: the model imports no opset of the default ONNX domain")
    if opset > MAX_IMPORT_OPSET:
        raise UnsupportedError(f"nexus.onnx.load: opset {opset} is newer than nexus.onnx supports "
                               f"({MIN_IMPORT_OPSET}-{MAX_IMPORT_OPSET})")
    return opset


def _io(value_info) -> IOInfo:
    t = value_info.type.tensor_type
    dims = tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim)
    return IOInfo(value_info.name, dims, DTYPES.get(t.elem_type, f"onnx type {t.elem_type}"))


class _Folder:
    """Computes nodes whose inputs are all constants with ONNX's reference implementation, except
    Identity and a Constant holding a tensor, read here: a ReferenceEvaluator costs about 9 ms to
    make, and PyTorch's TorchScript exporter writes an Identity of a weight for every parameter it
    shares (the ResNet of benchmarks/inference.py: 12 of them, 0.1 s of its cold start)."""

    def __init__(self, opset: int):
        self.opset = opset

    def __call__(self, proto_node, values: list) -> list[np.ndarray]:
        from onnx import numpy_helper

        attrs = {a.name: a for a in proto_node.attribute}
        if proto_node.op_type == "Identity" and len(values) == 1:
            return [np.asarray(values[0])]
        if proto_node.op_type == "Constant" and list(attrs) == ["value"] and not attrs["value"].t.data_location:
            return [numpy_helper.to_array(attrs["value"].t)]
        from onnx.reference import ReferenceEvaluator  # imported when first needed: ~60 ms

        feeds = {n: v for n, v in zip(proto_node.input, values) if n}
        try:
            outs = ReferenceEvaluator(proto_node, opsets={"": self.opset}).run(None, feeds)
        except Exception as e:
            raise ValueError(f"nexus.onnx: folding {proto_node.op_type} node '{proto_node.name}' of constants "
                             f"failed: {type(e).__name__}: {e}") from None
        return [np.asarray(o) for o in outs]


def _fold_batch_norms(nodes: list, consts: dict, consumers: dict, outputs: set) -> tuple[list, int]:
    """Conv/Gemm -> BatchNormalization pairs with constant parameters become one Conv/Gemm with the
    scale and shift folded into its weight and bias (the batch norm's output keeps its name)."""
    producer = {o: n for n in nodes for o in n.outputs}
    drop, folded = set(), 0
    for bn in nodes:
        if bn.op != "BatchNormalization" or bn.attr("training_mode", 0) or any(bn.outputs[1:]):
            continue
        prev = producer.get(bn.inputs[0])
        params = bn.inputs[1:5]
        if (prev is None or prev.op not in ("Conv", "Gemm") or consumers.get(prev.outputs[0], 0) != 1
                or prev.outputs[0] in outputs or not all(p in consts for p in params + prev.inputs[1:2])):
            continue
        if prev.op == "Gemm" and (prev.attr("transA", 0) or len(bn.inputs) < 5):
            continue
        scale, shift, mean, var = (consts[p] for p in params)
        s = scale / np.sqrt(var + np.asarray(bn.attr("epsilon", 1e-5), var.dtype))
        w = consts[prev.inputs[1]]
        has_bias = len(prev.inputs) > 2 and prev.inputs[2]
        if has_bias and prev.inputs[2] not in consts:
            continue
        b = consts[prev.inputs[2]] if has_bias else np.zeros(s.shape, w.dtype)
        if b.size not in (1, s.size):  # a Gemm's C per row of the batch: nothing to fold into
            continue
        if prev.op == "Conv":
            w2 = w * s.reshape(-1, *([1] * (w.ndim - 1)))
        else:  # Gemm: y = alpha A op(B) + beta C; the output features are op(B)'s columns
            w2 = w * (s[:, None] if prev.attr("transB", 0) else s[None, :])
            b = np.broadcast_to(b.reshape(-1), s.shape) * np.asarray(prev.attr("beta", 1.0), b.dtype)
            prev.attrs["beta"] = 1.0
        b2 = (b - mean) * s + shift
        wname, bname = f"{prev.name}.weight.bn_folded", f"{prev.name}.bias.bn_folded"
        consts[wname], consts[bname] = w2.astype(w.dtype), b2.astype(w.dtype)
        prev.inputs = [prev.inputs[0], wname, bname]
        prev.outputs = [bn.outputs[0]]
        drop.add(id(bn))
        folded += 1
    return [n for n in nodes if id(n) not in drop], folded


def _fold_matmul_scales(nodes: list, consts: dict, consumers: dict, outputs: set) -> tuple[list, int]:
    """MatMul(A * a, B * b), a and b float32 scalar constants (attention's query and key scaled
    before their product, as PyTorch exports it), becomes MatMul(A, B) * (a * b): the two passes
    over strided views of the query and the key go, and the scale lands on the product, where
    the fusion pass joins it to the mask's Add after it (as onnxruntime's MatMulScaleFusion does;
    the result differs by the rounding of one product of scalars)."""
    producer = {o: n for n in nodes for o in n.outputs}
    drop, scaled, order = set(), 0, []
    for mm in nodes:
        order.append(mm)
        if mm.op != "MatMul":
            continue
        scale, inputs = None, list(mm.inputs)
        for j, name in enumerate(inputs):
            mul = producer.get(name)
            if mul is None or mul.op != "Mul" or consumers.get(name, 0) != 1 or name in outputs:
                continue
            c = [i for i in mul.inputs if i in consts and consts[i].size == 1 and consts[i].ndim <= 1
                 and consts[i].dtype == np.float32]
            if len(c) != 1:  # (a Mul of two scalar constants was folded on load)
                continue
            v = consts[c[0]].reshape(())
            scale = v if scale is None else scale * v
            inputs[j] = mul.inputs[1] if mul.inputs[0] == c[0] else mul.inputs[0]
            drop.add(id(mul))
        if scale is None:
            continue
        out, cname = mm.outputs[0], f"{mm.name}.scale"
        consts[cname] = np.asarray(scale, np.float32)  # 0-d: the product's shape stays, () included
        mm.inputs, mm.outputs = inputs, [f"{out}.unscaled"]
        order.append(Node("Mul", cname, {}, mm.opset, [mm.outputs[0], cname], [out]))
        scaled += 1
    return [n for n in order if id(n) not in drop], scaled


class _Plan:
    """The traced graph for one set of input shapes, and how to feed it."""

    def __init__(self, program, template: list, arg_slots: list[tuple[int, int]], labels: dict):
        self.program, self.template, self.arg_slots, self.labels = program, template, arg_slots, labels

    def feed(self, tensors: list[Tensor]) -> list[Tensor]:
        """The program's inputs: the constants, with the model's inputs in their slots."""
        feed = list(self.template)
        for slot, i in self.arg_slots:
            feed[slot] = tensors[i]
        return feed

    def run(self, tensors: list[Tensor]) -> list[Tensor]:
        return self.program.run(self.feed(tensors))


class InferenceModel:
    """An ONNX model loaded for inference (made by :func:`load`).

    Attributes:
        inputs: the inputs ``run`` takes, as :class:`IOInfo` (name, shape, dtype).
        outputs: the outputs ``run`` returns, as :class:`IOInfo`.
        opset: the model's default-domain opset.

    Example:
        >>> m = nx.onnx.load("mlp.onnx")
        >>> m.inputs
        [IOInfo(name='x', shape=('batch', 784), dtype='float32')]
        >>> y = m.run(np.zeros((4, 784), np.float32))
    """

    def __init__(self, proto, opset: int, fuse: bool = True):
        onnx = _onnx()
        graph = proto.graph
        self.opset, self._fuse = opset, fuse
        self._producer = proto.producer_name
        consts = {t.name: onnx.numpy_helper.to_array(t) for t in graph.initializer}
        self.inputs = [_io(v) for v in graph.input if v.name not in consts]
        self.outputs = [_io(v) for v in graph.output]
        for io in self.inputs:
            if io.dtype not in DTYPES.values():
                raise UnsupportedError(f"nexus.onnx.load: input '{io.name}' has {io.dtype}; supported element "
                                       f"types: {', '.join(sorted(DTYPES.values()))}")
        nodes = []
        for i, p in enumerate(graph.node):
            if p.domain not in ("", "ai.onnx"):
                raise UnsupportedError(f"ONNX {p.op_type} (node '{p.name}', domain '{p.domain}'): only the default "
                                       "ONNX domain is supported by nexus.onnx")
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in p.attribute}
            attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
            node = Node(p.op_type, p.name or f"{p.op_type}_{i}", attrs, opset, list(p.input), list(p.output))
            node.proto = p
            nodes.append(node)
        self._fold = _Folder(opset)
        # constants first: nodes that read only constants are computed once, here
        kept = []
        for n in nodes:
            if all(not i or i in consts for i in n.inputs):
                for name, v in zip(n.outputs, self._fold(n.proto, [consts.get(i) for i in n.inputs])):
                    consts[name] = v
            else:
                kept.append(n)
        self._folded = len(nodes) - len(kept)
        consumers: dict[str, int] = {}
        for n in kept:
            for i in n.inputs:
                consumers[i] = consumers.get(i, 0) + 1
        out_names = {o.name for o in self.outputs}
        kept, self._bn_folded = _fold_batch_norms(kept, consts, consumers, out_names)
        kept, self._scales_moved = _fold_matmul_scales(kept, consts, consumers, out_names)
        self._nodes = _live(kept, out_names)
        _check_supported(self._nodes, consts)
        self._consts = consts
        self._plans: OrderedDict[tuple, _Plan] = OrderedDict()
        self._lock = threading.Lock()
        # inputs a handler needs the values of (axes, slice bounds, a shape fed at run time):
        # their values join the plan's key, and the trace sees them as constants
        self._value_inputs: set[int] = set()
        self._np_dtypes = [np.dtype(io.dtype) for io in self.inputs]
        self._fast: tuple | None = None  # (shape, plan) of the last one-input call
        self._context = Context()  # the constants' tensors, shared by every plan

    # ---- running -----------------------------------------------------------------------------

    def run(self, inputs: Any = None, /, **named: Any) -> Any:
        """Runs the model.

        Args:
            inputs: the one input's array, a list of arrays in ``inputs`` order, or a dict by
                name (numpy arrays or Nexus tensors); or pass them as keyword arguments.

        Returns:
            The one output, or a dict of the outputs by name when there are several: numpy
            arrays, or Nexus tensors when every input was a Nexus tensor.

        Raises:
            ValueError: a missing or unknown input, a wrong rank or dimension.
            TypeError: an input of the wrong dtype.

        Example:
            >>> probs = m.run(x)                                    # one input
            >>> out = m.run({"input_ids": ids, "attention_mask": mask})
        """
        fast = self._fast
        if fast is not None and not named and not self._value_inputs:
            # the one input, as an array (alone or in a dict) of the shape, dtype and layout the
            # last call had: its checks and plan lookup are known (at batch 1 the Python around
            # the native call is a large share of the latency)
            shape, plan = fast
            x = inputs
            if type(x) is dict and len(x) == 1:
                x = x.get(self.inputs[0].name)
            if (type(x) is np.ndarray and x.shape == shape and x.dtype == self._np_dtypes[0]
                    and x.flags.c_contiguous):
                return self._outputs(plan.run([F.from_numpy(x)]), True)
        feeds = self._feeds(inputs, named)
        as_numpy = not all(isinstance(v, Tensor) for v in feeds)
        tensors = self._tensors(feeds)
        plan = self._plans.get(self._key(tensors))
        if plan is None:
            plan = self._plan_for(tensors)
        if len(tensors) == 1 and not self._value_inputs:
            self._fast = (tuple(tensors[0].shape), plan)
        return self._outputs(plan.run(tensors), as_numpy)

    __call__ = run

    def profile(self, inputs: Any = None, /, runs: int = 10, **named: Any) -> list[dict]:
        """Where a call's time goes: ``runs`` calls on these inputs, each op or fused kernel
        timed on its own (as onnxruntime's profiling, without a file).

        Args:
            inputs: as for :meth:`run` (or keyword arguments by input name).
            runs: how many calls to time; each row is the median over them.

        Returns:
            One dict per op or kernel that ran, slowest first: ``node`` (the ONNX node, or for a
            fused kernel the last one it covers), ``op`` (the Nexus op, or ``"fused "`` and the
            kernel's name), ``ms`` and ``share`` (of the call's total).

        Raises:
            ValueError: ``runs`` < 1, or inputs :meth:`run` refuses.

        Example:
            >>> for row in m.profile(x)[:5]:
            ...     print(f"{row['ms']:.3f} ms  {row['op']}  {row['node']}")
        """
        if isinstance(runs, bool) or not isinstance(runs, int) or runs < 1:
            raise ValueError(f"profile: runs must be a positive int, got {runs!r}")
        tensors = self._tensors(self._feeds(inputs, named))
        plan = self._plans.get(self._key(tensors)) or self._plan_for(tensors)
        feed = plan.feed(tensors)
        plan.program.run(feed)  # warm: kernels compiled, memory touched
        times = np.median([plan.program.profile(feed) for _ in range(runs)], axis=0)
        program = plan.program
        kernels = {g.group.nodes[-1]: g.program.name for g in program.plan.groups}
        names, total, rows = program.node_names, float(times.sum()) or 1.0, []
        for line in program.dump().splitlines():
            i = int(line.split(": ", 1)[0])
            if times[i] <= 0:
                continue
            op = f"fused {kernels[i]}" if i in kernels else line.split(" = ", 1)[1].split("(", 1)[0]
            rows.append({"node": names[i], "op": op, "ms": float(times[i]) * 1e3, "share": float(times[i]) / total})
        return sorted(rows, key=lambda r: -r["ms"])

    def _outputs(self, outs: list[Tensor], as_numpy: bool) -> Any:
        if as_numpy:
            outs = [o.numpy() for o in outs]
        if len(outs) == 1:
            return outs[0]
        return {o.name: v for o, v in zip(self.outputs, outs)}

    def _feeds(self, inputs, named: dict) -> list:
        names = [i.name for i in self.inputs]
        if inputs is not None and named:
            raise ValueError("run: pass the inputs positionally or by keyword, not both")
        if inputs is None:
            given = named
        elif isinstance(inputs, dict):
            given = inputs
        elif isinstance(inputs, (list, tuple)):
            if len(inputs) != len(names):
                raise ValueError(f"run: the model takes {len(names)} inputs {names}, got {len(inputs)}")
            given = dict(zip(names, inputs))
        else:
            if len(names) != 1:
                raise ValueError(f"run: the model takes {len(names)} inputs {names}; pass a dict by name")
            given = {names[0]: inputs}
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise ValueError(f"run: unknown input(s) {unknown}; the model's inputs are {names}")
        missing = [n for n in names if n not in given]
        if missing:
            raise ValueError(f"run: missing input(s) {missing}; the model's inputs are {names}")
        symbols: dict[str, tuple[str, int]] = {}
        out = []
        for io, np_dtype in zip(self.inputs, self._np_dtypes):
            v = given[io.name]
            if not isinstance(v, (Tensor, np.ndarray)):
                v = np.asarray(v)
            if v.dtype != np_dtype if isinstance(v, np.ndarray) else v.dtype.name != io.dtype:
                got = v.dtype.name if isinstance(v, Tensor) else np.dtype(v.dtype).name
                raise TypeError(f"run: input '{io.name}' must be {io.dtype}, got {got}")
            shape = v.shape
            if io.shape and len(shape) != len(io.shape):
                raise ValueError(f"run: input '{io.name}' must have rank {len(io.shape)} (shape {io.shape}), "
                                 f"got shape {shape}")
            for d, want in zip(shape, io.shape):
                if isinstance(want, int) and want > 0 and d != want:
                    raise ValueError(f"run: input '{io.name}' must have shape {io.shape}, got {shape}")
                if isinstance(want, str):
                    seen = symbols.setdefault(want, (io.name, d))
                    if seen[1] != d:
                        raise ValueError(f"run: dimension '{want}' is {seen[1]} in input '{seen[0]}' but {d} in "
                                         f"input '{io.name}'")
            out.append(v)
        return out

    @staticmethod
    def _tensors(feeds: list) -> list[Tensor]:
        """Checked feeds as Nexus tensors (numpy arrays wrapped, not copied, where C-ordered)."""
        return [v if isinstance(v, Tensor) else F.from_numpy(contiguous(v)) for v in feeds]

    def _key(self, tensors: list[Tensor]) -> tuple:
        key = tuple(t.shape for t in tensors)  # the dtypes are the model's (checked by _feeds)
        if self._value_inputs:
            key += tuple(tensors[i].numpy().tobytes() for i in sorted(self._value_inputs))
        return key

    def _plan_for(self, tensors: list[Tensor]) -> _Plan:
        with self._lock:
            while True:
                key = self._key(tensors)
                plan = self._plans.get(key)
                if plan is not None:
                    return plan
                try:
                    plan = self._trace(tensors)
                except NeedsValue as e:
                    i = next((k for k, t in enumerate(tensors) if t is e.value), None)
                    if (i is None or i in self._value_inputs or e.value.dtype.name not in ("int32", "int64")
                            or e.value.numel() > _VALUE_KEY_MAX):
                        raise e.unsupported() from None
                    self._value_inputs.add(i)  # and trace again, keyed by its values
                    continue
                self._plans[key] = plan
                while len(self._plans) > _PLANS_KEPT:
                    self._plans.popitem(last=False)
                return plan

    def _trace(self, tensors: list[Tensor]) -> _Plan:
        tracer = _trace.Tracer([])
        for i, (io, t) in enumerate(zip(self.inputs, tensors)):
            tracer.bind_input(io.name, t, ("arg", i))
        labels: dict[str, str] = {}
        feeds = [t.numpy().copy() if i in self._value_inputs else t for i, t in enumerate(tensors)]
        outs = _trace.run(tracer, self._run_nodes, (tracer, feeds, labels), {})
        roots = [tracer.value(o) for o in outs]
        program = _C.TracedProgram(tracer.graph, roots, self._fuse, epilogues=self._fuse)
        template = [None if kind == "arg" else x for kind, x in tracer.sources]
        for t in template:  # the model's constants: kernels may keep them packed
            if t is not None:
                t._mark_constant()
        slots = [(k, x) for k, (kind, x) in enumerate(tracer.sources) if kind == "arg"]
        return _Plan(program, template, slots, labels)

    def _run_nodes(self, tracer, tensors: list, labels: dict) -> list[Tensor]:
        ctx = self._context
        ctx.begin(tracer)
        env: dict[str, Any] = dict(self._consts)
        env.update({io.name: t for io, t in zip(self.inputs, tensors)})
        for node in self._nodes:
            values = [env[i] if i else None for i in node.inputs]
            while values and values[-1] is None:  # trailing optional inputs left out
                values.pop()
            if all(v is None or isinstance(v, np.ndarray) for v in values):
                outs = self._fold(node.proto, values)  # shape arithmetic for these input shapes
                labels[node.name] = "folded"
            else:
                tracer.label = node.name
                outs = HANDLERS[node.op](ctx, node, *values)
                tracer.label = None
            for name, v in zip(node.outputs, outs):
                if name:
                    env[name] = v
        return [ctx.tensor(env[o.name]) for o in self.outputs]

    # ---- inspection --------------------------------------------------------------------------

    def summary(self) -> str:
        """The graph after optimisation: what import folded, and per input shape run so far the
        fused kernels (with the ONNX nodes each covers) and the ops run one by one.

        Example:
            >>> m.run(x)
            >>> print(m.summary())
        """
        lines = [f"ONNX model ({self._producer or 'unknown producer'}, opset {self.opset})",
                 "inputs:  " + ", ".join(f"{i.name} {i.shape} {i.dtype}" for i in self.inputs),
                 "outputs: " + ", ".join(f"{o.name} {o.shape} {o.dtype}" for o in self.outputs),
                 f"import: {self._folded} constant nodes folded, {self._bn_folded} batch norms folded into "
                 f"the convolution or GEMM before them, {self._scales_moved} products' scalar factors moved "
                 f"to their output, {len(self._nodes)} nodes left"]
        sources = {i.name for i in self.inputs}  # the trace's inputs: the model's, then constants
        for key, plan in list(self._plans.items()):
            shapes = ", ".join(f"{io.name} {s}" for io, s in zip(self.inputs, key))
            program = plan.program
            groups = program.plan.groups
            names = program.node_names
            fused = set()
            lines.append(f"for {shapes}: {len(groups)} fused kernels")
            for g in groups:
                members = list(dict.fromkeys(names[n] for n in g.group.nodes))
                fused.update(g.group.nodes)
                lines.append(f"  kernel {g.program.name}: {len(g.group.nodes)} ops from {', '.join(members)}")
            alone = [names[n] for n, live in enumerate(program.live) if live and n not in fused
                     and names[n] not in sources and not names[n].startswith("const")]
            folded = sum(1 for v in plan.labels.values() if v == "folded")
            lines.append(f"  {len(alone)} ops run one by one; {folded} shape nodes folded for these shapes")
            epilogues = [line.split("# ", 1)[1] for line in program.dump().splitlines()
                         if " = conv2d+" in line or " = matmul+" in line]
            if epilogues:
                lines.append(f"  {len(epilogues)} convolutions or products apply the Add/Relu after them as they "
                             "store:")
                lines.extend(f"    {e}" for e in epilogues)
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"InferenceModel(inputs={self.inputs}, outputs={self.outputs}, opset={self.opset})"


def _check_supported(nodes: list, consts: dict) -> None:
    """Every node that reads a value computed from the inputs' values has a handler; the others
    read only constants and input shapes, and are folded for each set of input shapes."""
    static = set(consts)
    for n in nodes:
        if n.op in ("Shape", "Size") or all(not i or i in static for i in n.inputs):
            static.update(n.outputs)
        elif n.op not in HANDLERS:
            raise UnsupportedError(
                f"ONNX {n.op} (node '{n.name}', opset {n.opset}) is not supported by nexus.onnx on values "
                f"computed from the model's inputs (only on constants and shapes); supported operators: "
                f"{', '.join(supported_ops())}")


def _live(nodes: list, outputs: set) -> list:
    """The nodes the outputs depend on, in order."""
    need, keep = set(outputs), []
    for n in reversed(nodes):
        if any(o in need for o in n.outputs):
            keep.append(n)
            need.update(i for i in n.inputs if i)
    return keep[::-1]


def load(model: str | os.PathLike | bytes | Any, *, fuse: bool = True) -> InferenceModel:
    """Loads an ONNX model for inference with Nexus.

    Args:
        model: a path to an ``.onnx`` file (external-data files are read from its directory),
            the file's bytes, or an ``onnx.ModelProto``.
        fuse: fuse elementwise chains into generated kernels (False runs every op on its own).

    Returns:
        An :class:`InferenceModel`: ``run`` it on numpy arrays or Nexus tensors.

    Raises:
        FileNotFoundError: no file at the path.
        ValueError: the file is not a valid ONNX model.
        UnsupportedError: an operator, attribute, element type or opset nexus.onnx does not run
            (the message names it and lists what is supported).

    Example:
        >>> m = nx.onnx.load("resnet.onnx")
        >>> logits = m.run(np.random.rand(1, 3, 32, 32).astype(np.float32))
    """
    proto = _parse(model)
    opset = _check(proto)
    if opset < MIN_IMPORT_OPSET:
        try:
            proto = _onnx().version_converter.convert_version(proto, MIN_IMPORT_OPSET)
        except Exception as e:
            raise UnsupportedError(f"nexus.onnx.load: opset {opset} is older than {MIN_IMPORT_OPSET} and onnx "
                                   f"could not convert the model to {MIN_IMPORT_OPSET}: {e}") from None
        opset = MIN_IMPORT_OPSET
    return InferenceModel(proto, opset, fuse=fuse)
