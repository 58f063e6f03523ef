"""Fused kernels: the chain gelu(1.7t + 0.3) * sigmoid(t) - 0.5t over 16M float32, side by side.

    python benchmarks/fusion.py [--threads 2] [--quick] [--no-torch-compile]

nx.jit (one generated kernel), numpy, PyTorch eager and torch.compile (when it works here), each
checked against a float64 numpy reference first, then timed alternately (medians). ratio = peer
time / nx.jit time, so > 1 means nx.jit is faster. Effective bandwidth counts 8 bytes per
element (read t once, write the result once) and is shown as a fraction of a STREAM-style copy
measured in the same run. The cold compile time of the graph's kernel (in an empty cache, where it
also makes the precompiled prelude), a warm second process (0 compiles) and a third compiling a
kernel the cache lacks are measured in fresh processes with a private NEXUS_CACHE_DIR.

Then a loss and its backward (issue 21): mean((tanh(x*w + 0.5) - y)^2) over 1M float32 with x and
w requiring grad, nx.jit (the graph's backward, fused) against Nexus's eager autograd and PyTorch
eager, gradients checked against eager first. Bar: >= 3x eager Nexus autograd.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_interleaved, check, fmt_ms, print_run_notes, table, threads  # noqa: E402

import nexus as nx  # noqa: E402

try:
    import torch
except ImportError:
    torch = None

BARS = [("nx.jit >= 4x numpy", "numpy", 4.0), ("nx.jit >= 1.5x PyTorch eager", "torch eager", 1.5)]
A, B = np.float32(0.7978845608028654), np.float32(0.044715)


def chain_nx(t):
    return nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(t) - 0.5 * t


def chain_np(t):
    u = t * np.float32(1.7) + np.float32(0.3)
    g = np.float32(0.5) * u * (np.float32(1) + np.tanh(A * (u + B * u * u * u)))
    return g * (np.float32(1) / (np.float32(1) + np.exp(-t))) - np.float32(0.5) * t


def chain_ref(t):
    """The chain in float64 (gelu in its tanh form, as nx.gelu and torch's approximate="tanh")."""
    t = t.astype(np.float64)
    u = t * 1.7 + 0.3
    gelu = 0.5 * u * (1 + np.tanh(0.7978845608028654 * (u + 0.044715 * u ** 3)))
    return gelu / (1 + np.exp(-t)) - 0.5 * t


def chain_torch(t):
    return torch.nn.functional.gelu(t * 1.7 + 0.3, approximate="tanh") * torch.sigmoid(t) - 0.5 * t


COMPILE_SCRIPT = """
import json, sys, nexus as nx
gate = getattr(nx, sys.argv[1])
f = nx.jit(lambda t: nx.gelu(t * 1.7 + 0.3) * gate(t) - 0.5 * t)
f(nx.randn(1024))
print(json.dumps(f.stats()))
"""


def compile_times():
    """(cold compile seconds, cold compiles, warm compiles, seconds of another kernel's compile in
    that cache) from three fresh processes: the first kernel in an empty cache also makes the
    cache's precompiled prelude (GCC), which later kernels are compiled against."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NEXUS_CACHE_DIR": cache}
        runs = []
        for gate in ("sigmoid", "sigmoid", "tanh"):  # the chain, again, then another kernel
            out = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT, gate], env=env, capture_output=True,
                                 text=True, check=True).stdout
            runs.append(json.loads(out.strip().splitlines()[-1]))
    return runs[0]["compile_seconds"], runs[0]["compiles"], runs[1]["compiles"], runs[2]["compile_seconds"]


def loss_nx(x, w, y):
    """A 6-op chain with a reduction: mean((tanh(x*w + 0.5) - y)^2)."""
    h = nx.tanh(x * w + 0.5) - y
    return nx.mean(h * h)


def loss_torch(x, w, y):
    h = torch.tanh(x * w + 0.5) - y
    return torch.mean(h * h)


def gradient_rows(n: int) -> tuple[list, float]:
    """Loss + backward of loss_nx at n elements: nx.jit (one program: the value and both
    gradients) against Nexus's eager autograd and PyTorch eager, gradients checked first."""
    rng = np.random.default_rng(1)
    xs, ws, ys = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    x, w = nx.tensor(xs, requires_grad=True), nx.tensor(ws, requires_grad=True)
    y = nx.from_numpy(ys)
    f = nx.jit(loss_nx)

    def step(fn, *args):
        for t in args[:2]:
            t.grad = None
        fn(*args).backward()
        return args[0].grad, args[1].grad

    eager = [g.numpy().copy() for g in step(loss_nx, x, w, y)]
    for name, got in (("nx.jit gradients", step(f, x, w, y)),):
        check(name + " dx", got[0], eager[0], rtol=1e-5, atol=1e-9)
        check(name + " dw", got[1], eager[1], rtol=1e-5, atol=1e-9)
    rows = [("nx.jit loss+backward", lambda: step(f, x, w, y)),
            ("nexus eager autograd", lambda: step(loss_nx, x, w, y))]
    if torch is not None:
        xt, wt = (torch.from_numpy(a.copy()).requires_grad_() for a in (xs, ws))
        yt = torch.from_numpy(ys)
        check("torch eager dx", step(loss_torch, xt, wt, yt)[0].numpy(), eager[0], rtol=1e-4, atol=1e-9)
        rows.append(("torch eager autograd", lambda: step(loss_torch, xt, wt, yt)))
    stats = bench_interleaved([fn for _, fn in rows], warmup=2, rounds=5, min_time=2.0)
    base = stats[0]["median"]
    out = [[name, fmt_ms(st["median"]), f"{st['median'] / base:.2f}x"] for (name, _), st in zip(rows, stats)]
    return out, stats[1]["median"] / base


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="1M elements instead of 16M")
    ap.add_argument("--no-torch-compile", action="store_true")
    args = ap.parse_args()
    n = (1 << 20) if args.quick else (16 << 20)
    notes = threads(args.threads)
    if torch is not None:
        torch.set_num_threads(args.threads)
        notes.append(f"torch {torch.__version__} threads: {torch.get_num_threads()}")
    print(f"# fused chain gelu(1.7t+0.3)*sigmoid(t)-0.5t, {n:,} float32, {args.threads} threads")
    print(f"- jit: {nx.info()['jit_compiler']}; flags {nx.info()['jit_flags']}")
    print_run_notes(notes)

    rng = np.random.default_rng(0)
    x_np = rng.standard_normal(n, dtype=np.float32) * 3
    x = nx.from_numpy(x_np)
    f = nx.jit(chain_nx)
    ref = chain_ref(x_np)
    rows = [("nx.jit", lambda: f(x))]
    check("nx.jit", f(x), ref, rtol=2e-5, atol=2e-6)
    check("numpy", chain_np(x_np), ref, rtol=2e-5, atol=2e-6)
    rows.append(("numpy", lambda: chain_np(x_np)))
    if torch is not None:
        xt = torch.from_numpy(x_np)
        check("torch eager", chain_torch(xt).numpy(), ref, rtol=2e-5, atol=2e-6)
        rows.append(("torch eager", lambda: chain_torch(xt)))
        if not args.no_torch_compile:
            try:
                tc = torch.compile(chain_torch)
                check("torch.compile", tc(xt).numpy(), ref, rtol=2e-5, atol=2e-6)
                rows.append(("torch.compile", lambda: tc(xt)))
            except Exception as e:  # noqa: BLE001 - report why and go on
                print(f"- torch.compile unavailable here: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
    dst = nx.zeros(n)
    rows.append(("STREAM copy (nexus, same threads)", lambda: nx._C.copy_(dst, x)))

    stats = bench_interleaved([fn for _, fn in rows], warmup=2, rounds=5, min_time=3.0)
    t = {name: s["median"] for (name, _), s in zip(rows, stats)}
    copy_bw = 8 * n / t["STREAM copy (nexus, same threads)"]
    out = []
    for (name, _), s in zip(rows, stats):
        bw = 8 * n / s["median"]
        ratio = "" if name.startswith("STREAM") else f"{s['median'] / t['nx.jit']:.2f}x"
        out.append([name, fmt_ms(s["median"]), ratio, f"{bw / 1e9:.1f}", f"{bw / copy_bw:.0%}"])
    table(out, ["variant", "median ms", "time / nx.jit", "eff. GB/s (8 B/elem)", "of STREAM copy"])

    grad_n = 1 << 20
    print(f"\n# loss + backward, mean((tanh(x*w + 0.5) - y)^2) over {grad_n:,} float32 (x and w require grad)")
    grads, grad_ratio = gradient_rows(grad_n)
    table(grads, ["variant", "median ms", "time / nx.jit"])

    cold, cold_n, warm_n, later = compile_times()
    print(f"\ncold compile of the graph's kernels: {cold:.2f} s ({cold_n} kernel, in an empty cache); warm cache: "
          f"{warm_n} compiles; a new kernel in that cache: {later:.2f} s")
    print("\nbars:")
    for label, key, bar in BARS:
        if key in t:
            r = t[key] / t["nx.jit"]
            print(f"- {label}: {r:.2f}x {'PASS' if r >= bar else 'MISS'}")
    print(f"- nx.jit loss+backward >= 3x eager Nexus autograd: {grad_ratio:.2f}x "
          f"{'PASS' if grad_ratio >= 3.0 else 'MISS'}")
    print(f"- cold compile <= 1 s: {cold:.2f} s {'PASS' if cold <= 1.0 else 'MISS'}")
    print(f"- warm cache 0 compiles: {warm_n} {'PASS' if warm_n == 0 else 'MISS'}")


if __name__ == "__main__":
    main()
