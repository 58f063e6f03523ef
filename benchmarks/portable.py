"""The portable build's dispatched CPU variants against a NEXUS_ARCH=native build of the same source.

    python benchmarks/portable.py --native-python /tmp/nx-native/bin/python [--rounds 3] [--quick]

The interpreter running this script has the default (portable) install; --native-python is one
whose `nexus` was built with `-Ccmake.define.NEXUS_ARCH=native` (the README's Performance section
shows how). Each configuration -- native, portable with the variant it picks, and each other
variant this CPU runs (NEXUS_CPU_VARIANT) -- times the same ops in a child process; the children
run in turns, `--rounds` times, and each op's figure is the median over the rounds, so a load
change hits every configuration alike. ratio = native time / configuration time (> 1: faster
than native). The issue's bar: the variant the portable build picks within 5 % of native.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BAR = 0.95  # portable (auto) time within 5 % of native: native / portable >= 0.95


def child(quick: bool) -> None:
    """Times Nexus's side of benchmarks/ops.py plus the other dispatched kernels; prints JSON."""
    import numpy as np

    sys.path.insert(0, HERE)
    from common import bench, threads
    from ops import make_cases

    import nexus as nx
    from nexus._C import comm

    threads(2)
    rng = np.random.default_rng(0)
    fns = {f"{c.op} {c.shape}": c.ours for c in make_cases(quick, rng)}
    n = 1 << (20 if quick else 22)
    logits = nx.from_numpy(rng.standard_normal((n // 1024, 1024), dtype=np.float32))
    labels = nx.from_numpy(rng.integers(0, 1024, n // 1024))
    fns[f"cross_entropy fp32 ({n // 1024}, 1024)"] = lambda: nx.cross_entropy(logits, labels)
    x = nx.from_numpy(rng.standard_normal(n, dtype=np.float32))
    fns[f"tanh fp32 {n >> 20}M"] = lambda: nx.tanh(x)
    fns[f"gelu fp32 {n >> 20}M"] = lambda: nx.gelu(x)
    fns[f"max fp32 {n >> 20}M"] = lambda: nx.max(x)
    g = rng.standard_normal(n, dtype=np.float32)
    for spec in ("fp16", "int8"):
        codec = comm.Codec(spec)
        fns[f"codec {spec} encode+decode {n >> 20}M"] = lambda c=codec: c.decode(c.encode(g), n)
    timing = dict(warmup=2, min_time=0.2 if quick else 0.4)
    out = {"variant": nx.info()["cpu_variant"], "times": {k: bench(f, **timing)["median"] for k, f in fns.items()}}
    print(json.dumps(out))


def run_child(python: str, quick: bool, variant: str | None) -> dict:
    env = dict(os.environ)
    env.pop("NEXUS_CPU_VARIANT", None)
    if variant:
        env["NEXUS_CPU_VARIANT"] = variant
    cmd = [python, os.path.abspath(__file__), "--child"] + (["--quick"] if quick else [])
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=HERE, timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--native-python",
                        help="an interpreter whose nexus was built with NEXUS_ARCH=native")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test)")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        child(args.quick)
        return 0
    if not args.native_python:
        parser.error("--native-python is required: an interpreter whose nexus was built with NEXUS_ARCH=native")

    import nexus as nx
    from nexus import _C

    info = nx.info()
    if info["march"] != "portable":
        raise SystemExit(f"this interpreter's nexus is a NEXUS_ARCH={info['march']} build; run with the portable one")
    runnable = [v for v in info["cpu_variants"] if _C.cpu_supports(v)]
    configs = {"native": (args.native_python, None), f"portable ({info['cpu_variant']}, auto)": (sys.executable, None)}
    configs.update({f"portable {v}": (sys.executable, v) for v in runnable if v != info["cpu_variant"]})
    samples: dict[str, list[dict]] = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, (python, variant) in configs.items():
            samples[name].append(run_child(python, args.quick, variant)["times"])
    median = {name: {op: statistics.median(s[op] for s in runs) for op in runs[0]} for name, runs in samples.items()}

    print(f"# benchmarks/portable.py{' --quick' if args.quick else ''} --rounds {args.rounds}\n")
    print(f"- CPU features seen: {info['cpu_features']}; 2 threads; each figure the median over {args.rounds} rounds "
          f"of per-process medians; load average {os.getloadavg()[0]:.2f} at the end (a busy machine adds noise)\n")
    names = list(configs)
    print("| op | native ms | " + " | ".join(f"{n} ms (ratio)" for n in names[1:]) + " |")
    print("| --- " * len(names) + "| --- |")
    auto = names[1]
    ratios = []
    for op, t_native in median["native"].items():
        cells = [f"{median[n][op] * 1e3:.3f} ({t_native / median[n][op]:.2f}x)" for n in names[1:]]
        ratios.append(t_native / median[auto][op])
        print(f"| {op} | {t_native * 1e3:.3f} | " + " | ".join(cells) + " |")
    geo = statistics.geometric_mean(ratios)
    worst = min(ratios)
    print(f"\nratio = native ms / that configuration's ms. {auto}: geometric mean {geo:.3f}x, "
          f"worst {worst:.3f}x of native.")
    verdict = "PASS" if geo >= BAR else "MISS"
    print(f"Bar (issue): the dispatched variant within 5 % of the native build: {geo:.3f}x >= {BAR}x  {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
