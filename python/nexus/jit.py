"""``nx.jit``: trace a Python function of tensors into the graph IR and run it as fused kernels.

    f = nx.jit(lambda t: nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(t) - 0.5 * t)
    y = f(x)            # traces on the first call for this input signature, then runs the plan
    f.stats()           # kernels per call, compiles, cache hits, compile seconds
    print(f.explain())  # fusion groups, bytes per call with and without fusion, generated source

How tracing works: the function runs once eagerly on the real inputs while every call into the
native ops (``nexus._C``: operators, methods and ``nx.*`` functions all end there) is recorded as
a graph node. The fusion pass (C++) groups elementwise chains and reduction epilogues; each group
becomes one generated kernel (compiled through the on-disk cache, or interpreted with
``NEXUS_JIT=0``); other ops (matmul, views, ...) run as regular ops between the groups.
Converting a traced tensor to a Python value (``.item()``, ``bool(t)``, ``.numpy()``) inside the
function raises :class:`TraceError`: its value would be frozen into the trace.
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os
import threading

from . import _C
from . import functional as _F
from . import tensor as _T

Tensor = _C.Tensor
_K = _C.OpKind
_CG = _C.codegen

__all__ = ["jit", "TraceError", "jit_config"]


class TraceError(TypeError):
    """Something inside an ``nx.jit`` function cannot be traced."""


def jit_config() -> dict:
    """How fused kernels run here: jit_enabled, compiler, flags, cache_dir."""
    return dict(_CG.config())


# ---- recording --------------------------------------------------------------------------------

_REDUCE = {"sum": 0, "mean": 1, "amax": 2, "amin": 3}
_NODE_KIND = {"unary": _K.unary, "binary": _K.binary, "where": _K.where, "astype": _K.cast,
              "matmul": _K.matmul, "conv2d": _K.conv2d}
# Ops whose recorded form depends only on input ranks and dtypes (a trace made of these alone is
# reused for any shape of the same class).
_SHAPE_FREE = {"unary", "binary", "where", "astype", "sum", "mean", "amax", "amin", "matmul"}
_OPS = {
    "unary", "binary", "where", "astype", "full", "sum", "mean", "amax", "amin", "matmul",
    "conv2d", "reshape", "permute", "transpose", "expand", "slice", "select", "unsqueeze",
    "index_select", "concat", "stack", "contiguous", "clone", "argmax", "var", "logsumexp",
    "softmax", "log_softmax", "cross_entropy", "max_pool2d", "avg_pool2d", "dropout",
    "layer_norm", "batch_norm", "arange", "rand", "randn", "from_numpy",
}
_FORBIDDEN = ("numpy", "item", "tolist", "__bool__", "__float__", "__int__", "__index__")
_lock = threading.RLock()
_active = threading.local()


def _forbidden(name, original):
    # Only the tracing thread is refused; another thread converting its own tensors meanwhile
    # gets the real method.
    def fail(self, *args, **kwargs):
        if not getattr(_active, "tracing", False):
            return original(self, *args, **kwargs)
        raise TraceError(
            f"nx.jit: `{name}` on a traced tensor inside a jit function: its value would be frozen "
            "into the trace (Python control flow on tensor values, .item(), .numpy() and float() "
            "cannot be traced). Move it out of the function, or use nx.where for a data-dependent "
            "choice.")
    return fail


class _Tracer:
    def __init__(self):
        self.thread = threading.get_ident()  # only this thread's ops are recorded
        self.graph = _C.Graph()
        self.values = {}     # id(tensor) -> value id
        self.keep = []       # tensors seen (keeps ids unique while tracing)
        self.calls = {}      # node/value id -> (op name, argument template)
        self.captures = {}   # value id -> captured tensor
        self.shape_free = True

    def value(self, t: Tensor) -> int:
        v = self.values.get(id(t))
        if v is None:  # a tensor the function closes over: an input bound to this tensor
            v = self.graph.add_input(f"capture{len(self.captures)}", list(t.shape), t._dtype)
            self.captures[v] = t
            self.values[id(t)] = v
            self.keep.append(t)
        return v

    def template(self, a):
        if isinstance(a, Tensor):
            return ("v", self.value(a))
        if isinstance(a, (list, tuple)):
            return type(a)(self.template(x) for x in a)
        return a

    def record(self, name, args, out):
        if not isinstance(out, Tensor):
            return
        g = self.graph
        inputs = [self.value(a) for a in args if isinstance(a, Tensor)]
        for a in args:
            if isinstance(a, (list, tuple)):
                inputs += [self.value(x) for x in a if isinstance(x, Tensor)]
        kind, unary, binary, ints, floats, red, keep = _K.opaque, _C.UnaryOp.neg, _C.BinaryOp.add, [], [], 0, False
        if name in _NODE_KIND:
            kind = _NODE_KIND[name]
            if name == "unary":
                unary = args[0]
            elif name == "binary":
                binary = args[0]
        elif name == "full" and list(args[0]) == []:
            kind, floats = _K.const, [float(args[1])]
        elif name in _REDUCE and args[0].ndim > 0:
            ndim = args[0].ndim
            axes = sorted({a % ndim for a in args[1]}) if args[1] else list(range(ndim))
            kind, ints, red, keep = _K.reduce, axes, _REDUCE[name], bool(args[2])
        if name not in _SHAPE_FREE and kind != _K.const:
            self.shape_free = False
        v = g.add_traced(kind, inputs, name, unary, binary, ints, floats, red, keep, list(out.shape),
                         out._dtype)
        self.calls[v] = (name, self.template(args))
        self.values[id(out)] = v
        self.keep.append(out)


class _RecordingC:
    """Stands in for ``nexus._C`` in functional.py and tensor.py while a function is traced."""

    def __init__(self, tracer):
        self._tracer = tracer

    def __getattr__(self, name):
        real = getattr(_C, name)
        if name not in _OPS or threading.get_ident() != self._tracer.thread:
            return real  # other threads' eager ops run untouched while this one traces
        tracer = self._tracer

        def call(*args):
            out = real(*args)
            tracer.record(name, args, out)
            return out
        return call


def _trace(fn, args):
    tracer = _Tracer()
    traced_args = []
    for i, a in enumerate(args):
        if isinstance(a, Tensor):
            tracer.values[id(a)] = tracer.graph.add_input(f"arg{i}", list(a.shape), a._dtype)
            tracer.keep.append(a)
        traced_args.append(a)
    saved = {name: getattr(Tensor, name) for name in _FORBIDDEN}
    with _lock:
        _active.tracing = True
        _F._C = _T._C = _RecordingC(tracer)
        for name in _FORBIDDEN:
            setattr(Tensor, name, _forbidden(name, saved[name]))
        try:
            result = fn(*traced_args)
        finally:
            _F._C = _T._C = _C
            for name, attr in saved.items():
                setattr(Tensor, name, attr)
            _active.tracing = False
    single = isinstance(result, Tensor)
    outs = [result] if single else list(result) if isinstance(result, (list, tuple)) else None
    if outs is None or not all(isinstance(o, Tensor) for o in outs):
        raise TraceError(f"nx.jit: the function must return a tensor or a tuple/list of tensors, "
                         f"got {type(result).__name__}")
    roots = [tracer.value(o) for o in outs]
    return tracer, roots, single


# ---- the plan: fused groups and regular ops in order ------------------------------------------


class _Plan:
    def __init__(self, fn, args):
        tracer, roots, self.single = _trace(fn, args)
        g = self.graph = tracer.graph
        self.shape_free = tracer.shape_free
        self.roots = roots
        self.captures = tracer.captures
        self.arg_values = [tracer.values[id(a)] if isinstance(a, Tensor) else None for a in args]
        fused = _CG.fuse_graph(g, roots)
        self.refusals = list(fused.refusals)
        self.kernels = [(fg.group, fg.program, list(fg.consts)) for fg in fused.groups]
        last = {grp.nodes[-1]: k for k, (grp, _, _) in enumerate(self.kernels)}
        member = {n for grp, _, _ in self.kernels for n in grp.nodes}
        steps = []
        for node in range(g.num_nodes):
            if node in last:
                grp, program, consts = self.kernels[last[node]]
                steps.append(("kernel", list(grp.inputs), list(grp.outputs), (program, consts)))
            elif node not in member:
                v = g.node_output(node)
                if v in tracer.calls:
                    name, tmpl = tracer.calls[v]
                    steps.append(("op", _values_in(tmpl), [v], (getattr(_C, name), tmpl)))
        needed = set(roots)
        kept = []
        for step in reversed(steps):  # dead-code elimination
            if any(v in needed for v in step[2]):
                needed.update(step[1])
                kept.append(step)
        self.steps = kept[::-1]

    def run(self, args):
        env = dict(self.captures)
        for v, a in zip(self.arg_values, args):
            if v is not None:
                env[v] = a
        for kind, ins, outs, payload in self.steps:
            if kind == "kernel":
                program, consts = payload
                for v, t in zip(outs, program.run([env[v] for v in ins], consts)):
                    env[v] = t
            else:
                fn, tmpl = payload
                env[outs[0]] = fn(*_resolve(tmpl, env))
        result = [env[v] for v in self.roots]
        return result[0] if self.single else tuple(result)


def _values_in(tmpl):
    if isinstance(tmpl, tuple) and len(tmpl) == 2 and tmpl[0] == "v":
        return [tmpl[1]]
    if isinstance(tmpl, (list, tuple)):
        return [v for x in tmpl for v in _values_in(x)]
    return []


def _resolve(tmpl, env):
    if isinstance(tmpl, tuple) and len(tmpl) == 2 and tmpl[0] == "v":
        return env[tmpl[1]]
    if isinstance(tmpl, (list, tuple)):
        return type(tmpl)(_resolve(x, env) for x in tmpl)
    return tmpl


def _arg_key(a, exact: bool):
    if isinstance(a, Tensor):
        shape = tuple(a.shape) if exact else (a.ndim, tuple(d == 1 for d in a.shape))
        return ("T", int(a._dtype), shape)
    try:
        hash(a)
    except TypeError:
        raise TypeError(f"nx.jit: arguments must be tensors or hashable values (numbers, strings), "
                        f"got {type(a).__name__}") from None
    return ("C", type(a).__name__, a)


class JitFunction:
    """A traced, fused version of a Python function of tensors (see :func:`jit`)."""

    def __init__(self, fn):
        self.fn = fn
        self._plans = {}
        self._last = None
        self.traces = 0
        functools.update_wrapper(self, fn)

    def _plan(self, args) -> _Plan:
        for a in args:
            if isinstance(a, Tensor) and a.requires_grad and _C.is_grad_enabled():
                raise ValueError("nx.jit: fused kernels record no gradients; call the function under "
                                 "nx.no_grad() or pass detached tensors (t.detach())")
        loose = tuple(_arg_key(a, False) for a in args)
        plan = self._plans.get(loose)
        if plan is None or not plan.shape_free:
            exact = tuple(_arg_key(a, True) for a in args)
            plan = self._plans.get(exact)
            if plan is None:
                plan = _Plan(self.fn, args)
                self.traces += 1
                self._plans[loose if plan.shape_free else exact] = plan
        self._last = plan
        return plan

    def __call__(self, *args):
        if getattr(_active, "tracing", False):  # called inside another trace: inline it
            return self.fn(*args)
        return self._plan(args).run(args)

    def _programs(self):
        seen = {}
        for plan in self._plans.values():
            for _, program, _ in plan.kernels:
                seen[program.name] = program
        return list(seen.values())

    def stats(self) -> dict:
        """kernels (fused kernels per call, last signature), compiles, cache_hits,
        compile_seconds, traces, bytes_fused / bytes_unfused per call, backend."""
        s = dict(kernels=0, compiles=0, cache_hits=0, compile_seconds=0.0, traces=self.traces,
                 bytes_fused=0, bytes_unfused=0,
                 backend="compiled" if _CG.config()["jit_enabled"] else "interpreter")
        if self._last is not None:
            s["kernels"] = len(self._last.kernels)
            s["bytes_fused"] = sum(g.bytes_fused for g, _, _ in self._last.kernels)
            s["bytes_unfused"] = sum(g.bytes_unfused for g, _, _ in self._last.kernels)
        for p in self._programs():
            ps = p.stats()
            s["compiles"] += ps["compiles"]
            s["cache_hits"] += ps["cache_hits"]
            s["compile_seconds"] += ps["compile_seconds"]
        return s

    def explain(self, *args) -> str:
        """The fusion groups of the last call (or of ``args``), the bytes each call reads and
        writes with and without fusion, refused fusions with reasons, and the generated source."""
        plan = self._plan(args) if args else self._last
        if plan is None:
            return "nx.jit: not traced yet; call the function (or pass example arguments)"
        g = plan.graph
        lines = [f"nx.jit({getattr(self.fn, '__name__', 'fn')}): {len(plan.kernels)} fused kernel(s), "
                 f"{sum(1 for s in plan.steps if s[0] == 'op')} regular op(s) per call", "", "graph:", g.dump()]
        fused = unfused = 0
        for k, (grp, program, consts) in enumerate(plan.kernels):
            fused += grp.bytes_fused
            unfused += grp.bytes_unfused
            anchor = f", epilogue of node {grp.anchor}" if grp.anchor >= 0 else ""
            lines.append(f"group {k}: {program.name}: nodes {list(grp.nodes)}, inputs {list(grp.inputs)}, "
                         f"outputs {list(grp.outputs)}, constants {list(consts)}{anchor}; bytes per call "
                         f"{grp.bytes_fused} fused vs {grp.bytes_unfused} unfused")
        saved = f" ({1 - fused / unfused:.0%} less)" if unfused else ""
        lines.append(f"bytes read+written per call: {fused} fused vs {unfused} unfused{saved}")
        for r in plan.refusals:
            lines.append(f"refused: {r}")
        for _, program, _ in plan.kernels:
            lines += ["", f"---- {program.name} (C++) ----", program.source("cpp")]
        return "\n".join(lines)

    def ptx(self, *example_args, arch: str = "compute_80") -> str:
        """PTX for each fused kernel of the trace for ``example_args``, compiled by NVRTC (no GPU
        needed). Raises ValueError naming what to install when NVRTC is missing."""
        plan = self._plan(example_args)
        libs = nvrtc_candidates()
        return "\n".join(_CG.ptx(program, arch, libs) for _, program, _ in plan.kernels)


def nvrtc_candidates() -> list[str]:
    """libnvrtc paths from the nvidia-cuda-nvrtc wheels and CUDA toolkits, best first."""
    found = []
    for mod in ("nvidia.cuda_nvrtc", "nvidia.cu13", "nvidia.cu12"):
        try:
            spec = importlib.util.find_spec(mod)
        except (ImportError, ValueError):
            spec = None
        for loc in (spec.submodule_search_locations or []) if spec else []:
            found += sorted(glob.glob(os.path.join(loc, "lib", "libnvrtc.so*")), reverse=True)
    for root in [os.environ.get("CUDA_HOME", ""), "/usr/local/cuda", *sorted(glob.glob("/usr/local/cuda-*"))]:
        if root:
            found += sorted(glob.glob(os.path.join(root, "lib64", "libnvrtc.so*")), reverse=True)
    return [f for f in found if "alt" not in os.path.basename(f) and "builtins" not in os.path.basename(f)]


def jit(fn):
    """Trace ``fn`` (a function of tensors) and run it as fused kernels; see the module doc."""
    if not callable(fn):
        raise TypeError(f"nx.jit expects a callable, got {type(fn).__name__}")
    return JitFunction(fn)
