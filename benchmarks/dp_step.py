"""Data-parallel step on one machine: Nexus through shared memory, Nexus through the ring, and
PyTorch DistributedDataParallel (gloo), side by side in one job.

    python benchmarks/dp_step.py                 # launches the job below and prints the table
    mpiexec -n 1 taskset -c 0 python benchmarks/dp_step.py --child : \\
            -n 2 taskset -c 1 python benchmarks/dp_step.py --child   (what the above runs)
    python benchmarks/dp_step.py --ranks 2       # plain `mpiexec -n 2`, an even split

The job is the heterogeneous benchmark's (benchmarks/hetero.py): 3 ranks with one thread each,
rank 0 alone on one core, ranks 1 and 2 sharing the other; the model a new user tried there (MLP
64-1024-1024-10, 1.1 M parameters, Adam 1e-3) on synthetic data, each global batch split
[1/2, 1/4, 1/4] (the ranks' rates). Before timing, the three engines train 3 steps from the same
weights on an even split and their losses and weights are compared (Nexus's two paths within
1e-5 of each other, PyTorch within 1e-4). Then rounds of 10 steps per engine, alternating; each
step starts after a barrier and counts the slowest rank; medians. With --ranks N the job is N
ranks under a plain mpiexec (one thread each, placed by the OS) and each batch is split evenly.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import gloo_group, run_uneven_job, table, threads  # noqa: E402

FEATURES, HIDDEN, CLASSES = 64, 1024, 10


def nexus_model(rows: int):
    import nexus as nx

    g = nx.GraphBuilder(seed=0)
    g.input("x", nx.Shape(rows, FEATURES)).dense(HIDDEN, "relu").dense(HIDDEN, "relu").dense(CLASSES, "softmax")
    return g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))


def torch_ddp(comm, like):
    """DistributedDataParallel over gloo (rendezvous on 127.0.0.1) with `like`'s weights, or None
    without torch."""
    group = gloo_group(comm)
    if group is None:
        return None
    torch, td = group
    net = torch.nn.Sequential(torch.nn.Linear(FEATURES, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, HIDDEN),
                              torch.nn.ReLU(), torch.nn.Linear(HIDDEN, CLASSES))
    params = [p.numpy() for p in like.params.values()]
    with torch.no_grad():
        for layer, (w, b) in zip(net[::2], zip(params[::2], params[1::2])):
            layer.weight.copy_(torch.from_numpy(w.T.copy()))
            layer.bias.copy_(torch.from_numpy(b))
    ddp = torch.nn.parallel.DistributedDataParallel(net)
    opt = torch.optim.Adam(ddp.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        return float(loss.detach())

    def weights():
        return np.concatenate([t.detach().numpy().T.ravel() if t.ndim == 2 else t.detach().numpy()
                               for t in net.parameters()])
    return torch, td, step, weights


def flat(model) -> np.ndarray:
    return np.concatenate([p.numpy().ravel() for p in model.params.values()])


def data(rows: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((rows, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, rows)


def check(comm, dist) -> str:
    """3 steps of each engine from the same weights on an even split: a note for the table, and
    the PyTorch DDP side (None without torch)."""
    rows = 32
    x, y = data(rows * comm.size, 7)
    mine = slice(comm.rank * rows, (comm.rank + 1) * rows)
    runs = {}
    for shared in (True, False):
        model = nexus_model(rows)
        dp = dist.DataParallel(model, shared_memory=shared)
        losses = [dp.train_step(x[mine], y[mine]) for _ in range(3)]
        runs[shared] = (losses, flat(model), dp.shared_memory)
    if not runs[True][2]:
        raise SystemExit("check failed: the ranks could not share a memory segment (see /dev/shm)")
    diff = float(np.abs(runs[True][1] - runs[False][1]).max())
    if diff > 1e-5:
        raise SystemExit(f"check failed: shared memory and ring weights differ by {diff:.2e}")
    note = f"shared memory vs ring after 3 steps: weights within {diff:.1e}"
    torch_side = torch_ddp(comm, nexus_model(rows))
    if torch_side is not None:
        torch, _, step, weights = torch_side
        losses = [step(torch.from_numpy(x[mine]), torch.from_numpy(y[mine])) for _ in range(3)]
        # DDP averages the ranks' mean losses' gradients: the full-batch mean on an even split
        loss_diff = float(np.abs(np.mean(comm.allgather(losses), axis=0) - np.array(runs[True][0])).max())
        wdiff = float(np.abs(weights() - runs[True][1]).max())
        if loss_diff > 1e-4 or wdiff > 1e-4:
            raise SystemExit(f"check failed: PyTorch DDP differs (loss {loss_diff:.2e}, weights {wdiff:.2e})")
        note += f"; PyTorch DDP: losses within {loss_diff:.1e}, weights within {wdiff:.1e}"
    return note, torch_side


def child(args) -> int:
    import nexus.distributed as dist
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    notes = threads(1)
    note, torch_side = check(comm, dist)
    rows_out = []
    for batch in args.batches:
        shares = [batch // 2, batch // 4, batch - batch // 2 - batch // 4] if comm.size == 3 else \
            [batch // comm.size + (r < batch % comm.size) for r in range(comm.size)]
        rows = shares[comm.rank]
        x, y = data(rows, comm.rank)
        engines = {}
        for shared in (True, False):
            dp = dist.DataParallel(nexus_model(rows), shared_memory=shared)
            engines["nexus, shared memory" if shared else "nexus, ring"] = lambda dp=dp, x=x, y=y: dp.train_step(x, y)
        if torch_side is not None:
            torch, _, step, _ = torch_side
            tx, ty = torch.from_numpy(x), torch.from_numpy(y)
            engines["PyTorch DDP (gloo)"] = lambda step=step, tx=tx, ty=ty: step(tx, ty)
        times = {name: [] for name in engines}
        for fn in engines.values():  # warm: kernels compiled, moments created
            for _ in range(3):
                fn()
        for _ in range(args.rounds):
            for name, fn in engines.items():
                for _ in range(10):
                    comm.Barrier()
                    t0 = time.perf_counter()
                    fn()
                    times[name].append(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))
        base = float(np.median(times["nexus, shared memory"]))
        for name, t in times.items():
            med = float(np.median(t))
            rows_out.append([batch, str(shares), name, f"{med * 1e3:.2f}", f"{batch / med:,.0f}", f"{med / base:.2f}x"])
    if torch_side is not None:
        torch_side[1].destroy_process_group()
    if comm.rank == 0:
        print(f"## data-parallel step, {comm.size} ranks: {' '.join(MPI.Get_library_version().split()[:3])}")
        for line in notes:
            print(f"- {line}")
        print(f"- checks: {note}")
        table(rows_out, ["batch", "split", "engine", "ms / step", "samples/s", "time / shared memory"])
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--batches", type=lambda v: [int(w) for w in v.split(",")], default=[96, 384],
                    help="global batches, comma-separated")
    ap.add_argument("--rounds", type=int, default=20, help="rounds of 10 steps per engine")
    ap.add_argument("--ranks", type=int, default=None,
                    help="N ranks under a plain mpiexec -n N, even split (default: the uneven 3-rank job)")
    ap.add_argument("--timeout", type=float, default=900, help="seconds before the job is killed")
    ap.add_argument("--child", action="store_true", help="one rank of the job (under mpiexec)")
    args = ap.parse_args()
    if args.child:
        return child(args)
    return run_uneven_job([sys.executable, os.path.abspath(__file__), "--child",
                           f"--batches={','.join(map(str, args.batches))}", f"--rounds={args.rounds}"],
                          args.timeout, args.ranks)


if __name__ == "__main__":
    sys.exit(main())
