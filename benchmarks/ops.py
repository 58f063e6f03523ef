"""Core CPU ops, Nexus side by side with numpy (and torch for conv2d when it is importable).

    python benchmarks/ops.py [--threads 2] [--quick]

Every row first checks Nexus's result against the numpy reference, then times both (warm-up,
then many iterations, median). ratio = numpy time / nexus time, so > 1 means Nexus is faster.
The metric column is GFLOP/s for matmul/conv and effective GB/s (bytes read + written once) for
the memory-bound ops. The issue's bars are printed under the table with PASS/MISS.

With torch importable, a second table sweeps conv2d shapes (kernel 1..7, stride 1..2, padding
0..3, channels 1..256, inputs from 1xN to 64x64, batch 1..128, grouped and depthwise): forward + backward (dx, dw and
dbias) and forward alone, Nexus vs PyTorch eager, results and gradients checked against torch
first; ratio = torch time / Nexus time, with their geometric mean (`--no-conv-sweep` skips it).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
from dataclasses import dataclass
from typing import Callable, NamedTuple

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_interleaved, check, fmt_ms, print_run_notes, table, threads  # noqa: E402

import nexus as nx  # noqa: E402

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    torch = None

# The bars: (label, row key, minimum numpy/nexus ratio). Defined at full sizes, 2 threads.
BARS = [("matmul 1024 >= 0.9x numpy", "matmul_bar", 0.9),
        ("add >= 1.0x numpy at 16M fp32", "add", 1.0),
        ("sum >= 1.0x numpy at 16M fp32", "sum", 1.0)]
BAR_THREADS = 2


@dataclass
class Case:
    key: str                          # names the row for the bars
    op: str
    shape: str
    ref: Callable                     # numpy reference (the peer that is timed)
    ours: Callable                    # nexus
    rtol: float
    atol: float
    work: float                       # FLOPs or bytes per call
    unit: str                         # "GFLOP/s" or "GB/s"
    peer: Callable | None = None      # optional torch column


def conv2d_im2col(x, w, b):
    """numpy reference for conv2d (stride 1, no padding): im2col + one matmul."""
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    cols = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(2, 3))  # N,C,OH,OW,KH,KW
    oh, ow = cols.shape[2], cols.shape[3]
    cols = cols.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)  # the im2col copy
    out = cols @ w.reshape(k, -1).T + b
    return out.reshape(n, oh, ow, k).transpose(0, 3, 1, 2)


def conv2d_loops(x, w, b):
    """The definition, as plain loops over output positions; checks the im2col reference."""
    n, c, h, wd = x.shape
    k, _, kh, kw = w.shape
    out = np.empty((n, k, h - kh + 1, wd - kw + 1), dtype=np.float64)
    for i in range(out.shape[2]):
        for j in range(out.shape[3]):
            patch = x[:, :, i:i + kh, j:j + kw].astype(np.float64)
            out[:, :, i, j] = np.einsum("nchw,kchw->nk", patch, w.astype(np.float64)) + b
    return out


def make_cases(quick, rng):
    def randn(*shape):
        return rng.standard_normal(shape, dtype=np.float32)

    cases = []
    mm_sizes = (128, 256, 512) if quick else (256, 1024, 2048)
    for i, n in enumerate(mm_sizes):
        a, b = randn(n, n), randn(n, n)
        ta, tb = nx.from_numpy(a), nx.from_numpy(b)
        cases.append(Case("matmul_bar" if i == 1 else f"matmul{n}", "matmul fp32", f"{n}x{n}x{n}",
                          lambda a=a, b=b: a @ b, lambda ta=ta, tb=tb: nx.matmul(ta, tb),
                          1e-4, 1e-5 * n, 2.0 * n ** 3, "GFLOP/s"))

    m = 1024 if quick else 4096
    x, bias = randn(m, m), randn(m)
    tx, tbias = nx.from_numpy(x), nx.from_numpy(bias)
    cases.append(Case("add", "broadcast add fp32", f"({m},{m}) + ({m},)",
                      lambda: x + bias, lambda: tx + tbias,
                      0.0, 0.0, 4.0 * (2 * m * m + m), "GB/s"))

    n = 1 << (20 if quick else 24)
    v = randn(n)
    tv = nx.from_numpy(v)
    cases.append(Case("exp", "exp fp32", f"{n >> 20}M", lambda: np.exp(v), lambda: nx.exp(tv),
                      1e-5, 0.0, 8.0 * n, "GB/s"))
    u = rng.random(n, dtype=np.float32)  # all positive: a relative check means something
    tu = nx.from_numpy(u)
    cases.append(Case("sum", "sum fp32", f"{n >> 20}M", lambda: np.sum(u), lambda: nx.sum(tu),
                      1e-5, 0.0, 4.0 * n, "GB/s"))

    xc, wc, bc = randn(16 if quick else 64, 6, 14, 14), randn(16, 6, 5, 5), randn(16)
    txc, twc, tbc = nx.from_numpy(xc), nx.from_numpy(wc), nx.from_numpy(bc)
    oh = ow = 14 - 5 + 1
    peer = None
    if torch is not None:
        pxc, pwc, pbc = torch.from_numpy(xc), torch.from_numpy(wc), torch.from_numpy(bc)
        peer = lambda: F.conv2d(pxc, pwc, pbc)  # noqa: E731
    cases.append(Case("conv", "conv2d fp32 (LeNet conv2)", f"x{xc.shape} w{wc.shape}",
                      lambda: conv2d_im2col(xc, wc, bc), lambda: nx.conv2d(txc, twc, tbc),
                      1e-4, 1e-4, 2.0 * xc.shape[0] * 16 * 6 * 5 * 5 * oh * ow, "GFLOP/s", peer))
    return cases


class ConvCase(NamedTuple):
    """One conv2d sweep row: input (n, c, h, w), k output channels, kernel/stride/padding (an int or a
    pair), what the shape stands for, and the channel groups (c: depthwise)."""
    n: int
    c: int
    h: int
    w: int
    k: int
    kernel: int | tuple
    stride: int | tuple
    padding: int | tuple
    what: str
    groups: int = 1


CONV_SWEEP = [
    ConvCase(100, 1, 1, 40, 25, (1, 5), (1, 2), (0, 2), "1xN signal, 5-tap, stride 2"),
    ConvCase(100, 25, 1, 20, 25, (1, 3), (1, 2), (0, 1), "1xN signal, 3-tap, stride 2"),
    ConvCase(64, 1, 28, 28, 6, 5, 1, 2, "LeNet conv1"),
    ConvCase(64, 6, 14, 14, 16, 5, 1, 0, "LeNet conv2"),
    ConvCase(32, 3, 32, 32, 16, 3, 1, 1, "ResNet stem"),
    ConvCase(32, 16, 32, 32, 16, 3, 1, 1, "ResNet 16->16"),
    ConvCase(1, 16, 32, 32, 16, 3, 1, 1, "ResNet 16->16, batch 1"),
    ConvCase(32, 16, 32, 32, 32, 3, 2, 1, "ResNet downsample 3x3"),
    ConvCase(32, 16, 32, 32, 32, 1, 2, 0, "ResNet downsample 1x1"),
    ConvCase(32, 32, 16, 16, 32, 3, 1, 1, "ResNet 32->32"),
    ConvCase(32, 64, 8, 8, 64, 3, 1, 1, "ResNet 64->64"),
    ConvCase(128, 32, 8, 8, 64, 3, 1, 1, "batch 128"),
    ConvCase(8, 3, 64, 64, 32, 7, 2, 3, "7x7 stem, stride 2, padding 3"),
    ConvCase(8, 64, 56, 56, 64, 3, 1, 1, "ResNet-18 stage 1"),
    ConvCase(8, 128, 28, 28, 128, 3, 1, 1, "ResNet-18 stage 2"),
    ConvCase(8, 256, 14, 14, 256, 3, 1, 1, "ResNet-18 stage 3"),
    ConvCase(8, 64, 28, 28, 256, 1, 1, 0, "pointwise 64->256"),
    ConvCase(8, 256, 14, 14, 64, 1, 1, 0, "pointwise 256->64"),
    ConvCase(16, 32, 24, 24, 48, (2, 4), (2, 1), (1, 2), "non-square kernel, mixed stride"),
    ConvCase(8, 32, 56, 56, 32, 3, 1, 1, "depthwise 3x3 (MobileNet)", groups=32),
    ConvCase(8, 64, 56, 56, 64, 3, 2, 1, "depthwise 3x3, stride 2", groups=64),
    ConvCase(8, 256, 14, 14, 256, 3, 1, 1, "depthwise 3x3, 256 channels", groups=256),
    ConvCase(8, 96, 28, 28, 96, 5, 1, 2, "depthwise 5x5 (EfficientNet)", groups=96),
    ConvCase(1, 128, 28, 28, 128, 3, 1, 1, "depthwise 3x3, batch 1", groups=128),
    ConvCase(16, 16, 32, 32, 32, 3, 1, 1, "depthwise, channel multiplier 2", groups=16),
    ConvCase(8, 128, 28, 28, 128, 3, 1, 1, "grouped 3x3, 32 groups (ResNeXt)", groups=32),
    ConvCase(8, 64, 28, 28, 128, 3, 1, 1, "grouped 3x3, 2 groups", groups=2),
]



def conv_row(spec: ConvCase, quick: bool, timing: dict, rng) -> tuple[list, float, float]:
    """One sweep row: (table row, forward + backward ratio, forward ratio), torch time / Nexus time."""
    n, c, h, w, k, kernel, stride, pad, what, groups = spec
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    n = min(n, 8) if quick else n
    cg = c // groups
    x = rng.standard_normal((n, c, h, w), dtype=np.float32)
    wt = rng.standard_normal((k, cg, kh, kw), dtype=np.float32) / np.float32(np.sqrt(cg * kh * kw))
    b = rng.standard_normal(k, dtype=np.float32)
    tx, tw, tb = (torch.from_numpy(a).requires_grad_() for a in (x, wt, b))
    nx_x, nx_w, nx_b = (nx.tensor(a, requires_grad=True) for a in (x, wt, b))
    dy = rng.standard_normal(tuple(F.conv2d(tx, tw, tb, stride, pad, 1, groups).shape), dtype=np.float32)
    t_dy, nx_dy = torch.from_numpy(dy), nx.tensor(dy)

    def torch_step():
        tx.grad = tw.grad = tb.grad = None
        F.conv2d(tx, tw, tb, stride, pad, 1, groups).backward(t_dy)

    def nexus_step():
        nx_x.grad = nx_w.grad = nx_b.grad = None
        nx.conv2d(nx_x, nx_w, nx_b, stride=stride, padding=pad, groups=groups).backward(nx_dy)

    torch_step()
    nexus_step()
    name = f"conv2d {what}"
    check(f"{name} y", nx.conv2d(nx_x, nx_w, nx_b, stride=stride, padding=pad, groups=groups).numpy(),
          F.conv2d(tx, tw, tb, stride, pad, 1, groups).detach().numpy(), 1e-4, 1e-4)
    for label, ours, peer in (("dx", nx_x, tx), ("dw", nx_w, tw), ("dbias", nx_b, tb)):
        ref = peer.grad.numpy()  # sums of up to batch*pixels float32 products: tolerance by their scale
        check(f"{name} {label}", ours.grad.numpy(), ref, 1e-3, 1e-5 * float(np.abs(ref).max()) + 1e-4)
    x_in, w_in, b_in = nx_x.detach(), nx_w.detach(), nx_b.detach()
    px, pw, pb = tx.detach(), tw.detach(), tb.detach()
    t_t, t_n, f_t, f_n = [r["median"] for r in bench_interleaved(
        [torch_step, nexus_step, lambda: F.conv2d(px, pw, pb, stride, pad, 1, groups),
         lambda: nx.conv2d(x_in, w_in, b_in, stride=stride, padding=pad, groups=groups)], **timing)]
    row = [what, f"{n}x{c}x{h}x{w}", f"{k}x{cg}x{kh}x{kw}", str(stride), str(pad), str(groups), fmt_ms(t_t),
           fmt_ms(t_n), f"{t_t / t_n:.2f}x", fmt_ms(f_t), fmt_ms(f_n), f"{f_t / f_n:.2f}x"]
    return row, t_t / t_n, f_t / f_n


def conv_sweep(quick: bool) -> None:
    """Forward + backward and forward-only conv2d, Nexus vs torch eager, one row per shape."""
    timing = dict(warmup=2, min_time=0.1) if quick else dict(warmup=3, min_time=0.5)
    rng = np.random.default_rng(1)
    rows, both, fwd = [], [], []
    for spec in CONV_SWEEP:
        row, ratio, fwd_ratio = conv_row(spec, quick, timing, rng)
        rows.append(row)
        both.append(ratio)
        fwd.append(fwd_ratio)
    print("\n## conv2d sweep: forward + backward and forward alone, torch eager vs Nexus (float32)\n")
    table(rows, ["shape", "input", "weight", "stride", "padding", "groups", "torch ms", "nexus ms", "ratio",
                 "fwd torch ms", "fwd nexus ms", "fwd ratio"])
    geo = lambda r: float(np.exp(np.mean(np.log(r))))  # noqa: E731
    print(f"\nGeometric mean (torch / nexus): forward + backward {geo(both):.2f}x, forward {geo(fwd):.2f}x; "
          f"rows below 1.0x: {sum(r < 1.0 for r in both)} of {len(both)} (forward + backward).")


def header(args, thread_notes):
    info = nx.info()
    print(f"# benchmarks/ops.py{' --quick' if args.quick else ''} --threads {args.threads}\n")
    print(f"- nexus {info.get('version')} ({info.get('build_type')}), blas={info.get('blas')} "
          f"({info.get('blas_core')} kernels), simd={info.get('simd')}, compiler={info.get('compiler')}")
    print(f"- numpy {np.__version__}, torch {torch.__version__ if torch else 'not importable'}, "
          f"python {platform.python_version()}, {os.cpu_count()} CPUs ({platform.machine()}), "
          f"load average {os.getloadavg()[0]:.2f} (a busy machine makes every ratio noisy)")
    print_run_notes(thread_notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=BAR_THREADS,
                        help=f"nexus and numpy BLAS threads (default {BAR_THREADS}, as the bars)")
    parser.add_argument("--quick", action="store_true",
                        help="small sizes, short timing (smoke test, ~10 s)")
    parser.add_argument("--no-conv-sweep", action="store_true", help="skip the conv2d sweep against torch")
    args = parser.parse_args(argv)

    header(args, threads(args.threads))
    rng = np.random.default_rng(0)
    tiny = [rng.standard_normal(s, dtype=np.float32) for s in ((2, 3, 7, 6), (4, 3, 3, 2), (4,))]
    check("conv2d im2col reference vs loops", conv2d_im2col(*tiny), conv2d_loops(*tiny), 1e-5, 1e-5)

    timing = dict(warmup=3, min_time=0.25) if args.quick else dict(warmup=3, min_time=0.5)
    headers = ["op", "shape", "numpy ms", "nexus ms", "ratio", "metric (nexus / numpy)"]
    if torch is not None:
        headers.append("torch ms")
    rows, ratios, shapes = [], {}, {}
    for c in make_cases(args.quick, rng):
        ref = c.ref()
        check(f"{c.op} {c.shape}", c.ours(), ref, c.rtol, c.atol)
        fns = [c.ref, c.ours] + ([c.peer] if torch is not None and c.peer is not None else [])
        if len(fns) == 3:
            check(f"torch {c.op} {c.shape}", c.peer().numpy(), ref, c.rtol, c.atol)
        t_np, t_nx, *t_peer = [r["median"] for r in bench_interleaved(fns, **timing)]
        ratios[c.key], shapes[c.key] = t_np / t_nx, c.shape
        row = [c.op, c.shape, fmt_ms(t_np), fmt_ms(t_nx), f"{t_np / t_nx:.2f}x",
               f"{c.work * 1e-9 / t_nx:.1f} / {c.work * 1e-9 / t_np:.1f} {c.unit}"]
        if torch is not None:
            row.append(fmt_ms(t_peer[0]) if t_peer else "-")
        rows.append(row)
    table(rows, headers)
    print(f"\nms: median of numpy/nexus samples taken alternately ({timing['min_time']} s per "
          f"side per row, after {timing['warmup']} warm-up calls).")

    comparable = not args.quick and args.threads == BAR_THREADS
    print(f"\nBars (issue, at full sizes and {BAR_THREADS} threads)"
          + ("" if comparable else " -- INDICATIVE ONLY: this run used "
             + ("--quick sizes" if args.quick else f"{args.threads} threads")
             + "; run `python benchmarks/ops.py` for the real check") + ":")
    for label, key, bar in BARS:
        verdict = "PASS" if ratios[key] >= bar else "MISS"
        print(f"- {label}: {ratios[key]:.2f}x at {shapes[key]}  {verdict}")
    if torch is not None and not args.no_conv_sweep:
        conv_sweep(args.quick)
    return 0


if __name__ == "__main__":
    sys.exit(main())
