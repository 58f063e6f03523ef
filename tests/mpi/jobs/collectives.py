"""mpiexec job: every collective of nexus.distributed, checked by tests/mpi/test_mpi_collectives.py.

Each rank reports its results through mpi_jobs.report; the test asserts on them. Inputs are small integers, so
every partial sum is exact in each dtype and the ring must match the naive sum bit for bit.
"""

import os
import sys

import numpy as np

import nexus as nx
import nexus.distributed as dist
from nexus import _C_mpi

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mpi_jobs  # noqa: E402

RANK, N = dist.rank(), dist.world_size()


def report(**kw):
    mpi_jobs.report(RANK, N, **kw)


def inputs(seed, n):
    """Every rank's input (so each rank can compute the naive sum itself)."""
    return [np.random.default_rng(seed * 100 + r).integers(-8, 9, n).astype(np.float32)
            for r in range(N)]


def as_dtype(a, dtype):
    return nx.tensor(a).astype(dtype)


def to_f32(t):
    return t.astype("float32").numpy() if isinstance(t, nx.Tensor) else t.astype(np.float32)


# ---- exactness: sizes x dtypes x ops, through the public API and with tiny segments ------------
sizes = sorted({0, 1, max(N - 1, 1), N + 1, 37 * N + 3, 100_003})
bad = []
for seed, n in enumerate(sizes):
    xs = inputs(seed, n)
    naive = np.sum(xs, axis=0, dtype=np.float64)
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        for op in ("sum", "mean"):
            want = naive / N if op == "mean" else naive
            if dtype in ("float32", "float64"):
                x = xs[RANK].astype(dtype)
            else:
                x = as_dtype(xs[RANK], dtype)
            out = dist.all_reduce(x, op=op)
            if out is not x or not np.array_equal(to_f32(out), want.astype(np.float32)):
                bad.append((n, dtype, op))
    # the multi-segment pipeline: 12-byte segments (3 float32)
    x = xs[RANK].copy()
    _C_mpi.all_reduce(dist._world.world().transport, nx.from_numpy(x), "sum", "none", None, 12, 60.0)
    if not np.array_equal(x, naive.astype(np.float32)):
        bad.append((n, "float32", "sum, 12-byte segments"))
report(check="exact", sizes=sizes, bad=[list(map(str, b)) for b in bad])

# ---- max and min: every dtype, the same on every rank --------------------------------------
bad = []
for seed, n in enumerate(sizes):
    xs = inputs(seed + 50, n)
    for op, reduce in (("max", np.maximum), ("min", np.minimum)):
        want = reduce.reduce(np.stack(xs), axis=0) if n else np.zeros(0, np.float32)
        for dtype in ("float32", "float64", "float16", "bfloat16", "int32"):
            x = xs[RANK].astype(dtype) if dtype in ("float32", "float64", "int32") else as_dtype(
                xs[RANK], dtype)
            out = dist.all_reduce(x, op=op)
            if out is not x or not np.array_equal(to_f32(out), want):
                bad.append((n, dtype, op))
report(check="extremum", bad=[list(map(str, b)) for b in bad])

# ---- codecs: wire ratio, identical results on every rank, error feedback ----------------------
n = 1 << 16
base = np.random.default_rng(7 + RANK).standard_normal(n).astype(np.float32)
true = np.sum([np.random.default_rng(7 + r).standard_normal(n).astype(np.float32)
               for r in range(N)], axis=0)
for codec in ("none", "fp16", "bf16", "int8", "topk:0.01", "sign"):
    x = base.copy()
    dist.all_reduce(x, compression=codec)
    s = dist.last_stats()
    everyone = dist.all_gather(x[None, :])
    same = all(np.array_equal(everyone[r], everyone[0]) for r in range(N))
    err = float(np.abs(x - true).max() / np.abs(true).max())
    report(check="codec", codec=codec, bytes_sent=s.bytes_sent,
           bytes_uncompressed=s.bytes_uncompressed, seconds=s.seconds, identical=same,
           rel_err=err)

# error feedback: the same input reduced K times; a lossy codec's error repeats every round, so
# without a Residual the outputs' sum drifts from K * true linearly, and with one it stays within
# about one round's error.
K = 30
for codec in ("int8", "sign"):
    drift = {}
    for use_residual in (False, True):
        residual = nx._C.comm.Residual(n) if use_residual else None
        acc = np.zeros(n, np.float64)
        for _ in range(K):
            x = base.copy()
            dist.all_reduce(x, compression=codec, residual=residual)
            acc += x
        drift[use_residual] = float(np.abs(acc - K * true.astype(np.float64)).mean())
    report(check="error_feedback", codec=codec, drift_without=drift[False],
           drift_with=drift[True])

# ---- hierarchical reduction: sharded (groups of one size) and through leaders -------------------
# Two groups (of one rank each at 2 ranks, two each at 4) and, at 4 ranks, groups of sizes 3 + 1
# (leaders only). Exact sums on every rank, every rank alike, and the bytes sent across groups.
from nexus.distributed.data_parallel import _hierarchy  # noqa: E402

w = dist._world.world()
layouts = [[r * 2 // N for r in range(N)]] + ([[0, 0, 0, 1]] if N == 4 else [])
for labels in layouts:
    for sharded in (True, False):
        if sharded and len(set(labels.count(g) for g in labels)) > 1:
            continue
        group, cross, is_sharded = _hierarchy(w, labels, sharded)
        for n in (1, N + 1, 100_003):
            for dtype, codec in (("float32", "none"), ("float64", "none"), ("float32", "int8")):
                xs = inputs(50 + n, n)
                x = xs[RANK].astype(dtype)
                stats, cross_bytes = _C_mpi.hierarchical_all_reduce(group, cross, sharded, nx.from_numpy(x),
                                                                    "none", codec, 24 if n < 100 else 1 << 16, 60.0)
                everyone = dist.all_gather(x.astype(np.float64)[None, :])
                want = np.sum(xs, axis=0, dtype=np.float64)
                report(check="hierarchical", labels=labels, sharded=is_sharded, n=n, dtype=dtype, codec=codec,
                       exact=bool(np.array_equal(x, want.astype(dtype))),
                       close=bool(np.abs(x - want).max() <= 0.05 * max(1.0, np.abs(want).max())),
                       identical=all(np.array_equal(everyone[r], everyone[0]) for r in range(N)),
                       cross_bytes=int(cross_bytes), bytes_sent=int(stats.bytes_sent))

# ---- broadcast and all_gather -------------------------------------------------------------------
root = N - 1
a = np.full((3, 2), float(RANK), np.float64)
dist.broadcast(a, root=root)
t = as_dtype(np.arange(5, dtype=np.float32) + RANK, "bfloat16")
dist.broadcast(t, root=root)
ints = np.arange(4, dtype=np.int64) * (RANK + 1)
dist.all_reduce(ints)
g = dist.all_gather(np.full((RANK + 1, 2), RANK, np.int32))
gt = dist.all_gather(nx.tensor(np.array([RANK], np.float32)))
report(check="broadcast", array=a.tolist(), tensor=to_f32(t).tolist(), ints=ints.tolist(),
       gathered=[p.tolist() for p in g], gathered_tensor=[p.numpy().tolist() for p in gt])

# ---- argument errors raise on every rank alike, and the world keeps working --------------------
errors = {}
for name, call in {
    "float64 with int8": lambda: dist.all_reduce(np.ones(4), compression="int8"),
    "unknown codec": lambda: dist.all_reduce(np.ones(4, np.float32), compression="zip"),
    "unknown op": lambda: dist.all_reduce(np.ones(4, np.float32), op="prod"),
    "read-only array": lambda: dist.all_reduce(np.broadcast_to(np.ones(1, np.float32), (4,))),
    "list": lambda: dist.all_reduce([1.0, 2.0]),
    "bad root": lambda: dist.broadcast(np.ones(2), root=N),
}.items():
    try:
        call()
        errors[name] = "no error"
    except (ValueError, TypeError) as e:
        errors[name] = f"{type(e).__name__}: {e}"
dist.barrier()
report(check="errors", errors=errors)
