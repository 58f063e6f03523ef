"""Optimizers (SGD, Adam, AdamW) and learning-rate schedules, with PyTorch semantics.

The update itself is one fused native call over all parameters (``nexus._C.optim.step``); this
module holds the user-facing classes and the schedules, which are policy.

Two ways to use an optimizer::

    # configuration for a compiled model: no parameters
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))

    # eagerly, as in PyTorch
    opt = nx.optim.SGD([w, b], lr=0.1, momentum=0.9)
    loss.backward(); opt.step(); opt.zero_grad()

``lr`` is a float or a schedule: any callable ``step -> lr``, such as
``LinearWarmup(CosineDecay(1e-3, total_steps=10_000), warmup_steps=500)``. ``step`` counts the
optimizer steps taken before the one being made (0 for the first), as PyTorch schedulers count.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable

import numpy as np

from . import _C
from . import functional as F
from .tensor import Tensor

__all__ = [
    "Optimizer", "SGD", "Adam", "AdamW", "Schedule", "StepLR", "CosineDecay", "CosineAnnealing",
    "LinearWarmup", "global_grad_norm", "clip_grad_norm_", "from_config",
]

_Kind = _C.optim.Config.Kind


# ---- learning-rate schedules ---------------------------------------------------------------------


def _check_number(name: str, value, low: float = 0.0, strict: bool = False) -> float:
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or value < low or (strict and value == low):
        bound = f"> {low:g}" if strict else f">= {low:g}"
        raise ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    return float(value)


def _check_int(name: str, value, low: int) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


_SCHEDULES: dict[str, type] = {}  # class name -> Schedule subclass of this module (for loading)


class Schedule:
    """A learning rate as a function of the optimizer step: ``schedule(step) -> float``.

    Subclasses implement ``__call__`` and ``_fields()``: the constructor's arguments by name, so
    that ``type(s)(**s._fields())`` rebuilds the schedule (a field may hold a float or another
    schedule). Checkpoints store a schedule as that data. Every subclass defined in this module is
    registered for loading by its class name. Any plain callable ``step -> lr`` works wherever a
    schedule is accepted (but cannot be stored in a checkpoint).
    """

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            _SCHEDULES[cls.__name__] = cls

    def __call__(self, step: int) -> float:
        raise NotImplementedError

    def _fields(self) -> dict:
        return {}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._fields().items())
        return f"{type(self).__name__}({args})"


def _lr_of(lr, step: int) -> float:
    return float(lr(step)) if callable(lr) else float(lr)


def _check_lr(lr, name: str = "lr"):
    if callable(lr):
        return lr
    return _check_number(name, lr)


class StepLR(Schedule):
    """``lr * gamma ** (step // step_size)`` (torch.optim.lr_scheduler.StepLR)."""

    def __init__(self, lr: float, step_size: int, gamma: float = 0.1):
        self.lr = _check_number("StepLR: lr", lr)
        self.step_size = _check_int("StepLR: step_size", step_size, 1)
        self.gamma = _check_number("StepLR: gamma", gamma)

    def __call__(self, step: int) -> float:
        return self.lr * self.gamma ** (int(step) // self.step_size)

    def _fields(self) -> dict:
        return {"lr": self.lr, "step_size": self.step_size, "gamma": self.gamma}


class CosineDecay(Schedule):
    """Cosine from ``lr`` down to ``min_lr`` over ``total_steps``, then ``min_lr``.

    ``min_lr + (lr - min_lr) * (1 + cos(pi * step / total_steps)) / 2`` for ``step <=
    total_steps``: the closed form of torch's CosineAnnealingLR (``T_max=total_steps``,
    ``eta_min=min_lr``). Past ``total_steps`` it holds ``min_lr``, as Keras' CosineDecay does,
    where torch's cosine would rise again. ``CosineAnnealing`` is the same class.
    """

    def __init__(self, lr: float, total_steps: int, min_lr: float = 0.0):
        self.lr = _check_number("CosineDecay: lr", lr)
        self.total_steps = _check_int("CosineDecay: total_steps", total_steps, 1)
        self.min_lr = _check_number("CosineDecay: min_lr", min_lr)

    def __call__(self, step: int) -> float:
        t = min(int(step), self.total_steps)
        cosine = (1 + math.cos(math.pi * t / self.total_steps)) / 2
        return self.min_lr + (self.lr - self.min_lr) * cosine

    def _fields(self) -> dict:
        return {"lr": self.lr, "total_steps": self.total_steps, "min_lr": self.min_lr}


CosineAnnealing = CosineDecay


class LinearWarmup(Schedule):
    """A linear ramp over ``warmup_steps``, then ``schedule`` (a float or another schedule).

    During warm-up: ``schedule(0) * (start_factor + (1 - start_factor) * step / warmup_steps)``
    (torch's LinearLR with ``end_factor=1``); afterwards ``schedule(step - warmup_steps)``, so the
    wrapped schedule starts when warm-up ends (torch's SequentialLR with one milestone).
    """

    def __init__(self, schedule, warmup_steps: int, start_factor: float = 0.0):
        self.schedule = _check_lr(schedule, "LinearWarmup: schedule")
        self.warmup_steps = _check_int("LinearWarmup: warmup_steps", warmup_steps, 0)
        self.start_factor = _check_number("LinearWarmup: start_factor", start_factor)
        if self.start_factor > 1:
            raise ValueError(f"LinearWarmup: start_factor must be in [0, 1], got {start_factor!r}")

    def __call__(self, step: int) -> float:
        step = int(step)
        if step >= self.warmup_steps:
            return _lr_of(self.schedule, step - self.warmup_steps)
        frac = step / self.warmup_steps
        return _lr_of(self.schedule, 0) * (self.start_factor + (1 - self.start_factor) * frac)

    def _fields(self) -> dict:
        return {"schedule": self.schedule, "warmup_steps": self.warmup_steps,
                "start_factor": self.start_factor}


# ---- optimizers ----------------------------------------------------------------------------------


def _param_list(params) -> list[Tensor] | None:
    if params is None:
        return None
    if isinstance(params, Tensor) or not isinstance(params, Iterable):
        hint = (" (for a compiled model, pass lr= by keyword: nx.optim.SGD(lr=0.1))"
                if isinstance(params, numbers.Real) or callable(params) else "")
        raise TypeError("params must be an iterable of nexus Tensors, got "
                        f"{type(params).__name__}{hint}")
    out = list(params)
    seen = set()
    for i, p in enumerate(out):
        if not isinstance(p, Tensor):
            raise TypeError(f"params[{i}] must be a nexus Tensor, got {type(p).__name__}")
        if not p.is_leaf:
            raise ValueError(f"params[{i}] is not a leaf tensor (it has grad_fn={p.grad_fn}); "
                             "optimizers update leaves such as nx.randn(..., requires_grad=True)")
        if p.data_ptr() in seen:
            raise ValueError(f"params[{i}] appears more than once in the parameter list")
        seen.add(p.data_ptr())
    return out


class Optimizer:
    """Base class: an optimizer configuration, plus parameters and state when used eagerly.

    The contract with the compiled model (which calls the native update itself) is three methods:
    ``native_config()`` (the ``nexus._C.optim.Config``), ``lr_at(step)`` (the learning rate for
    the update made after ``step`` updates) and ``native_state()`` (the ``nexus._C.optim.State``
    to update, so that ``state_dict()`` covers the compiled path too).
    """

    _kind = None  # set by subclasses

    def __init__(self, params, lr, **config):
        self.lr = _check_lr(lr)
        self._config = _C.optim.Config(kind=self._kind, **config)
        _C.optim.validate(self._config, _lr_of(self.lr, 0))
        self.params = _param_list(params)
        self._state = _C.optim.State()
        if self.params is not None:  # sized now, so that state_dict() before a step says so
            n = len(self.params)
            self._state.param_steps, self._state.m, self._state.v = [0] * n, [None] * n, [None] * n

    # -- the contract with the compiled model --

    def native_config(self):
        """The native ``Config`` (kind and hyperparameters) that ``nexus._C.optim.step`` takes."""
        return self._config

    def lr_at(self, step: int) -> float:
        """The learning rate of the update made after ``step`` updates (0 for the first)."""
        return _lr_of(self.lr, step)

    def native_state(self):
        """The native ``State`` (step count, moments) that ``nexus._C.optim.step`` updates."""
        return self._state

    # -- eager use --

    @property
    def step_count(self) -> int:
        """Updates made so far (the step the schedule is evaluated at next)."""
        return self._state.step

    def _eager_params(self) -> list[Tensor]:
        if self.params is None:
            raise RuntimeError(
                f"{type(self).__name__} was created without parameters (a configuration for a "
                "compiled model); pass them to use it eagerly: "
                f"nx.optim.{type(self).__name__}(model_params, lr=...)")
        return self.params

    def step(self, closure: Callable | None = None):
        """Updates every parameter that has a gradient (parameters whose ``.grad`` is None are
        skipped). ``closure``, if given, re-evaluates the model and returns the loss."""
        loss = closure() if closure is not None else None
        params = self._eager_params()
        lr = self.lr_at(self._state.step)
        _C.optim.step(self._config, lr, params, [p.grad for p in params], self._state)
        return loss

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Resets the gradients: to None (the default, as in PyTorch) or to zeros."""
        for p in self._eager_params():
            if set_to_none or p.grad is None:
                p.grad = None
            else:
                p.grad = F.zeros(p.shape, dtype=p.dtype)

    # -- checkpoints --

    def state_dict(self) -> dict:
        """The state as plain data (numpy arrays and numbers; no pickle needed):
        ``{"type": "Adam", "step": int, "param_steps": int64 array, "state": {"0.exp_avg": array,
        ...}}``. Buffers that do not exist yet are absent. Hyperparameters are not included: they
        come from the constructor (a schedule is code, not data)."""
        s = self._state
        tensors = {}
        for name, bufs in zip(self._buffer_names, (s.m, s.v)):
            for i, t in enumerate(bufs):
                if t is not None:
                    tensors[f"{i}.{name}"] = np.array(t.cpu().numpy(), copy=True)
        return {"type": type(self).__name__, "step": int(s.step),
                "param_steps": np.array(s.param_steps, dtype=np.int64), "state": tensors}

    def load_state_dict(self, state_dict: dict) -> None:
        """Restores what ``state_dict()`` returned (copies the arrays)."""
        kind = state_dict.get("type")
        if kind != type(self).__name__:
            raise ValueError(f"load_state_dict: the state is for {kind!r}, "
                             f"not {type(self).__name__!r}")
        param_steps = [int(k) for k in np.asarray(state_dict["param_steps"]).reshape(-1)]
        n = len(param_steps)
        if self.params is not None and n != len(self.params):
            raise ValueError(f"load_state_dict: the state holds {n} parameters, this optimizer has "
                             f"{len(self.params)}")
        bufs = {name: [None] * n for name in self._buffer_names}
        for key, arr in state_dict["state"].items():
            index, _, name = key.partition(".")
            if name not in bufs or not index.isdigit() or int(index) >= n:
                raise ValueError(f"load_state_dict: unexpected entry {key!r} for {kind} with {n} "
                                 f"parameters (expected '<index>.{'/'.join(self._buffer_names)}')")
            arr = np.asarray(arr)
            if self.params is not None:
                p = self.params[int(index)]
                if arr.shape != tuple(p.shape) or arr.dtype != np.dtype(p.dtype.name):
                    raise ValueError(f"load_state_dict: {key!r} has shape {arr.shape} and dtype "
                                     f"{arr.dtype}; its parameter has shape {tuple(p.shape)} and "
                                     f"dtype {p.dtype.name}")
            bufs[name][int(index)] = F.tensor(arr)
        state = _C.optim.State()
        state.step = int(state_dict["step"])
        state.param_steps = param_steps
        state.m = bufs[self._buffer_names[0]]
        state.v = bufs[self._buffer_names[1]] if len(self._buffer_names) > 1 else [None] * n
        self._state = state

    def get_config(self) -> dict:
        """Constructor arguments as JSON-able data (checkpoints store it; ``from_config`` rebuilds)."""
        c = self._config
        kwargs = {k: getattr(c, k) for k in self._config_fields}
        if "beta1" in kwargs:
            kwargs["betas"] = [kwargs.pop("beta1"), kwargs.pop("beta2")]
        kwargs["clip_norm"] = c.clip_norm or None
        return {"class": type(self).__name__, "lr": _schedule_to_data(self.lr), "kwargs": kwargs}

    def __repr__(self) -> str:
        c = self._config
        fields = [f"lr={self.lr!r}"] + [f"{k}={getattr(c, k)!r}" for k in self._repr_fields]
        if c.clip_norm > 0:
            fields.append(f"clip_norm={c.clip_norm!r}")
        n = "" if self.params is None else f"{len(self.params)} params, "
        return f"{type(self).__name__}({n}{', '.join(fields)})"


def _clip(clip_norm) -> float:
    return 0.0 if clip_norm is None else _check_number("clip_norm", clip_norm, strict=True)


class SGD(Optimizer):
    """Stochastic gradient descent with momentum, as torch.optim.SGD.

    ``d = g + weight_decay * p``; with momentum ``buf = momentum * buf + (1 - dampening) * d``
    (the first buffer is ``d``) and ``d = d + momentum * buf`` (nesterov) or ``d = buf``;
    ``p -= lr * d``. ``clip_norm`` scales all gradients first so that their global norm is at
    most ``clip_norm`` (torch.nn.utils.clip_grad_norm_).
    """

    _kind = _Kind.SGD
    _buffer_names = ("momentum_buffer",)
    _repr_fields = ("momentum", "dampening", "nesterov", "weight_decay")
    _config_fields = _repr_fields

    def __init__(self, params=None, lr=1e-3, *, momentum: float = 0.0, dampening: float = 0.0,
                 nesterov: bool = False, weight_decay: float = 0.0, clip_norm: float | None = None):
        super().__init__(params, lr, momentum=float(momentum), dampening=float(dampening),
                         nesterov=bool(nesterov), weight_decay=float(weight_decay),
                         clip_norm=_clip(clip_norm))


class Adam(Optimizer):
    """Adam, as torch.optim.Adam: ``weight_decay`` is L2 added to the gradient.

    ``m = b1*m + (1-b1)*g``, ``v = b2*v + (1-b2)*g*g``,
    ``p -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)``, with ``t`` counted per parameter.
    """

    _kind = _Kind.Adam
    _buffer_names = ("exp_avg", "exp_avg_sq")
    _repr_fields = ("beta1", "beta2", "eps", "weight_decay")
    _config_fields = _repr_fields

    def __init__(self, params=None, lr=1e-3, *, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, clip_norm: float | None = None):
        beta1, beta2 = _betas(betas)
        super().__init__(params, lr, beta1=beta1, beta2=beta2, eps=float(eps),
                         weight_decay=float(weight_decay), clip_norm=_clip(clip_norm))


class AdamW(Adam):
    """AdamW, as torch.optim.AdamW: decoupled weight decay ``p -= lr * weight_decay * p`` before
    the Adam update (no L2 term in the gradient)."""

    _kind = _Kind.AdamW

    def __init__(self, params=None, lr=1e-3, *, betas=(0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 1e-2, clip_norm: float | None = None):
        super().__init__(params, lr, betas=betas, eps=eps, weight_decay=weight_decay,
                         clip_norm=clip_norm)


def _betas(betas) -> tuple[float, float]:
    try:
        beta1, beta2 = betas
        return float(beta1), float(beta2)
    except (TypeError, ValueError):
        raise ValueError(f"betas must be a pair (beta1, beta2), got {betas!r}") from None


def _schedule_to_data(lr):
    """A float, or ``{"class": name, "config": {field: data}}`` for a schedule (fields recursively:
    a schedule may hold a float or another schedule, at any depth)."""
    if not callable(lr):
        return float(lr)
    if _SCHEDULES.get(type(lr).__name__) is not type(lr):
        raise ValueError(f"cannot store the learning rate {lr!r} in a checkpoint: use a number or one "
                         f"of nx.optim's schedules ({', '.join(_SCHEDULES)})")
    return {"class": type(lr).__name__,
            "config": {k: _schedule_to_data(v) if callable(v) else v
                       for k, v in lr._fields().items()}}


def _schedule_from_data(data):
    """The inverse of ``_schedule_to_data``. Also reads the flat form older checkpoints stored,
    ``{"schedule": "StepLR", "lr": ..., ...}``."""
    if isinstance(data, numbers.Real) and not isinstance(data, bool):
        return float(data)
    if isinstance(data, dict) and "class" not in data and isinstance(data.get("schedule"), str):
        fields = dict(data)
        data = {"class": fields.pop("schedule"), "config": fields}
    if not (isinstance(data, dict) and set(data) == {"class", "config"}
            and isinstance(data["config"], dict)):
        raise ValueError(f"a stored learning rate must be a number or "
                         f"{{'class': <schedule>, 'config': {{...}}}}, got {data!r}")
    name = data["class"]
    if not isinstance(name, str) or name not in _SCHEDULES:
        raise ValueError(f"unknown schedule {name!r}; valid: {', '.join(_SCHEDULES)}")
    config = {k: _schedule_from_data(v) if isinstance(v, dict) else v
              for k, v in data["config"].items()}
    try:
        return _SCHEDULES[name](**config)
    except TypeError as e:
        raise ValueError(f"stored schedule {name} cannot be built from {config!r}: {e}") from None


def from_config(config: dict) -> Optimizer:
    """The optimizer ``get_config()`` described (without parameters: for a compiled model)."""
    classes = {"SGD": SGD, "Adam": Adam, "AdamW": AdamW}
    if config.get("class") not in classes:
        raise ValueError(f"unknown optimizer {config.get('class')!r}; valid: {', '.join(classes)}")
    return classes[config["class"]](lr=_schedule_from_data(config["lr"]), **config["kwargs"])


# ---- gradient norm -------------------------------------------------------------------------------


def global_grad_norm(params: Iterable[Tensor]) -> float:
    """The 2-norm of all gradients together (parameters without a gradient are skipped)."""
    return _C.optim.global_grad_norm([p.grad for p in params])


def clip_grad_norm_(params: Iterable[Tensor], max_norm: float) -> float:
    """torch.nn.utils.clip_grad_norm_: scales the gradients in place by
    ``min(1, max_norm / (norm + 1e-6))``; returns the norm before clipping."""
    return _C.optim.clip_grad_norm([p.grad for p in params], float(max_norm))
