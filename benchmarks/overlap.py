"""Data-parallel step time with the gradient reduction overlapping backward vs after it.

    python benchmarks/overlap.py [--ranks 2] [--batch 512] [--rounds 5]

Launches itself under mpiexec (one thread per rank): an MLP 512-1024-1024-1024-10 (2.6 M
parameters, 6 buckets of 1 MiB), SGD, each rank a share of the global batch; DataParallel with
overlap=True and overlap=False built alike, their steps alternating in rounds (so a load change
hits both), median step time per mode and the ratio. Both reduce through the ring
(shared_memory=False: ranks on one machine would otherwise step through shared memory). Both
end with the same weights up to rounding (tests/mpi/test_mpi_training.py checks it).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import table  # noqa: E402


def child(args) -> None:
    import nexus as nx
    import nexus.distributed as dist

    rank, n = dist.rank(), dist.world_size()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.batch, 512)).astype(np.float32)
    y = rng.integers(0, 10, args.batch)
    share = args.batch // n
    xb, yb = x[rank * share:(rank + 1) * share], y[rank * share:(rank + 1) * share]
    runs = {}
    for overlap in (True, False):
        g = nx.GraphBuilder(seed=0)
        g.input("f", nx.Shape(1, 512)).dense(1024, "relu").dense(1024, "relu") \
            .dense(1024, "relu").dense(10, "softmax")
        m = g.compile(loss="cross_entropy", optimizer=nx.optim.SGD(lr=0.01))
        # the ring's overlap is what is measured: not the shared-memory step of ranks on one machine
        runs[overlap] = dist.DataParallel(m, bucket_bytes=1 << 20, overlap=overlap, shared_memory=False)
    times = {True: [], False: []}
    for _ in range(args.rounds):
        for overlap, dp in runs.items():
            for step in range(args.steps):
                dist.barrier()
                t0 = time.perf_counter()
                dp.train_step(xb, yb)
                if step >= 2:  # the first steps of a round warm the buffers
                    times[overlap].append(time.perf_counter() - t0)
    if rank == 0:
        on, off = np.median(times[True]), np.median(times[False])
        buckets = runs[True].num_buckets
        print(f"## DataParallel step, {n} ranks x 1 thread, global batch {args.batch}, "
              f"{buckets} buckets; medians of {len(times[True])} steps per mode")
        table([["reduce after backward (overlap=False)", f"{off * 1e3:.1f}", "1.00x"],
               ["reduce while backward runs (overlap=True)", f"{on * 1e3:.1f}",
                f"{off / on:.2f}x"]], ["mode", "median ms / step", "speed vs after"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--batch", type=int, default=512, help="global batch")
    ap.add_argument("--rounds", type=int, default=5, help="alternations of the two modes")
    ap.add_argument("--steps", type=int, default=8, help="steps per mode per round")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    launcher = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    env = {**os.environ, "NEXUS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
    cmd = [launcher, "-n", str(args.ranks), sys.executable, os.path.abspath(__file__), "--child",
           f"--batch={args.batch}", f"--rounds={args.rounds}", f"--steps={args.steps}"]
    sys.exit(subprocess.run(cmd, env=env, timeout=600).returncode)


if __name__ == "__main__":
    main()
