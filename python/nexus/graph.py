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
import functools
import inspect
import math
import numbers
import sys
from typing import NamedTuple

import numpy as np

from . import _C
from . import _graph_args as _args

_K = _C.OpKind
_U = _C.UnaryOp
_B = _C.BinaryOp
SPEC_FORMAT = "nexus.graph/1"
# The layers a spec may hold: one per builder method that records an entry (residual records its
# block's entries and an add).
SPEC_LAYERS = ("input", "dense", "conv2d", "max_pool2d", "avg_pool2d", "flatten", "dropout",
               "batch_norm", "layer_norm", "activation", "use", "add", "concat")
LOSSES = ("cross_entropy",)


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


def _activation(at: str, a) -> str:
    """``a`` parsed for the layer ``at`` names (its errors say which layer)."""
    try:
        return Activation.parse(a).value
    except ValueError as err:
        raise ValueError(f"{at}: {err}") from None


_UNARY = {Activation.RELU: _U.relu, Activation.GELU: _U.gelu, Activation.TANH: _U.tanh,
          Activation.SIGMOID: _U.sigmoid}


class Ref(int):
    """A value in the graph under construction (returned by ``GraphBuilder.tap``).

    It is valid only with the builder that made it, and only while the value exists: a Ref taken
    inside a call that failed (and was undone) is refused rather than wired to whatever value
    later takes its place.
    """

    def __new__(cls, value: int, owner: object = None, epoch: int = 0):
        ref = super().__new__(cls, value)
        ref._owner, ref._epoch = owner, epoch
        return ref


class SpecError(ValueError):
    """A graph description (``GraphBuilder.spec``) that cannot be built. ``index``: the entry of
    its ``layers`` at fault (None: the description as a whole); ``reason``: what is wrong."""

    def __init__(self, index: int | None, reason: str):
        where = "graph description" if index is None else f"graph description layers[{index}]"
        super().__init__(f"{where}: {reason}")
        self.index, self.reason = index, reason


class TrainingGraph(NamedTuple):
    """What ``GraphBuilder.training_graph`` hands the compiled model."""

    builder: "GraphBuilder"  # the replay the graph was built on (its architecture, not to extend)
    graph: _C.Graph  # layers, labels input and loss node, shapes inferred
    output: int  # the model's output value
    params: list[tuple[str, np.ndarray]]  # initial parameter values, in graph order
    buffers: list[tuple[str, np.ndarray]]  # initial buffer values (batch-norm statistics)


def _transaction(method):
    """Makes a public builder call all or nothing: if it raises, the builder is rolled back to
    where it stood before the call (layers, parameters, names, the current value), so a failed
    layer, block or branch leaves no trace and building goes on. Calls made inside it (a
    residual block's layers) are calls too: one that fails is undone even if the block goes on."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        mark = (len(self._entries), self._graph.num_values)
        try:
            return method(self, *args, **kwargs)
        except BaseException:
            self._rollback(*mark)
            raise

    call.transactional = True
    return call


class GraphBuilder:
    """Builds a model layer by layer; ``compile`` turns it into a trainable native model.

    Every layer method checks its arguments where they are given (the error names the layer, the
    argument, the value and what is valid) and runs all or nothing: a call that raises leaves
    the builder as it was, so building continues.

    Args:
        seed: seeds the parameters' initial values (same seed, same model).
        dtype: "float32" or "float64".

    Raises:
        ValueError, TypeError: a bad ``seed`` or ``dtype``.

    Example:
        >>> g = GraphBuilder(seed=0).input("x", Shape(32, 8)).dense(4, "relu").dense(2, "softmax")
    """

    def __init__(self, seed: int = 0, dtype="float32"):
        if dtype not in ("float32", "float64"):
            raise ValueError(f"GraphBuilder dtype must be float32 or float64, got {dtype!r}")
        self.seed = _args.integer("GraphBuilder", "seed", seed, low=0)
        self.dtype = dtype
        self._rng = np.random.default_rng(self.seed)
        self._graph = _C.Graph()
        self._shapes = _C.ShapeInference()  # the graph's shapes, inferred layer by layer
        self._entries: list[dict] = []  # the spec: one entry per call, replayed by from_spec
        self._params: list[tuple[str, np.ndarray]] = []
        self._buffers: list[tuple[str, np.ndarray]] = []
        self._layers: list[dict] = []  # for summary(): name, kind, output value, param count
        self._layer_names: set[str] = set()  # the names in _layers (a set: a lookup per layer stays O(1))
        self._counts: dict[str, int] = {}
        self._current: int | None = None
        self._input: str | None = None
        self._sample_shape: tuple[int, ...] | None = None
        self._softmax_logits: dict[int, int] = {}  # softmax output -> its logits (fused CE)
        self._token = object()  # what this builder's Refs carry
        self._undone: list[int] = []  # per rollback: values that survived it (older Refs past it are gone)

    # ---- structure -----------------------------------------------------------------------------
    @_transaction
    def input(self, name: str, shape: Shape) -> "GraphBuilder":
        """The model's input, ``shape`` = (batch, features...); call it first, once."""
        if self._input is not None:
            raise ValueError("GraphBuilder: the model already has an input; one input is supported")
        if not isinstance(name, str) or not name:
            raise TypeError(f"input: name must be a non-empty string, got {name!r}")
        shape = shape if isinstance(shape, Shape) else Shape(shape)
        return self._apply({"layer": "input", "name": name, "shape": list(shape)})

    @_transaction
    def dense(self, units: int, activation=None, name: str | None = None) -> "GraphBuilder":
        """A fully connected layer: ``activation(x @ W + b)`` with ``units`` outputs."""
        e, at = self._entry("dense", name)
        e.update(units=_args.integer(at, "units", units), activation=_activation(at, activation))
        return self._apply(e)

    @_transaction
    def conv2d(self, filters: int, kernel_size, stride=1, padding="valid", activation=None,
               name: str | None = None, groups: int = 1, use_bias: bool = True) -> "GraphBuilder":
        """A 2-D convolution over NCHW input; ``kernel_size``, ``stride``: an int or a pair;
        ``padding``: "valid", "same" (stride 1, odd kernel) or an int or pair; ``groups``: the
        channels split into independent convolutions (as Keras' and torch's: it must divide the
        input channels and ``filters``; ``groups`` = input channels is a depthwise convolution);
        ``use_bias=False`` leaves the bias out (as before a batch norm, whose shift replaces it).

        Example:
            >>> g.conv2d(32, 3, padding="same", groups=32, activation="relu")  # depthwise
            >>> g.conv2d(64, 3, padding=1, use_bias=False).batch_norm().activation("relu")
        """
        e, at = self._entry("conv2d", name)
        e.update(filters=_args.integer(at, "filters", filters),
                 kernel_size=_args.pair(at, "kernel_size", kernel_size),
                 stride=_args.pair(at, "stride", stride), padding=_args.padding(at, padding),
                 activation=_activation(at, activation), groups=_args.integer(at, "groups", groups),
                 use_bias=_args.boolean(at, "use_bias", use_bias))
        return self._apply(e)

    @_transaction
    def max_pool2d(self, k, stride=None, name: str | None = None) -> "GraphBuilder":
        """Max over ``k`` x ``k`` windows (an int or a pair), ``stride`` defaulting to ``k``."""
        return self._apply(self._pool_entry("max_pool2d", k, stride, name))

    @_transaction
    def avg_pool2d(self, k, stride=None, name: str | None = None) -> "GraphBuilder":
        """Mean over ``k`` x ``k`` windows (an int or a pair), ``stride`` defaulting to ``k``."""
        return self._apply(self._pool_entry("avg_pool2d", k, stride, name))

    @_transaction
    def flatten(self, name: str | None = None) -> "GraphBuilder":
        """Reshapes each sample to one feature vector."""
        return self._apply(self._entry("flatten", name)[0])

    @_transaction
    def dropout(self, p: float, name: str | None = None) -> "GraphBuilder":
        """Inverted dropout: zeroes each value with probability ``p`` in [0, 1] while training
        and scales the rest by 1/(1-p) (p=1 gives zeros, as PyTorch)."""
        e, at = self._entry("dropout", name)
        e["p"] = _args.number(at, "p", p, 0.0, 1.0)
        return self._apply(e)

    @_transaction
    def batch_norm(self, momentum: float = 0.1, eps: float = 1e-5, name: str | None = None) -> "GraphBuilder":
        """Batch normalization over the channel axis (PyTorch's ``momentum`` in [0, 1], ``eps`` > 0)."""
        e, at = self._entry("batch_norm", name)
        e.update(momentum=_args.number(at, "momentum", momentum, 0.0, 1.0),
                 eps=_args.number(at, "eps", eps, 0.0, low_open=True))
        return self._apply(e)

    @_transaction
    def layer_norm(self, eps: float = 1e-5, name: str | None = None) -> "GraphBuilder":
        """Layer normalization over each sample's features (``eps`` > 0)."""
        e, at = self._entry("layer_norm", name)
        e["eps"] = _args.number(at, "eps", eps, 0.0, low_open=True)
        return self._apply(e)

    @_transaction
    def activation(self, activation, name: str | None = None) -> "GraphBuilder":
        """An activation on its own (an ``Activation`` or its name)."""
        e, at = self._entry("activation", name)
        e["activation"] = _activation(at, activation)
        return self._apply(e)

    # ---- branches and skips ---------------------------------------------------------------------
    def tap(self) -> Ref:
        """The current value, to branch from (``use``) or merge with (``add``, ``concat``) later."""
        self._need_current("tap")
        return Ref(self._current, self._token, len(self._undone))

    @_transaction
    def use(self, ref: Ref) -> "GraphBuilder":
        """Continues building from ``ref`` (start a parallel branch)."""
        self._need_current("use")
        return self._apply({"layer": "use", "ref": self._ref("use", ref)})

    @_transaction
    def add(self, ref: Ref, name: str | None = None) -> "GraphBuilder":
        """current + ref (shapes must match): the merge of a residual block."""
        e, at = self._entry("add", name)
        e["ref"] = self._ref(at, ref)
        return self._apply(e)

    @_transaction
    def concat(self, ref: Ref, axis: int = 1, name: str | None = None) -> "GraphBuilder":
        """Concatenates ref and the current value along ``axis`` (1: features or channels; any
        axis but the batch's, negative counting from the end)."""
        e, at = self._entry("concat", name)
        e["ref"] = self._ref(at, ref)
        e["axis"] = _args.feature_axis(at, axis, len(self.shape_of(self._current)))
        return self._apply(e)

    @_transaction
    def residual(self, block, name: str | None = None) -> "GraphBuilder":
        """ResNet-style skip: ``block(builder)`` builds from the current value, then the input is added."""
        if not callable(block):
            raise TypeError(f"residual: block must be a callable taking the builder, got {block!r}")
        _args.name("residual", name, self._names())
        skip = self.tap()
        block(self)
        return self.add(skip, name=name)

    # ---- compile and inspect --------------------------------------------------------------------
    def compile(self, loss: str = "cross_entropy", optimizer=None, fusion: bool = True, device=None):
        """A trainable model: forward, generated backward and the optimizer update in one native call.

        Args:
            loss: "cross_entropy" (the only loss so far).
            optimizer: an optimizer without parameters (``nx.optim.Adam(lr=1e-3)``); None uses
                ``nx.optim.SGD(lr=0.01)``.
            fusion: run the forward's elementwise chains (bias + activation, residual adds) as
                generated kernels (see ``nx.jit``); ``False`` runs every op on its own, same results.
            device: where the model trains ("cpu" by default, "cuda", "cuda:N"); ``Model.to``
                moves it later.

        Raises:
            ValueError: an unknown loss, an empty graph, outputs that are not (batch, classes).
            RuntimeError: ``device`` cannot be used (no CUDA build, driver or GPU).

        Example:
            >>> model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
        """
        from .model import Model  # noqa: PLC0415  (model imports graph)

        return Model.from_builder(self, loss, optimizer, fusion=fusion, device=device)

    def training_graph(self, loss: str = "cross_entropy") -> TrainingGraph:
        """The graph a compiled model trains, built on a replay of this builder's layers (same
        seed, same initial parameters) so that this builder stays buildable and compilable: the
        layers, then a ``labels`` input and the ``loss`` node (softmax followed by cross-entropy
        becomes one stable log-softmax on the logits). ``GraphBuilder.compile`` is the usual way
        to use it.

        Raises:
            ValueError: an unknown loss, an empty graph, outputs that are not (batch, classes).

        Example:
            >>> tg = GraphBuilder().input("x", Shape(2, 4)).dense(3, "softmax").training_graph()
            >>> [name for name, _ in tg.params]
            ['dense_1.weight', 'dense_1.bias']
        """
        if loss not in LOSSES:
            raise ValueError(f"compile: unknown loss {loss!r}; valid: {', '.join(LOSSES)}")
        if self._current is None:
            raise ValueError("compile: the graph is empty; call input(...) and add layers first")
        g = GraphBuilder.from_spec(self.spec())
        out, graph = g._current, g._graph
        if len(g.shape_of(out)) != 2:
            raise ValueError(f"compile: cross_entropy needs (batch, classes) outputs, got "
                             f"{g.shape_of(out)}")
        labels = graph.add_input("labels", [_C.kBatch], _C.DType.int64)
        logits = g._softmax_logits.get(out, out)
        graph.output = out
        graph.loss = graph.add_node(_K.cross_entropy, [logits, labels], "loss", reduce="mean")
        g._infer_shapes()  # the labels and the loss; the layers are inferred already
        return TrainingGraph(g, graph, out, list(g._params), list(g._buffers))

    def spec(self) -> dict:
        """The architecture as plain JSON-able data (replayed by ``GraphBuilder.from_spec``)."""
        return {"format": SPEC_FORMAT, "seed": self.seed, "dtype": self.dtype,
                "layers": [dict(e) for e in self._entries]}

    @classmethod
    def from_spec(cls, spec: dict) -> "GraphBuilder":
        """The builder a graph description describes (same layers, same initial parameters).

        ``spec`` is what ``spec()`` returns: ``format`` ("nexus.graph/1"), ``seed``, ``dtype``
        and ``layers``, one entry per call: ``layer`` (one of ``SPEC_LAYERS``) and the method's
        arguments by name (``{"layer": "dense", "units": 10, "activation": "softmax"}``; a
        ``name`` left out is generated; ``ref`` is the value id a ``tap()`` returned). Each
        entry is checked as the method checks its arguments.

        Raises:
            SpecError: a description that is not one, or an entry that cannot be built (its
                ``index`` in ``layers``; the message names the key and what is valid).

        Example:
            >>> g = GraphBuilder.from_spec({"format": "nexus.graph/1", "seed": 0,
            ...     "dtype": "float32", "layers": [
            ...         {"layer": "input", "name": "x", "shape": [1, 4]},
            ...         {"layer": "dense", "units": 2, "activation": "softmax"}]})
        """
        if not isinstance(spec, dict) or spec.get("format") != SPEC_FORMAT:
            raise SpecError(None, f"not a Nexus graph description (expected format "
                                  f"{SPEC_FORMAT!r})")
        unknown = sorted(set(spec) - {"format", "seed", "dtype", "layers"})
        if unknown:
            raise SpecError(None, f"unknown key {unknown[0]!r}; valid: format, seed, dtype, layers")
        if not isinstance(spec.get("layers"), list):
            raise SpecError(None, f"layers must be a list of layer entries, got "
                                  f"{spec.get('layers')!r}")
        try:
            g = cls(seed=spec.get("seed", 0), dtype=spec.get("dtype", "float32"))
        except (TypeError, ValueError) as e:
            raise SpecError(None, str(e)) from None
        for i, entry in enumerate(spec["layers"]):
            try:
                g._replay(entry)
            except (TypeError, ValueError) as e:
                raise SpecError(i, str(e)) from None
        return g

    @property
    def layers(self) -> list[dict]:
        """One record per layer built so far (``use`` is not a layer): ``name``, ``kind``,
        ``value`` (its output value), ``params`` (parameter count) and ``first_node``."""
        return [dict(layer) for layer in self._layers]

    @property
    def sample_shape(self) -> tuple[int, ...] | None:
        """The shape of one sample the model takes (its input Shape after the batch); None before
        ``input``."""
        return self._sample_shape

    # ---- internals ------------------------------------------------------------------------------
    def _replay(self, entry) -> None:
        """Appends one spec entry through its builder method, so that it is checked as a call."""
        if not isinstance(entry, dict) or "layer" not in entry:
            raise ValueError(f"missing key 'layer' (the layer kind, one of "
                             f"{', '.join(SPEC_LAYERS)}) in {entry!r}")
        if entry["layer"] not in SPEC_LAYERS:
            raise ValueError(f"unknown layer {entry['layer']!r}; valid: {', '.join(SPEC_LAYERS)}")
        kind, args = entry["layer"], {k: v for k, v in entry.items() if k != "layer"}
        params = inspect.signature(getattr(type(self), kind)).parameters
        valid = [p for p in params if p != "self"]
        unknown = sorted(set(args) - set(valid))
        missing = [p for p in valid if p not in args and params[p].default is inspect.Parameter.empty]
        if unknown or missing:
            what = f"unknown key {unknown[0]!r}" if unknown else f"missing key {missing[0]!r}"
            raise ValueError(f"{kind}: {what}; valid keys: layer, {', '.join(valid)}")
        if "ref" in args:
            args["ref"] = Ref(self._spec_ref(entry), self._token, len(self._undone))
        getattr(self, kind)(**args)

    def _names(self) -> set[str]:
        return self._layer_names

    def _entry(self, layer: str, name: str | None) -> tuple[dict, str]:
        """A new layer's entry (its name checked, or generated) and how errors name it."""
        self._need_current(layer)
        taken = self._names()
        name = _args.name(layer, name, taken)
        if name is None:
            n = self._counts.get(layer, 0) + 1
            while f"{layer}_{n}" in taken:
                n += 1
            name = f"{layer}_{n}"
        return {"layer": layer, "name": name}, f"layer '{name}' ({layer})"

    def _pool_entry(self, layer: str, k, stride, name) -> dict:
        e, at = self._entry(layer, name)
        k = _args.pair(at, "k", k)
        e.update(k=k, stride=k if stride is None else _args.pair(at, "stride", stride))
        return e

    def _ref(self, at: str, ref) -> int:
        """``ref`` as a value id, if it is a live Ref of this builder."""
        if not isinstance(ref, Ref):
            raise TypeError(f"{at}: ref must be a Ref from this builder's tap(), got {ref!r} "
                            f"({type(ref).__name__})")
        if ref._owner is not self._token:
            raise ValueError(f"{at}: ref {int(ref)} comes from another GraphBuilder's tap(); a Ref "
                             "is valid only with the builder that made it")
        if int(ref) >= min(self._undone[ref._epoch:], default=math.inf):
            raise ValueError(f"{at}: ref {int(ref)} was taken inside a call that failed and was "
                             "undone; tap() again")
        return int(ref)

    def _need_current(self, what: str) -> None:
        if self._current is None:
            raise ValueError(f"{what}: call input(name, Shape(...)) first")

    def _apply(self, e: dict) -> "GraphBuilder":
        layer = e["layer"]
        handler = getattr(self, f"_build_{layer}", None)
        if handler is None:
            raise ValueError(f"unknown layer {layer!r} in the graph description")
        if layer != "use":
            self._counts[layer] = self._counts.get(layer, 0) + 1
        n_params = len(self._params)
        start = self._graph.num_nodes
        out = handler(e)
        self._infer_shapes()
        self._entries.append(e)
        if layer != "use":
            count = sum(p.size for _, p in self._params[n_params:])
            self._layers.append({"name": e.get("name", layer), "kind": layer, "value": out, "params": count,
                                 "first_node": start})
            self._layer_names.add(self._layers[-1]["name"])
        self._current = out
        return self

    def _infer_shapes(self) -> None:
        """Infers the nodes added since the last call (each node once: building is linear in
        depth). A rollback replaces the graph and this state together, so they always agree."""
        self._shapes.infer(self._graph)

    def _rollback(self, entries: int, values: int) -> None:
        """Back to the state after the first ``entries`` entries, by replaying them."""
        fresh = type(self).from_spec({**self.spec(), "layers": self._entries[:entries]})
        token, undone = self._token, [*self._undone, values]
        self.__dict__.update(fresh.__dict__)
        self._token, self._undone = token, undone

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

    def _init(self, layer: str, fan_in: int, fan_out: int, shape, activation: str) -> np.ndarray:
        # He-uniform before ReLU/GELU, Glorot-uniform otherwise (Keras' default).
        too_big = f"layer '{layer}': a weight of shape {tuple(shape)} cannot be allocated"
        if math.prod(shape) * 8 > sys.maxsize:  # numpy would say "array is too big" (a ValueError)
            raise MemoryError(f"{too_big}: more bytes than one allocation can address")
        if activation in ("relu", "gelu"):
            limit = math.sqrt(6.0 / fan_in)
        else:
            limit = math.sqrt(6.0 / (fan_in + fan_out))
        try:
            return self._rng.uniform(-limit, limit, size=shape)
        except MemoryError as e:
            raise MemoryError(f"{too_big} ({e})") from None

    def _spec_ref(self, e) -> int:
        """An entry's ``ref``: a value already in the graph (a spec read from a file may say anything)."""
        ref = e["ref"]
        if not isinstance(ref, numbers.Integral) or not 0 <= ref < self._graph.num_values:
            raise ValueError(f"graph description: {e['layer']} entry refers to value {ref!r}, but the "
                             f"graph has values 0..{self._graph.num_values - 1}")
        return int(ref)

    def _build_input(self, e):
        self._input = e["name"]
        self._sample_shape = tuple(e["shape"][1:])
        dtype = _C.DType.float32 if self.dtype == "float32" else _C.DType.float64
        return self._graph.add_input(e["name"], [_C.kBatch, *e["shape"][1:]], dtype)

    def _build_use(self, e):
        return self._spec_ref(e)

    def _build_dense(self, e):
        x, name = self._current, e["name"]
        shape = self.shape_of(x)
        if len(shape) != 2:
            raise ValueError(f"layer '{name}' (dense): expects (batch, features) input, got shape {shape}; "
                             "add flatten() first")
        fan_in, units = shape[1], e["units"]
        w = self._param(name, "weight", self._init(name, fan_in, units, (fan_in, units), e["activation"]))
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
        k, groups = e["filters"], e["groups"]
        if c % groups or k % groups:
            raise ValueError(f"layer '{name}' (conv2d): groups={groups} must divide both the {c} input "
                             f"channels and the {k} filters")
        cg = c // groups
        w = self._param(name, "weight",
                        self._init(name, cg * kh * kw, k // groups * kh * kw, (k, cg, kh, kw), e["activation"]))
        inputs = [x, w, self._param(name, "bias", np.zeros(k))] if e["use_bias"] else [x, w]
        y = self._node(_K.conv2d, inputs, name, ints=[sh, sw, ph, pw, groups])
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
        # The statistics (one pass over x), then x * scale + shift per channel (scale = rstd *
        # weight, shift = bias - mean * scale, as PyTorch's CPU kernel) as elementwise nodes:
        # fusion joins them with what follows (an activation, a residual add) into one kernel, and
        # the backward is two per-channel sums (one also storing the gradient it sums) and one
        # elementwise kernel for the input's gradient.
        x = self._current
        stats = self._node(_K.batch_norm_stats, [x, rm, rv], name, floats=[e["momentum"], e["eps"]])
        mean, rstd = (self._node(_K.select, [stats], name, ints=[1, row]) for row in (0, 1))
        per_channel = [1, c] + [1] * (len(self.shape_of(x)) - 2)
        w, b = (self._node(_K.reshape, [p], name, ints=per_channel) for p in (w, b))
        scale = self._node(_K.binary, [rstd, w], name, binary=_B.mul)
        shift = self._node(_K.binary, [b, self._node(_K.binary, [mean, scale], name, binary=_B.mul)], name,
                           binary=_B.sub)
        y = self._node(_K.binary, [x, scale], name, binary=_B.mul)
        return self._node(_K.binary, [y, shift], name, binary=_B.add)

    def _build_layer_norm(self, e):
        features = list(self.shape_of(self._current)[1:])
        name = e["name"]
        w = self._param(name, "weight", np.ones(features))
        b = self._param(name, "bias", np.zeros(features))
        return self._node(_K.layer_norm, [self._current, w, b], name, ints=features, floats=[e["eps"]])

    def _build_activation(self, e):
        return self._act(self._current, e["activation"], e["name"])

    def _build_add(self, e):
        a, b = self._current, self._spec_ref(e)
        if self.shape_of(a) != self.shape_of(b):
            raise ValueError(f"layer '{e['name']}' (add): shapes {self.shape_of(b)} and {self.shape_of(a)} "
                             "differ; a residual block must keep its input's shape")
        return self._node(_K.binary, [b, a], e["name"], binary=_B.add)

    def _build_concat(self, e):
        return self._node(_K.concat, [self._spec_ref(e), self._current], e["name"], ints=[e["axis"]])

