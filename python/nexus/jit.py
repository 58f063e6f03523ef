"""``nx.jit``: trace a Python function of tensors into the graph IR and run it as fused kernels.

    f = nx.jit(lambda t: nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(t) - 0.5 * t)
    y = f(x)            # traces on the first call for this input signature, then runs the plan
    f.stats()           # kernels per call, compiles, cache hits, compile seconds, traces
    print(f.explain())  # fusion groups, bytes per call with and without fusion, generated source

How tracing works (``_trace.py``): the function runs once eagerly on the real inputs while every
native op it calls (operators, methods, indexing and ``nx.*`` functions all end in ``nexus._C``)
is recorded as a graph node. The fusion pass (C++) groups elementwise chains and reduction
epilogues; each group becomes one generated kernel (compiled through the on-disk cache, or
interpreted with ``NEXUS_JIT=0``); other ops (matmul, views, ...) run as regular ops between them.

When a trace is reused (guards, as ``torch.compile``'s): a trace holds for the dtypes and shapes
of the tensor arguments it was made with (for any shape of the same broadcast class when it is
made only of elementwise ops, reductions and matmuls and read no shape), for equal non-tensor
arguments, and while the Python values the function reads besides its arguments are unchanged
(globals, closure variables, defaults, helpers it calls: ``_guards.py``). Otherwise the function
is traced again. Tensors in the closure or globals are read afresh on every call. What cannot be
guarded raises :class:`TraceError` naming the line: converting a traced tensor to a Python value
(``.item()``, ``bool(t)``, ``.numpy()``), in-place writes, and tensors from places the guards do
not see.

Gradients: when inputs (or captured tensors) require grad under grad mode, a function returning one
floating scalar is differentiated in the graph (autodiff appends its backward; both are fused) and
each call returns the value with its gradients attached for ``backward()``; other functions run
eagerly in that case (``_Plan``).
"""

from __future__ import annotations

import functools
import glob
import importlib.util
import os

from . import _C, _guards, _trace
from ._trace import TraceError
from .autograd import no_grad as _no_grad

Tensor = _C.Tensor
_CG = _C.codegen

__all__ = ["TraceError", "jit", "jit_config"]


def jit_config() -> dict:
    """How fused kernels run here: jit_enabled, compiler, flags, cache_dir."""
    return dict(_CG.config())


# ---- the plan: fused groups and regular ops in order ------------------------------------------


class _Plan:
    """One trace: its graph, run by the core's executor (``_C.TracedProgram``) in one call.

    With gradients (``grad``: inputs require grad, grad mode on) the function must return one
    floating scalar (a loss): the graph's autodiff appends its backward, the program returns the
    value and every gradient at once, and the value goes on the tape with a backward that scales
    them by the incoming gradient. Anything else (other results, an op with no graph rule) runs
    the function eagerly, so its gradients are eager autograd's (``eager`` says why).
    """

    def __init__(self, fn, args: tuple, kwargs: dict, leaves: list, scan: _guards.Scan, grad: bool = False):
        self.eager = ""
        self.grad_inputs: list[int] | None = None  # inputs (in sources order) the gradients are of
        tracer = _trace.Tracer(scan.tensors)
        for i, t in enumerate(leaves):
            tracer.bind_input(f"arg{i}", t, ("arg", i))
        with _no_grad():
            result = _trace.run(tracer, fn, args, kwargs)
        self.single = isinstance(result, Tensor)
        outs = [result] if self.single else list(result) if isinstance(result, (list, tuple)) else None
        if outs is None or not all(isinstance(o, Tensor) for o in outs):
            raise TraceError(f"nx.jit: the function must return a tensor or a tuple/list of tensors, "
                             f"got {type(result).__name__}")
        roots = [tracer.value(o) for o in outs]
        self.graph = tracer.graph
        self.shape_free = tracer.shape_free and not tracer.read_shape and not grad
        self.sources = tracer.sources
        self.scan = scan  # holds what the guards compare by identity
        if grad:
            roots = self._with_gradients(tracer, outs, roots, leaves, scan)
        self.program = _C.TracedProgram(self.graph, roots)
        plan = self.program.plan
        self.refusals = list(plan.refusals)
        self.kernels = [(cg.group, cg.program, list(cg.consts)) for cg in plan.groups]
        members = {n for grp, _, _ in self.kernels for n in grp.nodes}
        g, skip = self.graph, (_C.OpKind.input, _C.OpKind.const)
        self.ops = sum(1 for n, on in enumerate(self.program.live)  # ops between the kernels
                       if on and n not in members and g.node_kind(n) not in skip)

    def _with_gradients(self, tracer, outs: list, roots: list[int], leaves: list, scan) -> list[int]:
        """The roots of the value and its gradients; sets eager (and keeps roots) when the graph
        cannot give them."""
        def requires(kind, x) -> bool:
            t = leaves[x] if kind == "arg" else scan.tensors[x] if kind == "capture" else x
            return t.requires_grad
        if not (self.single and outs[0].ndim == 0 and outs[0].dtype.name.startswith(("float", "bfloat"))):
            self.eager = "its result is not one floating scalar (a loss)"
            return roots
        wrt = [j for j, (kind, x) in enumerate(self.sources) if requires(kind, x)]
        try:
            grads = self.graph.differentiate(roots[0], [tracer.input_values[j] for j in wrt])
        except (ValueError, TypeError, RuntimeError) as e:
            self.eager = f"the graph has no gradient for it ({e})"
            return roots
        self.grad_inputs = [j for j, gv in zip(wrt, grads) if gv >= 0]  # the others do not reach it
        return roots + [gv for gv in grads if gv >= 0]

    def run(self, leaves: list, captured: list):
        inputs = [leaves[x] if kind == "arg" else captured[x] if kind == "capture" else x
                  for kind, x in self.sources]
        result = self.program.run(inputs)
        if self.grad_inputs is not None:
            return _C.attach_gradients(result[0], [inputs[j] for j in self.grad_inputs], result[1:])
        return result[0] if self.single else tuple(result)


def _exact(t: Tensor) -> tuple:
    return int(t.dtype.code), tuple(t.shape)


def _loose(t: Tensor) -> tuple:
    return int(t.dtype.code), t.ndim, tuple(d == 1 for d in t.shape)


def _structure(a, leaves: list):
    """A hashable description of an argument with its tensors replaced by their position in
    ``leaves`` (appended to); lists, tuples and dicts are walked."""
    if isinstance(a, Tensor):
        leaves.append(a)
        return ("T",)
    if isinstance(a, (list, tuple)):
        return (type(a).__name__, tuple(_structure(x, leaves) for x in a))
    if isinstance(a, dict):
        return ("dict", tuple((k, _structure(a[k], leaves)) for k in sorted(a, key=repr)))
    if isinstance(a, _guards.SCALARS):
        return _guards.scalar_key(a)
    try:
        hash(a)
    except TypeError:
        raise TypeError(f"nx.jit: arguments must be tensors, numbers, strings, or lists/tuples/dicts "
                        f"of them, got {type(a).__name__}") from None
    return ("C", type(a).__name__, a)


class JitFunction:
    """A traced, fused version of a Python function of tensors (see :func:`jit`)."""

    def __init__(self, fn):
        self.fn = fn
        self._plans = {}
        self._last = None
        self.traces = 0
        functools.update_wrapper(self, fn)

    def _plan(self, args: tuple, kwargs: dict) -> tuple[_Plan, list, list]:
        if not kwargs and all(type(a) is Tensor for a in args):  # the common case, quickly
            leaves, struct = list(args), len(args)
        else:
            leaves = []
            struct = (_structure(args, leaves), _structure(kwargs, leaves))
        scan = _guards.scan(self.fn, _exact)
        devices = {str(t.device) for t in leaves + scan.tensors if t.ndim or t.device.type != "cpu"}
        if len(devices) > 1:  # one call runs on one device (host 0-d scalars go with any)
            raise TraceError(f"nx.jit: the function's tensors are on {' and '.join(sorted(devices))}; "
                             "move them to one device before the call")
        grad = _C.is_grad_enabled() and any(t.requires_grad for t in leaves + scan.tensors)
        flags = tuple(t.requires_grad for t in leaves + scan.tensors) if grad else ()
        loose = (struct, tuple(_loose(t) for t in leaves), scan.key, flags)
        plan = self._plans.get(loose)
        if plan is None or not plan.shape_free:
            exact = (struct, tuple(_exact(t) for t in leaves), scan.key, flags)
            plan = self._plans.get(exact)
            if plan is None:
                plan = _Plan(self.fn, args, kwargs, leaves, scan, grad)
                self.traces += 1
                self._plans[loose if plan.shape_free else exact] = plan
        self._last = plan
        return plan, leaves, scan.tensors

    def __call__(self, *args, **kwargs):
        if _trace.tracing():  # called inside another trace: inline it
            return self.fn(*args, **kwargs)
        plan, leaves, captured = self._plan(args, kwargs)
        if plan.eager:
            return self.fn(*args, **kwargs)
        return plan.run(leaves, captured)

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
        plan = self._plan(args, {})[0] if args else self._last
        if plan is None:
            return "nx.jit: not traced yet; call the function (or pass example arguments)"
        g = plan.graph
        lines = [f"nx.jit({getattr(self.fn, '__name__', 'fn')}): {len(plan.kernels)} fused kernel(s), "
                 f"{plan.ops} regular op(s) per call", "", "graph:", g.dump()]
        fused = unfused = 0
        for k, (grp, program, consts) in enumerate(plan.kernels):
            fused += grp.bytes_fused
            unfused += grp.bytes_unfused
            anchor = f", epilogue of node {grp.anchor}" if grp.anchor >= 0 else ""
            again = f" (recomputing nodes {list(grp.recomputed)})" if len(grp.recomputed) else ""
            lines.append(f"group {k}: {program.name}: nodes {list(grp.nodes)}{again}, inputs {list(grp.inputs)}, "
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
        plan = self._plan(example_args, {})[0]
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
    """Trace ``fn`` (a function of tensors) and run it as fused kernels; see the module doc.

    Args:
        fn: a Python function of tensors (numbers, strings and lists/tuples/dicts of them too)
            returning a tensor or a tuple/list of tensors.

    Returns:
        A :class:`JitFunction`: call it as ``fn``; ``stats()`` and ``explain()`` describe it.

    Raises:
        TypeError: ``fn`` is not callable. At call time, :class:`TraceError` for code a trace
            cannot hold (see the module doc).

    Example:
        >>> loss = nx.jit(lambda x, w: nx.mean(nx.tanh(x * w) ** 2))
        >>> w = nx.randn(8, requires_grad=True)
        >>> loss(nx.randn(8), w).backward()   # w.grad from the fused backward
    """
    if not callable(fn):
        raise TypeError(f"nx.jit expects a callable, got {type(fn).__name__}")
    return JitFunction(fn)
