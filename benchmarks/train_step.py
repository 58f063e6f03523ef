"""One training step, Nexus's compiled model side by side with PyTorch eager.

    python benchmarks/train_step.py [--threads 2] [--quick]

Both frameworks get the same model, the same batches, the same optimizer settings and the same
thread count. For every case the program first copies Nexus's initial parameters into the torch
model, runs 3 steps on the same fixed batches in both and checks that the losses and the updated
parameters agree; a case that disagrees stops the program (exit status 1) before anything is
timed. Then it times each framework in a process of its own (so one's spinning worker threads
never take a core from the other), taking slices from the two processes alternately (so load
on the machine hits both alike), and prints the medians. speed-up = torch ms / nexus ms, so > 1 means Nexus is
faster. Peak RSS is measured in a fresh child process per framework and case
(`--rss-child CASE FRAMEWORK`), so one framework's memory never shows in the other's number.

The torch model is the equivalent nn.Sequential ending in logits, trained with
F.cross_entropy: Nexus fuses its softmax head with the cross-entropy loss the same way.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import check, fmt_ms, print_run_notes, stats, table, threads  # noqa: E402

BAR_THREADS = 2
CHECK_STEPS = 3
POOL = 8            # distinct fixed batches the timed steps cycle through
RSS_STEPS = 5       # steps a --rss-child runs before reading its peak RSS
CHECK_RTOL, CHECK_ATOL = 1e-3, 1e-5  # parameters after CHECK_STEPS steps, nexus vs torch
REFEREE = 10        # see check_param

MLP_SMALL = (("dense", 256, "relu"), ("dense", 10, "softmax"))
MLP_LARGE = (("dense", 1024, "relu"), ("dense", 1024, "relu"), ("dense", 10, "softmax"))
LENET = (("conv2d", 6, 5, 2, "relu"), ("max_pool2d", 2), ("conv2d", 16, 5, 0, "relu"),
         ("max_pool2d", 2), ("flatten",), ("dense", 120, "relu"), ("dense", 84, "relu"),
         ("dense", 10, "softmax"))
# A ResNet-style CNN for 32x32x3 images: a 3x3 stem, then 3 stages of 2 basic blocks (conv - batch
# norm - relu - conv - batch norm, plus the input (through a strided 1x1 conv and batch norm when
# the block downsamples), then relu), global average pooling and a dense head. Convolutions have
# no bias: the batch norm's shift replaces it.
RESNET = (("conv_bn", 16, 1), ("block", 16, 1), ("block", 16, 1), ("block", 32, 2), ("block", 32, 1),
          ("block", 64, 2), ("block", 64, 1), ("avg_pool2d", 8), ("flatten",), ("dense", 10, "softmax"))


@dataclass(frozen=True)
class Case:
    model: str
    optimizer: str        # "sgd" (lr 0.01, momentum 0.9) or "adam" (lr 1e-3)
    batch: int
    features: tuple       # one sample's shape
    layers: tuple
    bar: float            # the minimum torch/nexus ratio
    compile_bar: float | None = None  # the minimum torch.compile/nexus ratio (also timed when set)

    @property
    def optimizer_label(self):
        return "SGD lr=0.01 momentum=0.9" if self.optimizer == "sgd" else "Adam lr=1e-3"


CASES = {
    "mlp-sgd": Case("MLP 784-256-10", "sgd", 128, (784,), MLP_SMALL, 1.5),
    "mlp-adam": Case("MLP 784-256-10", "adam", 128, (784,), MLP_SMALL, 1.0),
    "mlp-large-adam": Case("MLP 784-1024-1024-10", "adam", 256, (784,), MLP_LARGE, 1.0),
    "lenet-adam": Case("LeNet CNN (1x28x28)", "adam", 64, (1, 28, 28), LENET, 1.0),
    "resnet-sgd": Case("ResNet-style CNN (3x32x32)", "sgd", 64, (3, 32, 32), RESNET, 1.2, 1.0),
}
QUICK_CASES = ("mlp-sgd", "lenet-adam")
FUSION_BARS = {"resnet-sgd": (0.6, 1.2)}  # case: (max step bytes fused / unfused, min time off / on)


def batches(case):
    """POOL fixed batches (x float32, y int64), the same in every process (default_rng(0))."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((POOL, case.batch, *case.features), dtype=np.float32)
    y = rng.integers(0, 10, size=(POOL, case.batch), dtype=np.int64)
    return x, y


def layer_names(case):
    """(nexus layer name, kind, config) per layer: GraphBuilder's automatic kind_N names; a
    ResNet stem or block ("conv_bn", "block") names its own layers from its name."""
    counts, out = {}, []
    for kind, *cfg in case.layers:
        counts[kind] = counts.get(kind, 0) + 1
        out.append((f"{kind}_{counts[kind]}", kind, cfg))
    return out


def resnet_layers(name, kind, cfg, channels):
    """The (layer name, kind, args) a stem or block is made of; kind is "conv" (filters, kernel,
    stride, padding), "bn", "relu", "tap", "add" or "use". Both frameworks build from this list."""
    filters, stride = cfg
    if kind == "conv_bn":
        return [(f"{name}_conv", "conv", (filters, 3, stride, 1)), (f"{name}_bn", "bn", ()),
                (f"{name}_relu", "relu", ())]
    out = [(f"{name}_in", "tap", ()),
           (f"{name}_conv1", "conv", (filters, 3, stride, 1)), (f"{name}_bn1", "bn", ()),
           (f"{name}_relu1", "relu", ()),
           (f"{name}_conv2", "conv", (filters, 3, 1, 1)), (f"{name}_bn2", "bn", ())]
    if stride != 1 or filters != channels:  # the shortcut projects: a strided 1x1 conv + batch norm
        out += [(f"{name}_main", "tap", ()), (f"{name}_in", "use", ()),
                (f"{name}_down", "conv", (filters, 1, stride, 0)), (f"{name}_down_bn", "bn", ()),
                (f"{name}_main", "add", ())]
    else:
        out.append((f"{name}_in", "add", ()))
    return out + [(f"{name}_relu2", "relu", ())]


def build_nexus(case, fusion=True):
    import nexus as nx

    g = nx.GraphBuilder(seed=0)
    name = "image" if len(case.features) == 3 else "features"
    g.input(name, nx.Shape(case.batch, *case.features))
    refs, channels = {}, case.features[0]
    for name, kind, cfg in layer_names(case):
        if kind in ("conv_bn", "block"):
            for lname, lkind, args in resnet_layers(name, kind, cfg, channels):
                if lkind == "conv":
                    g.conv2d(args[0], args[1], stride=args[2], padding=args[3], use_bias=False, name=lname)
                elif lkind == "bn":
                    g.batch_norm(name=lname)
                elif lkind == "relu":
                    g.activation("relu", name=lname)
                elif lkind == "tap":
                    refs[lname] = g.tap()
                elif lkind == "use":
                    g.use(refs[lname])
                else:
                    g.add(refs[lname], name=f"{name}_add")
            channels = cfg[0]
        elif kind == "avg_pool2d":
            g.avg_pool2d(cfg[0])
        elif kind == "dense":
            g.dense(cfg[0], cfg[1])
        elif kind == "conv2d":
            g.conv2d(cfg[0], cfg[1], padding=cfg[2] or "valid", activation=cfg[3])
        elif kind == "max_pool2d":
            g.max_pool2d(cfg[0])
        else:
            g.flatten()
    opt = (nx.optim.SGD(lr=0.01, momentum=0.9) if case.optimizer == "sgd"
           else nx.optim.Adam(lr=1e-3))
    return g.compile(loss="cross_entropy", optimizer=opt, fusion=fusion)


def build_torch(case, dtype=None):
    """(nn.Sequential ending in logits, optimizer, [(nexus layer name, kind, module)])."""
    import torch
    from torch import nn

    mods, with_params, shape = [], [], case.features
    for name, kind, cfg in layer_names(case):
        if kind in ("conv_bn", "block"):
            block = torch_block(name, kind, cfg, shape[0], with_params)
            m, shape = block, (cfg[0], shape[1] // cfg[1], shape[2] // cfg[1])
        elif kind == "avg_pool2d":
            m, shape = nn.AvgPool2d(cfg[0]), (shape[0], shape[1] // cfg[0], shape[2] // cfg[0])
        elif kind == "dense":
            m, shape = nn.Linear(shape[0], cfg[0]), (cfg[0],)
        elif kind == "conv2d":
            (c, h, w), (k, ks, pad) = shape, cfg[:3]
            m = nn.Conv2d(c, k, ks, padding=pad)
            shape = (k, h + 2 * pad - ks + 1, w + 2 * pad - ks + 1)
        elif kind == "max_pool2d":
            m, shape = nn.MaxPool2d(cfg[0]), (shape[0], shape[1] // cfg[0], shape[2] // cfg[0])
        else:
            m, shape = nn.Flatten(), (int(np.prod(shape)),)
        mods.append(m)
        if kind in ("dense", "conv2d"):
            with_params.append((name, kind, m))
            if cfg[-1] == "relu":
                mods.append(nn.ReLU())
            # "softmax" is left out: F.cross_entropy takes the logits
    model = nn.Sequential(*mods).to(dtype or torch.float32)
    opt = (torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9) if case.optimizer == "sgd"
           else torch.optim.Adam(model.parameters(), lr=1e-3))
    return model, opt, with_params


def torch_block(name, kind, cfg, channels, with_params):
    """A stem or block of resnet_layers as a torch module; appends its (nexus name, kind,
    module) entries for the conv and batch norm layers to with_params."""
    from torch import nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.steps, c = [], channels
            for lname, lkind, args in resnet_layers(name, kind, cfg, channels):
                m = None
                if lkind == "conv":
                    m = nn.Conv2d(c, args[0], args[1], stride=args[2], padding=args[3], bias=False)
                    c = args[0]
                    with_params.append((lname, "conv2d", m))
                elif lkind == "bn":
                    m = nn.BatchNorm2d(c)
                    with_params.append((lname, "batch_norm", m))
                elif lkind == "use":  # the shortcut starts from the block's input
                    c = channels
                if m is not None:
                    self.add_module(lname, m)
                self.steps.append((lname, lkind, m))

        def forward(self, x):
            refs = {}
            for lname, lkind, m in self.steps:
                if m is not None:
                    x = m(x)
                elif lkind == "relu":
                    x = nn.functional.relu(x)
                elif lkind == "tap":
                    refs[lname] = x
                elif lkind == "use":
                    x = refs[lname]
                else:
                    x = x + refs[lname]
            return x

    return Block()


def torch_step_fn(model, opt):
    import torch.nn.functional as F

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.item()  # Nexus's train_step returns the loss as a float too
    return step


def cycling(step, xs, ys):
    """step() on batch 0, 1, ..., POOL-1, 0, ...: a fresh batch per call, no data prep timed."""
    state = {"i": 0}

    def fn():
        i = state["i"] = (state["i"] + 1) % len(xs)
        return step(xs[i], ys[i])
    return fn


def torch_like_nexus(case, params, dtype=None):
    """build_torch with Nexus's initial parameters copied in (Linear weight is (out, in))."""
    import torch

    model, opt, with_params = build_torch(case, dtype)
    with torch.no_grad():
        for name, kind, m in with_params:
            w = params[f"{name}.weight"].numpy()
            m.weight.copy_(torch.from_numpy(np.ascontiguousarray(w.T if kind == "dense" else w)))
            if m.bias is not None:
                m.bias.copy_(torch.from_numpy(np.array(params[f"{name}.bias"].numpy())))
    return model, opt, with_params


def torch_params(with_params):
    """name -> numpy array in Nexus's layout (dense weight (in, out))."""
    out = {}
    for name, kind, m in with_params:
        w = m.weight.detach().numpy()
        out[f"{name}.weight"] = w.T if kind == "dense" else w
        if m.bias is not None:
            out[f"{name}.bias"] = m.bias.detach().numpy()
    return out


def check_param(name, ours, ref32, ref64):
    """check() at rtol 1e-3, atol 1e-5 against torch float32, except for ill-conditioned elements.

    Adam's first update is lr * g / (|g| + eps): for a gradient near eps (1e-8) it swings with
    the last bits of g, so two correct float32 implementations can land 1e-5 apart (seen: 1 of
    1M weights of the 1024-wide MLP). An element outside the tolerance is accepted when Nexus is
    within REFEREE times torch's own float32 error of the float64 result; a real bug is far
    outside that (torch's float32 error on well-conditioned elements is ~1e-7 relative).
    Returns how many elements were accepted that way.
    """
    a, b, c = (np.asarray(v, dtype=np.float64) for v in (ours.numpy(), ref32, ref64))
    bad = ~np.isclose(a, b, rtol=CHECK_RTOL, atol=CHECK_ATOL)
    refereed = bad & (np.abs(a - c) <= REFEREE * np.abs(b - c) + CHECK_ATOL)
    check(name, np.where(refereed, b, a), b, rtol=CHECK_RTOL, atol=CHECK_ATOL)  # the rest
    return int(refereed.sum())


def run_case(key, case, timing):
    """Check the case, then time it; returns the (torch, nexus, torch.compile or None) stats and
    the number of ill-conditioned parameter elements the float64 referee accepted."""
    import torch

    xs, ys = batches(case)
    txs, tys = torch.from_numpy(xs), torch.from_numpy(ys)
    ours = build_nexus(case)
    model, opt, with_params = torch_like_nexus(case, ours.params)
    torch_step = torch_step_fn(model, opt)
    model64, opt64, with_params64 = torch_like_nexus(case, ours.params, torch.float64)
    step64 = torch_step_fn(model64, opt64)

    nx_losses = [ours.train_step(xs[i], ys[i]) for i in range(CHECK_STEPS)]
    torch_losses = [torch_step(txs[i], tys[i]) for i in range(CHECK_STEPS)]
    for i in range(CHECK_STEPS):
        step64(txs[i].double(), tys[i])
    label = f"{key} ({case.model}, {case.optimizer_label})"
    check(f"{label}: loss of steps 1..{CHECK_STEPS}", np.array(nx_losses), np.array(torch_losses),
          rtol=1e-4, atol=1e-6)
    ref32, ref64 = torch_params(with_params), torch_params(with_params64)
    refereed = sum(check_param(f"{label}: {name} after {CHECK_STEPS} steps", t, ref32[name],
                               ref64[name]) for name, t in ours.params.items())

    frameworks = ("torch", "nexus", "torch-compile") if case.compile_bar else ("torch", "nexus")
    timed = time_in_children(key, timing, frameworks)
    return timed[0], timed[1], timed[2] if case.compile_bar else None, refereed


# ---- timing, one long-lived child process per framework -----------------------------------------
# Each framework is timed in a process of its own, as a user runs it: in one process, torch's
# OpenMP workers keep spinning after each of its steps and take a core from the next Nexus step
# (measured: the small MLP's Nexus step went from 0.96 ms alone to 1.4-1.6 ms right after torch
# steps). The parent still alternates slices between the two children, so load on the machine
# hits both alike, and waits GAP between slices so neither side's spinning threads overlap the
# other's slice.
GAP = 0.05


def time_child(key, framework, n_threads):
    """A timing worker: builds the case, then for each 'SECONDS' line on stdin runs steps for
    that long (cycling over the fixed batches) and prints their times as one JSON line."""
    case = CASES[key]
    xs, ys = batches(case)
    if framework in ("nexus", "nexus-unfused"):
        import nexus as nx

        nx.set_num_threads(n_threads)
        step = cycling(build_nexus(case, fusion=framework == "nexus").train_step, xs, ys)
    else:
        import torch

        torch.set_num_threads(n_threads)
        model, opt, _ = build_torch(case)
        if framework == "torch-compile":  # inductor's kernels; compiled by the first step, untimed
            model = torch.compile(model)
        step = cycling(torch_step_fn(model, opt), torch.from_numpy(xs), torch.from_numpy(ys))
        step()
    print("ready", flush=True)
    for line in sys.stdin:
        seconds, times = float(line), []
        end = time.perf_counter() + seconds
        while not times or time.perf_counter() < end:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
        print(json.dumps(times), flush=True)


def time_in_children(key, timing, frameworks=("torch", "nexus")):
    """Stats (median, p10, p90, n) per framework, from one child process each."""
    children = []
    for framework in frameworks:
        cmd = [sys.executable, os.path.abspath(__file__), "--time-child", key, framework,
               "--threads", str(timing["threads"])]
        child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        if child.stdout.readline().strip() != "ready":
            raise SystemExit(f"timing child for {key} {framework} failed (exit {child.wait()})")
        children.append(child)

    def ask(child, seconds):
        child.stdin.write(f"{seconds}\n")
        child.stdin.flush()
        return json.loads(child.stdout.readline())

    try:
        for child in children:  # warm-up
            ask(child, 0.2)
        times = [[] for _ in children]
        for _ in range(timing["rounds"]):
            for child, t in zip(children, times):
                time.sleep(GAP)
                t += ask(child, timing["min_time"] / timing["rounds"])
    finally:
        for child in children:
            child.stdin.close()
            child.wait(timeout=60)
    return [stats(t) for t in times]


# ---- peak RSS, one child process per framework and case -----------------------------------------
def rss_child(key, framework, n_threads):
    """Runs in a fresh process: builds one framework's model, takes RSS_STEPS steps, prints JSON."""
    case = CASES[key]
    if framework == "nexus":
        import nexus as nx

        nx.set_num_threads(n_threads)
    else:
        import torch

        torch.set_num_threads(n_threads)
    xs, ys = batches(case)
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    if framework == "nexus":
        ours = build_nexus(case)
        step = ours.train_step
    else:
        model, opt, _ = build_torch(case)
        step, xs, ys = torch_step_fn(model, opt), torch.from_numpy(xs), torch.from_numpy(ys)
    for i in range(RSS_STEPS):
        step(xs[i % POOL], ys[i % POOL])
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"base_kib": base, "peak_kib": peak}))


def measure_rss(key, framework, n_threads):
    """(peak MiB, MiB above the peak after imports and data) from a child process, or None.

    Call it while this process is still small (before torch or nexus is imported): Linux carries
    the parent's RSS high-water mark into the child's ru_maxrss across fork + exec, so a child
    spawned from a 300 MiB parent reports at least 300 MiB whatever it does itself.
    """
    cmd = [sys.executable, os.path.abspath(__file__), "--rss-child", key, framework,
           "--threads", str(n_threads)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        print(f"- WARNING: RSS child for {key} {framework} failed (exit {r.returncode}): "
              f"{r.stderr.strip().splitlines()[-1:] or ''}")
        return None
    d = json.loads(r.stdout.strip().splitlines()[-1])
    return d["peak_kib"] / 1024, (d["peak_kib"] - d["base_kib"]) / 1024


def fmt_rss(r):
    return "-" if r is None else f"{r[0]:.0f} (+{r[1]:.0f})"


# ---- the program --------------------------------------------------------------------------------
def header(args, thread_notes):
    import nexus as nx
    import torch

    info = nx.info()
    load = os.getloadavg()[0]
    quick = " --quick" if args.quick else ""
    print(f"# benchmarks/train_step.py{quick} --threads {args.threads}\n")
    print(f"- nexus {info.get('version')} ({info.get('build_type')}), blas={info.get('blas')} "
          f"({info.get('blas_core')} kernels), simd={info.get('simd')}, compiler={info.get('compiler')}")
    print(f"- torch {torch.__version__} (eager; default optimizer implementation), numpy "
          f"{np.__version__}, python {platform.python_version()}, {os.cpu_count()} CPUs "
          f"({platform.machine()}), load average {load:.2f} "
          "(a busy machine makes every ratio noisy)")
    print_run_notes(thread_notes)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=BAR_THREADS,
                        help=f"nexus, torch and numpy BLAS threads (default {BAR_THREADS}, "
                        "as the bars)")
    parser.add_argument("--quick", action="store_true",
                        help="cases 1 and 4 only, 0.3 s per side (smoke test)")
    parser.add_argument("--cases", nargs="+", choices=tuple(CASES), metavar="CASE",
                        help=f"only these cases (of {', '.join(CASES)})")
    parser.add_argument("--rss-child", nargs=2, metavar=("CASE", "FRAMEWORK"),
                        help="internal: measure one framework's peak RSS on one case and exit")
    parser.add_argument("--time-child", nargs=2, metavar=("CASE", "FRAMEWORK"),
                        help="internal: a timing worker for one framework and case")
    args = parser.parse_args(argv)
    if args.time_child:
        time_child(*args.time_child, args.threads)
        return 0

    if args.rss_child:
        key, framework = args.rss_child
        if key not in CASES or framework not in ("nexus", "torch"):
            parser.error(f"--rss-child: CASE is one of {', '.join(CASES)}; "
                         "FRAMEWORK is nexus or torch")
        rss_child(key, framework, args.threads)
        return 0

    keys = tuple(args.cases) if args.cases else QUICK_CASES if args.quick else tuple(CASES)
    # First, while this process holds only numpy (see measure_rss): one child per framework/case.
    rss = {key: " / ".join(fmt_rss(measure_rss(key, fw, args.threads)) for fw in ("torch", "nexus"))
           for key in keys}

    import torch  # noqa: F401  (imported before threads() so it sets torch's threads too)

    header(args, threads(args.threads))
    timing = dict(rounds=6 if args.quick else 10, min_time=0.3 if args.quick else 2.0,
                  threads=args.threads)
    rows, ratios, compile_ratios, spread, refereed = [], {}, {}, [], {}
    for key in keys:
        case = CASES[key]
        r_torch, r_nx, r_compiled, refereed[key] = run_case(key, case, timing)
        t_torch, t_nx = r_torch["median"], r_nx["median"]
        ratios[key] = t_torch / t_nx
        if r_compiled:
            compile_ratios[key] = r_compiled["median"] / t_nx
        rows.append([case.model, case.optimizer_label, case.batch, fmt_ms(t_torch), fmt_ms(t_nx),
                     f"{t_torch / t_nx:.2f}x",
                     fmt_ms(r_compiled["median"]) if r_compiled else "-",
                     f"{compile_ratios[key]:.2f}x" if r_compiled else "-", rss[key]])
        spread.append(f"- {case.model}, {case.optimizer_label}: torch p10-p90 "
                      f"{fmt_ms(r_torch['p10'])}-{fmt_ms(r_torch['p90'])} ms (n={r_torch['n']}), "
                      f"nexus {fmt_ms(r_nx['p10'])}-{fmt_ms(r_nx['p90'])} ms (n={r_nx['n']})")
    print(f"check: every case's losses over {CHECK_STEPS} steps agree with torch (rtol 1e-4) and "
          f"its parameters after them (rtol {CHECK_RTOL:g}, atol {CHECK_ATOL:g})")
    for key, n in refereed.items():
        if n:
            print(f"  - {key}: {n} ill-conditioned parameter element(s) outside that tolerance "
                  f"accepted: nexus within {REFEREE}x torch's own float32 error of the float64 "
                  "result (Adam's first update for a gradient near eps)")
    print()
    table(rows, ["model", "optimizer", "batch", "torch ms", "nexus ms", "speed-up (torch/nexus)",
                 "torch.compile ms", "speed-up (compile/nexus)", "peak RSS MiB torch / nexus"])
    print(f"\nms: median per training step (forward, backward, optimizer update, loss as a float), "
          f"each framework in its own process, slices taken alternately ({timing['rounds']} per "
          f"side, {timing['min_time']} s per side per case, {GAP * 1000:.0f} ms apart) after 0.2 s "
          f"of warm-up, cycling over {POOL} fixed batches.")
    print(f"peak RSS: ru_maxrss of a fresh process per framework and case after {RSS_STEPS} steps; "
          "(+N) is the growth over the same process after its imports and data.")
    print("spread (a wide one means the machine was busy and the medians are shaky):")
    print("\n".join(spread))

    comparable = not args.quick and args.threads == BAR_THREADS
    print(f"\nBars (issue, at {BAR_THREADS} threads, full timing)"
          + ("" if comparable else " -- INDICATIVE ONLY: this run used "
             + ("--quick" if args.quick else f"{args.threads} threads")
             + "; run `python benchmarks/train_step.py` for the real check") + ":")
    for key in keys:
        case = CASES[key]
        verdict = "PASS" if ratios[key] >= case.bar else "MISS"
        print(f"- {case.model}, {case.optimizer_label}, batch {case.batch}: >= {case.bar:.1f}x "
              f"torch eager: {ratios[key]:.2f}x  {verdict}")
        if case.compile_bar:
            verdict = "PASS" if compile_ratios[key] >= case.compile_bar else "MISS"
            print(f"  and >= {case.compile_bar:.1f}x torch.compile (inductor): {compile_ratios[key]:.2f}x  {verdict}")
    fusion_table(keys, dict(timing, min_time=timing["min_time"] / 2))
    return 0


def fusion_table(keys, timing):
    """Nexus with kernel fusion (the default) vs compile(fusion=False), forward and backward:
    the bytes the fused ops read and write one by one vs. by their kernels, the bytes the whole
    step's ops read and write (GEMMs and convolutions included) without and with fusion, and
    the step time."""
    rows, bars = [], []
    for key in keys:
        case = CASES[key]
        s = build_nexus(case).fusion_stats(case.batch)
        unfused, fused = time_in_children(key, timing, ("nexus-unfused", "nexus"))
        saving = 1 - s["step_bytes_fused"] / s["step_bytes_unfused"]
        rows.append([case.model, case.optimizer_label, s["kernels"], s["ops_fused"],
                     f"{s['bytes_unfused'] / 1e6:.2f}", f"{s['bytes_fused'] / 1e6:.2f}",
                     f"{s['step_bytes_unfused'] / 1e6:.2f}", f"{s['step_bytes_fused'] / 1e6:.2f}",
                     f"-{saving:.0%}", fmt_ms(unfused["median"]), fmt_ms(fused["median"]),
                     f"{unfused['median'] / fused['median']:.2f}x"])
        if key in FUSION_BARS:
            max_bytes, min_speedup = FUSION_BARS[key]
            ratio, speedup = s["step_bytes_fused"] / s["step_bytes_unfused"], unfused["median"] / fused["median"]
            bars.append(f"- {case.model}: step bytes fused / unfused <= {max_bytes:.1f}: {ratio:.2f}  "
                        f"{'PASS' if ratio <= max_bytes else 'MISS'}; step time fusion off / on >= "
                        f"{min_speedup:.1f}x: {speedup:.2f}x  {'PASS' if speedup >= min_speedup else 'MISS'}")
    print("\nKernel fusion (nexus only; same processes-and-slices timing, half the time per side):")
    table(rows, ["model", "optimizer", "kernels", "ops fused", "MB fused ops, one by one",
                 "MB fused ops, fused", "MB step, fusion off", "MB step, fusion on", "step bytes",
                 "ms fusion off", "ms fusion on", "speed-up"])
    if bars:
        print("\nFusion bars (issue):")
        print("\n".join(bars))


if __name__ == "__main__":
    sys.exit(main())
