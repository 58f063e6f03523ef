"""GraphBuilder: a fluent description of a model that becomes Nexus's C++ graph IR.

    g = GraphBuilder(seed=0)
    g.input("features", Shape(32, 784)).dense(256, Activation.RELU).dropout(0.5).dense(10, "softmax")
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))

Every method appends one layer to the current value and returns the builder. Each layer is also
recorded as a JSON-able entry (``g.spec()``): replaying the entries rebuilds the same graph, which
is how checkpoints store the architecture without pickle. The builder never computes: shapes come
from the C++ shape-inference pass, which names the layer in any shape error.
"""

from __future__ import annotations

import enum
import math
import numbers

import numpy as np

from . import _C

_K = _C.OpKind
_U = _C.UnaryOp
_B = _C.BinaryOp


class Shape(tuple):
    """A layer's shape; the first dimension is the batch (any batch size runs)."""

    def __new__(cls, *dims):
        if len(dims) == 1 and isinstance(dims[0], (tuple, list)):
            dims = tuple(dims[0])
        for d in dims:
            if not isinstance(d, numbers.Integral) or d <= 0:
                raise ValueError(f"Shape dimensions must be positive integers, got {dims}")
        if len(dims) < 2:
            raise ValueError(f"Shape needs a batch dimension and at least one feature dimension, got {dims}")
        return super().__new__(cls, (int(d) for d in dims))

    @property
    def features(self) -> tuple[int, ...]:
        return tuple(self[1:])


class Activation(enum.Enum):
    NONE = "none"
    RELU = "relu"
    GELU = "gelu"
    TANH = "tanh"
    SIGMOID = "sigmoid"
    SOFTMAX = "softmax"

    @classmethod
    def parse(cls, a) -> "Activation":
        if a is None:
            return cls.NONE
        if isinstance(a, cls):
            return a
        try:
            return cls(str(a).lower())
        except ValueError:
            valid = ", ".join(m.value for m in cls)
            raise ValueError(f"unknown activation {a!r}; valid: {valid}") from None


_UNARY = {Activation.RELU: _U.relu, Activation.GELU: _U.gelu, Activation.TANH: _U.tanh,
          Activation.SIGMOID: _U.sigmoid}


class Ref(int):
    """A value in the graph under construction (returned by ``GraphBuilder.tap``)."""


class GraphBuilder:
    """Builds a model layer by layer; ``compile`` turns it into a trainable native model."""

    def __init__(self, seed: int = 0, dtype="float32"):
        if dtype not in ("float32", "float64"):
            raise ValueError(f"GraphBuilder dtype must be float32 or float64, got {dtype!r}")
        self.seed = int(seed)
        self.dtype = dtype
        self._rng = np.random.default_rng(self.seed)
        self._graph = _C.Graph()
        self._entries: list[dict] = []
        self._params: list[tuple[str, np.ndarray]] = []
        self._buffers: list[tuple[str, np.ndarray]] = []
        self._layers: list[dict] = []  # for summary(): name, kind, output value, param count
        self._counts: dict[str, int] = {}
        self._current: int | None = None
        self._input: int | None = None
        self._softmax_logits: dict[int, int] = {}  # softmax output -> its logits (fused CE)

    # ---- structure -----------------------------------------------------------------------------
    def input(self, name: str, shape: Shape) -> "GraphBuilder":
        if self._input is not None:
            raise ValueError("GraphBuilder: the model already has an input; one input is supported")
        shape = shape if isinstance(shape, Shape) else Shape(shape)
        return self._apply({"layer": "input", "name": name, "shape": list(shape)})

    def dense(self, units: int, activation=None, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("dense", name, units=int(units), activation=Activation.parse(activation).value))

    def conv2d(self, filters: int, kernel_size, stride=1, padding="valid", activation=None,
               name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("conv2d", name, filters=int(filters), kernel_size=_pair(kernel_size),
                                       stride=_pair(stride), padding=padding if isinstance(padding, str) else _pair(padding),
                                       activation=Activation.parse(activation).value))

    def max_pool2d(self, k, stride=None, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("max_pool2d", name, k=_pair(k), stride=_pair(stride if stride else k)))

    def avg_pool2d(self, k, stride=None, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("avg_pool2d", name, k=_pair(k), stride=_pair(stride if stride else k)))

    def flatten(self, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("flatten", name))

    def dropout(self, p: float, name: str | None = None) -> "GraphBuilder":
        if not 0 <= p <= 1:
            raise ValueError(f"dropout: p must be in [0, 1], got {p}")
        return self._apply(self._entry("dropout", name, p=float(p)))

    def batch_norm(self, momentum: float = 0.1, eps: float = 1e-5, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("batch_norm", name, momentum=float(momentum), eps=float(eps)))

    def layer_norm(self, eps: float = 1e-5, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("layer_norm", name, eps=float(eps)))

    def activation(self, a, name: str | None = None) -> "GraphBuilder":
        return self._apply(self._entry("activation", name, activation=Activation.parse(a).value))

    # ---- branches and skips ---------------------------------------------------------------------
    def tap(self) -> Ref:
        """The current value, to branch from (``use``) or merge with (``add``, ``concat``) later."""
        self._need_current("tap")
        return Ref(self._current)

    def use(self, ref: Ref) -> "GraphBuilder":
        """Continues building from ``ref`` (start a parallel branch)."""
        return self._apply({"layer": "use", "ref": int(ref)})

    def add(self, ref: Ref, name: str | None = None) -> "GraphBuilder":
        """current + ref (shapes must match): the merge of a residual block."""
        return self._apply(self._entry("add", name, ref=int(ref)))

    def concat(self, ref: Ref, axis: int = 1, name: str | None = None) -> "GraphBuilder":
        """Concatenates ref and the current value along ``axis`` (1: features or channels)."""
        return self._apply(self._entry("concat", name, ref=int(ref), axis=int(axis)))

    def residual(self, block, name: str | None = None) -> "GraphBuilder":
        """ResNet-style skip: ``block(builder)`` builds from the current value, then the input is added."""
        skip = self.tap()
        block(self)
        return self.add(skip, name=name)

    # ---- compile and inspect --------------------------------------------------------------------
    def compile(self, loss: str = "cross_entropy", optimizer=None, fusion: bool = True):
        """A trainable model: forward, generated backward and the optimizer update in one native call.

        ``fusion`` runs the forward's elementwise chains (bias + activation, residual adds) as
        generated kernels (see ``nx.jit``); ``False`` runs every op on its own, same results.
        """
        from .model import Model  # noqa: PLC0415  (model imports graph)

        # The model gets its own replay of the layers (same seed, same parameters): compiling adds
        # the labels input and the loss, and this builder must stay buildable and compilable.
        return Model._from_builder(GraphBuilder.from_spec(self.spec()), loss, optimizer, fusion=fusion)

    def spec(self) -> dict:
        """The architecture as plain JSON-able data (replayed by ``GraphBuilder.from_spec``)."""
        return {"format": "nexus.graph/1", "seed": self.seed, "dtype": self.dtype, "layers": list(self._entries)}

    @classmethod
    def from_spec(cls, spec: dict) -> "GraphBuilder":
        if not isinstance(spec, dict) or spec.get("format") != "nexus.graph/1":
            raise ValueError("not a Nexus graph description (expected format 'nexus.graph/1')")
        g = cls(seed=spec["seed"], dtype=spec["dtype"])
        for entry in spec["layers"]:
            g._apply(dict(entry))
        return g

    # ---- internals ------------------------------------------------------------------------------
    def _entry(self, layer: str, name: str | None, **config) -> dict:
        self._need_current(layer)
        n = self._counts.get(layer, 0) + 1
        return {"layer": layer, "name": name or f"{layer}_{n}", **config}

    def _need_current(self, what: str) -> None:
        if self._current is None:
            raise ValueError(f"{what}: call input(name, Shape(...)) first")

    def _apply(self, e: dict) -> "GraphBuilder":
        layer = e["layer"]
        if layer != "use":
            self._counts[layer] = self._counts.get(layer, 0) + 1
        handler = getattr(self, f"_build_{layer}", None)
        if handler is None:
            raise ValueError(f"unknown layer {layer!r} in the graph description")
        n_params = len(self._params)
        start = self._graph.num_nodes
        try:
            out = handler(e)
            self._graph.infer_shapes()
        except Exception:
            self._replay()  # a failed layer leaves no trace: the builder stays usable
            raise
        if layer != "use":
            self._entries.append(e)
            count = sum(p.size for _, p in self._params[n_params:])
            self._layers.append({"name": e.get("name", layer), "kind": layer, "value": out, "params": count,
                                 "first_node": start})
        self._current = out
        return self

    def _replay(self) -> None:
        entries = self._entries
        fresh = GraphBuilder(seed=self.seed, dtype=self.dtype)
        for entry in entries:
            fresh._apply(dict(entry))
        self.__dict__.update(fresh.__dict__)

    def shape_of(self, ref: int) -> tuple:
        """The shape of a value, None standing for the batch dimension."""
        return tuple(None if d == _C.kBatch else d for d in self._graph.value_shape(int(ref)))

    def _param(self, layer: str, what: str, values: np.ndarray) -> int:
        name = f"{layer}.{what}"
        self._params.append((name, values.astype(self.dtype)))
        return self._graph.add_param(name, list(values.shape), getattr(_C.DType, self.dtype))

    def _node(self, kind, inputs, name, **kw) -> int:
        return self._graph.add_node(kind, [int(i) for i in inputs], name, **kw)

    def _act(self, x: int, activation: str, name: str) -> int:
        a = Activation(activation)
        if a is Activation.NONE:
            return x
        if a is Activation.SOFTMAX:
            out = self._node(_K.softmax, [x], name, ints=[-1])
            self._softmax_logits[out] = x
            return out
        return self._node(_K.unary, [x], name, unary=_UNARY[a])

    def _init(self, fan_in: int, fan_out: int, shape, activation: str) -> np.ndarray:
        # He-uniform before ReLU/GELU, Glorot-uniform otherwise (Keras' default).
        if activation in ("relu", "gelu"):
            limit = math.sqrt(6.0 / fan_in)
        else:
            limit = math.sqrt(6.0 / (fan_in + fan_out))
        return self._rng.uniform(-limit, limit, size=shape)

    def _build_input(self, e):
        self._input = e["name"]
        dtype = _C.DType.float32 if self.dtype == "float32" else _C.DType.float64
        return self._graph.add_input(e["name"], [_C.kBatch, *e["shape"][1:]], dtype)

    def _build_use(self, e):
        return int(e["ref"])

    def _build_dense(self, e):
        x, name = self._current, e["name"]
        shape = self.shape_of(x)
        if len(shape) != 2:
            raise ValueError(f"layer '{name}' (dense): expects (batch, features) input, got shape {shape}; "
                             "add flatten() first")
        fan_in, units = shape[1], e["units"]
        w = self._param(name, "weight", self._init(fan_in, units, (fan_in, units), e["activation"]))
        b = self._param(name, "bias", np.zeros(units))
        y = self._node(_K.matmul, [x, w], name)
        y = self._node(_K.binary, [y, b], name, binary=_B.add)
        return self._act(y, e["activation"], name)

    def _build_conv2d(self, e):
        x, name = self._current, e["name"]
        shape = self.shape_of(x)
        if len(shape) != 4:
            raise ValueError(f"layer '{name}' (conv2d): expects (batch, channels, height, width) input, "
                             f"got shape {shape}")
        c, (kh, kw), (sh, sw) = shape[1], e["kernel_size"], e["stride"]
        pad = e["padding"]
        if pad == "valid":
            ph = pw = 0
        elif pad == "same":
            if (sh, sw) != (1, 1) or kh % 2 == 0 or kw % 2 == 0:
                raise ValueError(f"layer '{name}' (conv2d): padding='same' needs stride 1 and an odd kernel")
            ph, pw = kh // 2, kw // 2
        elif isinstance(pad, (list, tuple)):
            ph, pw = pad
        else:
            raise ValueError(f"layer '{name}' (conv2d): padding must be 'valid', 'same' or an int, got {pad!r}")
        k = e["filters"]
        w = self._param(name, "weight", self._init(c * kh * kw, k * kh * kw, (k, c, kh, kw), e["activation"]))
        b = self._param(name, "bias", np.zeros(k))
        y = self._node(_K.conv2d, [x, w, b], name, ints=[sh, sw, ph, pw])
        return self._act(y, e["activation"], name)

    def _pool(self, kind, e):
        (kh, kw), (sh, sw) = e["k"], e["stride"]
        return self._node(kind, [self._current], e["name"], ints=[kh, kw, sh, sw])

    def _build_max_pool2d(self, e):
        return self._pool(_K.max_pool2d, e)

    def _build_avg_pool2d(self, e):
        return self._pool(_K.avg_pool2d, e)

    def _build_flatten(self, e):
        shape = self.shape_of(self._current)
        return self._node(_K.reshape, [self._current], e["name"], ints=[_C.kBatch, int(np.prod(shape[1:]))])

    def _build_dropout(self, e):
        return self._node(_K.dropout, [self._current], e["name"], floats=[e["p"]])

    def _build_batch_norm(self, e):
        c = self.shape_of(self._current)[1]
        name = e["name"]
        w = self._param(name, "weight", np.ones(c))
        b = self._param(name, "bias", np.zeros(c))
        self._buffers.append((f"{name}.running_mean", np.zeros(c, self.dtype)))
        rm = self._graph.add_buffer(f"{name}.running_mean", [c], getattr(_C.DType, self.dtype))
        self._buffers.append((f"{name}.running_var", np.ones(c, self.dtype)))
        rv = self._graph.add_buffer(f"{name}.running_var", [c], getattr(_C.DType, self.dtype))
        return self._node(_K.batch_norm, [self._current, w, b, rm, rv], name, floats=[e["momentum"], e["eps"]])

    def _build_layer_norm(self, e):
        features = list(self.shape_of(self._current)[1:])
        name = e["name"]
        w = self._param(name, "weight", np.ones(features))
        b = self._param(name, "bias", np.zeros(features))
        return self._node(_K.layer_norm, [self._current, w, b], name, ints=features, floats=[e["eps"]])

    def _build_activation(self, e):
        return self._act(self._current, e["activation"], e["name"])

    def _build_add(self, e):
        a, b = self._current, int(e["ref"])
        if self.shape_of(a) != self.shape_of(b):
            raise ValueError(f"layer '{e['name']}' (add): shapes {self.shape_of(b)} and {self.shape_of(a)} "
                             "differ; a residual block must keep its input's shape")
        return self._node(_K.binary, [b, a], e["name"], binary=_B.add)

    def _build_concat(self, e):
        return self._node(_K.concat, [int(e["ref"]), self._current], e["name"], ints=[e["axis"]])


def _pair(v):
    if v is None:
        return None
    if isinstance(v, numbers.Integral):
        return [int(v), int(v)]
    v = list(v)
    if len(v) != 2:
        raise ValueError(f"expected an int or a pair, got {v!r}")
    return [int(v[0]), int(v[1])]
