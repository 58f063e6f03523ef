"""Gradient compression on slow links: time to accuracy per codec over a rate-limited network.

    sudo python benchmarks/slowlink.py [--rates 1gbit,100mbit] [--delay-ms 2] [--epochs 30]
                                       [--codecs none,fp16,int8,topk:0.01,sign,auto] [--plot FILE]

Two ranks, each in a network namespace of its own (made here, removed at the end), joined by a
veth pair whose two ends are shaped with `tc`: netem (rate and delay) where the kernel has it,
else a token bucket (rate only; the delay is then reported as absent). MPI is kept off shared
memory and onto TCP over that link (MPICH: MPIR_CVAR_NOLOCAL=1, the UCX netmod with
UCX_TLS=tcp). Needs root (CAP_NET_ADMIN) and iproute2; everything runs on this machine.

Each rank trains the MLP of examples/mlp_digits.py (64-256-10, Adam 1e-3, global batch 32,
error feedback on for lossy codecs) with `nexus.distributed.DataParallel`, the same seed for
every codec, and after every epoch the test accuracy is taken (not timed). "auto" measures the
link and each codec's encode cost as the scheduler does (`Compression.choose("auto", ...)`)
and trains with what it picks. Reported per link rate and codec: the time to reach the target
accuracy (the uncompressed run's best test accuracy less 1 point, the codecs' accuracy bar),
the epochs that took, the bytes this rank sent per step, and the step-time breakdown: busy
(forward, backward, update, data), reduction (the all-reduce call) and the rest (waiting for
the other rank, Python). --plot writes the accuracy-vs-time curves (matplotlib) as FILE and
as the same name with .svg.

Bars (issue 21), at 100 Mbit/s: int8 and topk:0.01 reach the target in less time than none,
top-k at least 2x sooner; "auto" within 10 % of the best codec's time.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import table, threads  # noqa: E402

NAMESPACES = ("nxslow0", "nxslow1")
DEVICES = ("nxslow0v", "nxslow1v")
ADDRESSES = ("10.231.0.1/24", "10.231.0.2/24")
CODECS = "none,fp16,int8,topk:0.01,sign,auto"
MPI_TCP = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ucx", "UCX_TLS": "tcp"}


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


class Link:
    """Two namespaces joined by a veth pair, shaped to `rate` with `delay_ms` on each end."""

    def __init__(self, rate: str, delay_ms: float):
        self.rate, self.delay_ms, self.note = rate, delay_ms, ""

    def __enter__(self) -> Link:
        self.remove()
        for ns in NAMESPACES:
            sh("ip", "netns", "add", ns)
        sh("ip", "link", "add", DEVICES[0], "type", "veth", "peer", "name", DEVICES[1])
        for ns, dev, addr in zip(NAMESPACES, DEVICES, ADDRESSES):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            netem = sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "netem",
                       "rate", self.rate, "delay", f"{self.delay_ms}ms", "limit", "100000", check=False)
            if netem.returncode != 0:
                sh("ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate",
                   self.rate, "burst", "64kb", "latency", "200ms")
                self.note = f"no netem in this kernel ({netem.stderr.strip()}): token bucket, no added delay"
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    @staticmethod
    def remove() -> None:
        for ns in NAMESPACES:
            sh("ip", "netns", "del", ns, check=False)  # the veth ends go with their namespaces


def run_job(codec: str, args, out_path: str) -> dict:
    """One training run of both ranks in their namespaces; rank 0's results."""
    launcher = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or "mpiexec"
    worker = [sys.executable, os.path.abspath(__file__), "--worker", f"--codec={codec}",
              f"--epochs={args.epochs}", f"--out={out_path}"]
    cmd = [launcher]
    for i, ns in enumerate(NAMESPACES):
        cmd += ([":"] if i else []) + ["-n", "1", "ip", "netns", "exec", ns, *worker]
    env = dict(os.environ, **MPI_TCP, OMP_NUM_THREADS="1", NEXUS_NUM_THREADS="1")
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        raise SystemExit(f"slowlink: the {codec} run failed (exit {done.returncode}):\n"
                         f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    with open(out_path, encoding="utf-8") as f:
        return json.load(f)


def seconds_to(curve: list, target: float) -> tuple[float, int] | None:
    """(seconds, epochs) at the first point of the curve at or above target, or None."""
    for epoch, (seconds, acc) in enumerate(curve):
        if acc >= target:
            return seconds, epoch
    return None


def report(rate: str, link: Link, results: dict, rows_out: list) -> None:
    target = max(acc for _, acc in results["none"]["curve"]) - 1.0
    base = seconds_to(results["none"]["curve"], target)
    reached = {c: seconds_to(r["curve"], target) for c, r in results.items()}
    best = min((v[0] for v in reached.values() if v), default=None)
    rows = []
    for codec, r in results.items():
        hit = reached[codec]
        steps = r["steps"]
        rows.append([
            rate, codec if codec != "auto" else f"auto -> {r['spec']}",
            f"{hit[0]:.2f}" if hit else "not reached", str(hit[1]) if hit else "-",
            f"{base[0] / hit[0]:.2f}x" if hit and base else "-",
            f"{r['curve'][-1][1]:.2f}", f"{r['bytes_sent'] / steps / 1e3:.1f}",
            f"{r['wall'] / steps * 1e3:.2f}", f"{r['busy'] / steps * 1e3:.2f}",
            f"{r['reduce'] / steps * 1e3:.2f}", f"{(r['wall'] - r['busy'] - r['reduce']) / steps * 1e3:.2f}"])
    delay = f"{link.delay_ms:g} ms delay" if not link.note else "no delay"
    print(f"\n{rate}/s, {delay}; target: {target:.2f} % test accuracy (uncompressed best - 1 point)")
    if link.note:
        print(f"- {link.note}")
    if "auto" in results:
        print(f"- auto: {results['auto']['reason']}")
    table(rows, ["link", "codec", "s to target", "epochs", "vs none", "final acc %", "KB sent/step",
                 "step ms", "busy ms", "reduce ms", "rest ms"])
    if rate.lower().startswith("100m") and base:
        verdicts = []
        for codec, factor in (("int8", 1.0), ("topk:0.01", 2.0)):
            if codec in reached:
                ok = reached[codec] is not None and base[0] / reached[codec][0] > factor
                verdicts.append(f"{codec} {'>' if factor == 1 else '>='} {factor:g}x none: "
                                f"{'met' if ok else 'NOT met'}")
        if "auto" in reached and best:
            ok = reached["auto"] is not None and reached["auto"][0] <= 1.1 * best
            verdicts.append(f"auto within 10 % of the best: {'met' if ok else 'NOT met'}")
        print("- bars: " + "; ".join(verdicts))
    rows_out.append((rate, results, target))


def plot(path: str, runs: list) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(runs), figsize=(6 * len(runs), 4.2), squeeze=False)
    for ax, (rate, results, target) in zip(axes[0], runs):
        for codec, r in results.items():
            xs, ys = zip(*r["curve"])
            label = codec if codec != "auto" else f"auto ({r['spec']})"
            ax.plot(xs, ys, marker=".", label=label, linestyle="--" if codec == "auto" else "-")
        ax.axhline(target, color="grey", linewidth=0.8, linestyle=":", label=f"target {target:.1f} %")
        ax.set_title(f"2 ranks over {rate}/s")
        ax.set_xlabel("training wall time (s)")
        ax.set_ylabel("test accuracy (%)")
        ax.set_ylim(max(0, target - 15), 100)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    fig.savefig(os.path.splitext(path)[0] + ".svg")
    print(f"\ncurves: {path} and {os.path.splitext(path)[0]}.svg")


def worker(args) -> None:
    from mpi4py import MPI

    import nexus as nx
    import nexus.distributed as dist
    from nexus import Activation, GraphBuilder, Shape
    from nexus.data import DataLoader

    comm = MPI.COMM_WORLD
    threads(1)
    x_train, y_train, x_test, y_test = nx.data.load("digits")
    g = GraphBuilder(seed=0)
    g.input("pixels", Shape(32, 64)).dense(256, Activation.RELU).dropout(0.2)
    g.dense(10, Activation.SOFTMAX)
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))

    def compute_seconds() -> float:
        """A step's forward, backward and update on this rank's 16 rows, timed on a copy of the
        model (the scheduler reads the same from its probe)."""
        probe = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
        xb, yb = x_train[:32 // comm.size], y_train[:32 // comm.size]
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            probe.train_step(xb, yb)
            times.append(time.perf_counter() - t0)
        return sorted(times)[len(times) // 2]

    spec, reason = args.codec, "as requested"
    if spec == "auto":
        from nexus.scheduler.cluster import DEFAULT_COMPRESS_BELOW_GBPS
        from nexus.scheduler.plan import AUTO_CODECS, AUTO_SPARSE_CODECS, Compression, measure_codec_costs
        from nexus.scheduler.profile import gather_profiles, profile_rank

        profiles = gather_profiles(profile_rank())
        grad_bytes = sum(p.numpy().nbytes for p in model.params.values())
        specs = [*AUTO_CODECS, *AUTO_SPARSE_CODECS]
        mine = measure_codec_costs(specs, floats=int(grad_bytes // 4))
        costs = {c: comm.allreduce(mine[c], op=MPI.MAX) for c in specs}  # the slowest rank's
        choice = Compression.choose("auto", profiles, ["all"] * comm.size, False, DEFAULT_COMPRESS_BELOW_GBPS,
                                    grad_bytes=grad_bytes, codec_costs=costs,
                                    compute_seconds=comm.allreduce(compute_seconds(), op=MPI.MAX))
        spec, reason = choice.ring, choice.reason
    nx.manual_seed(0)  # the same dropout masks in every run (auto's probe drew from the generator)
    # the ranks stand for machines joined by the shaped link: the ring, never shared memory
    dp = dist.DataParallel(model, compression=None if spec == "none" else spec, shared_memory=False)
    loader = DataLoader((x_train, y_train), batch_size=32, shuffle=True, seed=0, rank=dp.rank,
                        world_size=dp.world_size)

    def accuracy() -> float:
        return 100 * model.evaluate(x_test, y_test)["accuracy"]

    curve, wall, sent, busy, reduce, steps = [(0.0, accuracy())], 0.0, 0, 0.0, 0.0, 0
    for _ in range(args.epochs):
        comm.Barrier()
        start = time.perf_counter()
        for xb, yb in loader:
            dp.train_step(xb, yb)
            stats = dist.last_stats()
            sent += stats.bytes_sent
            reduce += stats.seconds
            busy += float(dp.last_busy_seconds[dp.rank])
            steps += 1
        comm.Barrier()
        wall += comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        curve.append((wall, accuracy()))
    if comm.rank == 0:
        result = dict(spec=spec, reason=reason, curve=curve, wall=wall, bytes_sent=sent, busy=busy,
                      reduce=reduce, steps=steps)
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(result, f)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rates", default="1gbit,100mbit", help="tc rates of the link, comma-separated")
    ap.add_argument("--delay-ms", type=float, default=2.0, help="one-way delay per end (netem only)")
    ap.add_argument("--epochs", type=int, default=30)
    ap.add_argument("--codecs", default=CODECS)
    ap.add_argument("--plot", default=None, help="write the accuracy-vs-time curves here (PNG)")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds allowed per training run")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--codec", default="none", help=argparse.SUPPRESS)
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return
    if os.geteuid() != 0 or not (shutil.which("ip") and shutil.which("tc")):
        raise SystemExit("slowlink: needs root (network namespaces, tc) and iproute2's ip and tc; "
                         "run as root on a machine where that is allowed (it changes nothing outside "
                         "the namespaces it makes and removes)")
    codecs = args.codecs.split(",")
    if "none" not in codecs:
        codecs.insert(0, "none")  # the target and the baseline
    print(f"# Slow links: 2 ranks, digits MLP, {args.epochs} epochs, MPI over TCP ({MPI_TCP})")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for rate in args.rates.split(","):
            with Link(rate, args.delay_ms) as link:
                results = {c: run_job(c, args, os.path.join(tmp, f"{i}.json")) for i, c in enumerate(codecs)}
            report(rate, link, results, runs)
    if args.plot:
        plot(args.plot, runs)


if __name__ == "__main__":
    main()
