"""All-reduce: Nexus's C++ ring next to MPI_Allreduce (and torch.distributed gloo), codecs, and
data-parallel accuracy per codec.

    python benchmarks/allreduce.py [--ranks 2,4] [--epochs 30] [--quick]
    mpiexec -n 4 python benchmarks/allreduce.py --worker     (one world size, what the above runs)

Run as plain python, it launches itself under the environment's mpiexec once per world size in
--ranks. In each job, with one thread per rank:

1. busbw = 2(n-1)/n x bytes / time (nccl-tests) for 1, 16 and 64 MB of float32: the Nexus ring
   (dist.all_reduce), mpi4py's Comm.Allreduce (MPI_Allreduce) and, when torch imports,
   torch.distributed's gloo backend (rendezvous on 127.0.0.1). Results are checked equal to
   MPI's first (integer-valued data, exact sums). Samples alternate between the peers; each
   sample starts after a barrier and counts the slowest rank; medians. ratio = peer time /
   Nexus time (> 1: the ring is faster).
2. Each codec at 16 MB: wire bytes / uncompressed bytes (from dist.last_stats) and median time.
   At 4+ ranks (an even number), groups of two: the hierarchical reduction sharded and through
   leaders (DataParallel's two paths) at 16 and 64 MB, checked against MPI's sum first: the most
   bytes any rank sent across groups, and the time.
3. Digits (nx.data.load("digits")) with the MLP of examples/mlp_digits.py, fit(distributed=True)
   for the same epochs per codec (error feedback on), test accuracy vs uncompressed.

Bars (issue 7): uncompressed ring >= 1.0x MPI_Allreduce at 16 and 64 MB; wire ratio fp16 <= 0.51,
int8 <= 0.27, topk:0.01 <= 0.03; accuracy within 1 point of uncompressed. Issue 21: sharded
hierarchical bytes across groups <= 1/G of the leaders' path, time <= 0.7x at 64 MB.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import fmt_ms, gloo_group, mpiexec, print_run_notes, table, threads  # noqa: E402

SIZES_MB = (1, 16, 64)
CODECS = ("none", "fp16", "bf16", "int8", "topk:0.01", "sign")
WIRE_BARS = {"fp16": 0.51, "int8": 0.27, "topk:0.01": 0.03}
CODEC_MB = 16
HIER_SIZES_MB = (16, 64)
ROUNDS = 9


def busbw(nbytes: int, n: int, seconds: float) -> float:
    return 2 * (n - 1) / n * nbytes / seconds / 1e9


def timed(comm, fns, rounds):
    """Median over rounds of the slowest rank's time, for each fn; samples alternate."""
    from mpi4py import MPI

    times = [[] for _ in fns]
    for fn in fns:  # warm-up
        fn()
        fn()
    for _ in range(rounds):
        for fn, t in zip(fns, times):
            comm.Barrier()
            t0 = time.perf_counter()
            fn()
            t.append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
    return [float(np.median(t)) for t in times]


def bandwidth_rows(comm, dist, gloo, rounds):
    from mpi4py import MPI

    n = comm.size
    rows = []
    for mb in SIZES_MB:
        count = mb * (1 << 20) // 4
        rng = np.random.default_rng(comm.rank)
        base = rng.integers(-100, 100, count).astype(np.float32)
        ours, peer = base.copy(), base.copy()
        dist.all_reduce(ours)
        comm.Allreduce(MPI.IN_PLACE, peer)
        if not np.array_equal(ours, peer):
            raise SystemExit(f"check failed: ring and MPI_Allreduce differ at {mb} MB")
        fns = [lambda: dist.all_reduce(ours), lambda: comm.Allreduce(MPI.IN_PLACE, peer)]  # noqa: B023 (timed now)
        if gloo is not None:
            torch, td = gloo
            tt = torch.from_numpy(base.copy())
            td.all_reduce(tt)
            if not np.array_equal(tt.numpy(), np.asarray(dist.all_reduce(base.copy()))):
                raise SystemExit(f"check failed: ring and gloo differ at {mb} MB")
            fns.append(lambda: td.all_reduce(tt))  # noqa: B023 (timed now)
        t = timed(comm, fns, rounds)
        row = [n, f"{mb} MB", fmt_ms(t[0]), f"{busbw(count * 4, n, t[0]):.2f}",
               fmt_ms(t[1]), f"{busbw(count * 4, n, t[1]):.2f}", f"{t[1] / t[0]:.2f}x"]
        row += [fmt_ms(t[2]), f"{busbw(count * 4, n, t[2]):.2f}", f"{t[2] / t[0]:.2f}x"] \
            if gloo is not None else ["-", "-", "-"]
        rows.append(row)
    return rows


def codec_rows(comm, dist, rounds):
    count = CODEC_MB * (1 << 20) // 4
    x = np.random.default_rng(comm.rank).standard_normal(count).astype(np.float32)
    rows, times = [], {}
    for codec in CODECS:
        buf = x.copy()
        (times[codec],) = timed(comm, [lambda: dist.all_reduce(buf, compression=codec)], rounds)  # noqa: B023
        s = dist.last_stats()
        ratio = s.bytes_sent / s.bytes_uncompressed
        bar = WIRE_BARS.get(codec)
        verdict = "-" if bar is None else ("ok" if ratio <= bar else "MISSED")
        rows.append([comm.size, codec, f"{ratio:.4f}", f"<= {bar}" if bar else "-", verdict,
                     fmt_ms(times[codec]), f"{times['none'] / times[codec]:.2f}x"])
    return rows


def accuracy_rows(comm, epochs):
    import nexus as nx
    from nexus import Activation, GraphBuilder, Shape

    x_train, y_train, x_test, y_test = nx.data.load("digits")
    results = {}
    for codec in CODECS:
        g = GraphBuilder(seed=0)
        g.input("pixels", Shape(32, 64)).dense(256, Activation.RELU).dropout(0.2)
        g.dense(10, Activation.SOFTMAX)
        model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
        t0 = time.perf_counter()
        model.fit(x_train, y_train, epochs=epochs, batch_size=32, distributed=True,
                  compression=None if codec == "none" else codec, progress=False)
        seconds = comm.allreduce(time.perf_counter() - t0, op=__import__("mpi4py").MPI.MAX)
        results[codec] = (100 * model.evaluate(x_test, y_test)["accuracy"], seconds)
    base = results["none"][0]
    return [[comm.size, codec, epochs, f"{acc:.2f}", f"{acc - base:+.2f}",
             "ok" if acc >= base - 1.0 else "MISSED", f"{sec:.1f}"]
            for codec, (acc, sec) in results.items()]


def hierarchical_rows(comm, rounds):
    """Groups of two ranks: the sharded hierarchical reduction next to the leaders' path (a ring
    in each group, a ring of leaders, a broadcast in each group), both on DataParallel's code.
    Bytes across groups: the most any rank sent on the cross-group ring."""
    import nexus as nx
    import nexus.distributed as dist
    from mpi4py import MPI
    from nexus import _C_mpi
    from nexus.distributed.data_parallel import _hierarchy

    w = dist._world.world()
    labels = [r // 2 for r in range(comm.size)]
    group_size = 2
    rows = []
    for mb in HIER_SIZES_MB:
        count = mb * (1 << 20) // 4
        x = np.random.default_rng(comm.rank).integers(-8, 9, count).astype(np.float32)
        want = comm.allreduce(x.astype(np.float64), op=MPI.SUM)
        out, bytes_across, fns = {}, {}, []
        for sharded in (False, True):
            group, cross, _ = _hierarchy(w, labels, sharded)
            buf = nx.from_numpy(x.copy())

            def run(group=group, cross=cross, sharded=sharded, buf=buf):
                # (timed on its own result: the sums grow, the work does not)
                return _C_mpi.hierarchical_all_reduce(group, cross, sharded, buf)

            _, sent = run()
            out[sharded] = buf.numpy().copy()
            if not np.array_equal(out[sharded], want.astype(np.float32)):
                raise SystemExit(f"check failed: hierarchical (sharded={sharded}) {mb} MB differs from MPI's sum")
            bytes_across[sharded] = comm.allreduce(sent, op=MPI.MAX)
            fns.append(run)
        leaders_t, sharded_t = timed(comm, fns, rounds)
        ratio = bytes_across[True] / bytes_across[False]
        rows.append([comm.size, group_size, f"{mb} MB", f"{bytes_across[False] / 1e6:.1f}",
                     f"{bytes_across[True] / 1e6:.1f}", f"{ratio:.3f}",
                     "met" if ratio <= 1 / group_size + 1e-3 else "NOT met", fmt_ms(leaders_t), fmt_ms(sharded_t),
                     f"{sharded_t / leaders_t:.2f}x", "met" if mb != 64 or sharded_t <= 0.7 * leaders_t else
                     "NOT met"])
    return rows


def worker(args) -> int:
    import nexus as nx
    import nexus.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    notes = threads(1)
    gloo = None if args.no_torch else gloo_group(comm)
    rounds = 3 if args.quick else ROUNDS
    bw = bandwidth_rows(comm, dist, gloo, rounds)
    codecs = codec_rows(comm, dist, rounds)
    hier = hierarchical_rows(comm, rounds) if comm.size >= 4 and comm.size % 2 == 0 else []
    acc = accuracy_rows(comm, 2 if args.quick else args.epochs)
    if comm.rank == 0:
        library = " ".join(MPI.Get_library_version().splitlines()[0].split())
        print(f"## {comm.size} ranks: {library}, "
              f"nexus {nx.__version__}, {os.cpu_count()} CPUs")
        print_run_notes(notes + [f"ranks: {comm.size}, one thread each; medians of {rounds} "
                                 "samples, each the slowest rank's time after a barrier"])
        table(bw, ["ranks", "size", "nexus ms", "nexus busbw GB/s", "MPI ms", "MPI busbw GB/s",
                   "vs MPI", "gloo ms", "gloo busbw GB/s", "vs gloo"])
        print()
        table(codecs, ["ranks", "codec", "wire / uncompressed", "bar", "", f"ms ({CODEC_MB} MB)",
                       "speed vs none"])
        print()
        if hier:
            table(hier, ["ranks", "ranks per group", "size", "leaders: MB across", "sharded: MB across",
                         "ratio", "bar (1/G)", "leaders ms", "sharded ms", "sharded / leaders", "bar (0.7x at 64 MB)"])
            print()
        table(acc, ["ranks", "codec", "epochs", "test accuracy %", "vs none", "bar (1 pt)",
                    "fit s"])
        print(flush=True)
    if gloo is not None:
        gloo[1].destroy_process_group()
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4", help="world sizes to launch (plain-python mode)")
    ap.add_argument("--epochs", type=int, default=30, help="digits epochs per codec")
    ap.add_argument("--quick", action="store_true", help="few samples and 2 epochs (smoke test)")
    ap.add_argument("--no-torch", action="store_true", help="skip the torch gloo peer")
    ap.add_argument("--worker", action="store_true", help="run one world size (under mpiexec)")
    args = ap.parse_args()
    if args.worker:
        return worker(args)
    launcher = mpiexec()
    env = {**os.environ, "NEXUS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    passthrough = [f"--epochs={args.epochs}"] + ["--quick"] * args.quick + \
        ["--no-torch"] * args.no_torch
    for n in (int(v) for v in args.ranks.split(",")):
        cmd = [launcher, "-n", str(n), sys.executable, os.path.abspath(__file__), "--worker",
               *passthrough]
        print(f"$ {' '.join(cmd)}", flush=True)
        rc = subprocess.call(cmd, env=env)
        if rc:
            return rc
    return 0


if __name__ == "__main__":
    sys.exit(main())
