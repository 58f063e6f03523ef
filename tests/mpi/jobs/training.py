"""mpiexec job: data-parallel training, checked by tests/mpi/test_mpi_training.py.

Usage: training.py LOG_FILE. Reports through mpi_jobs.report (rank 0 adds the single-process
reference comparisons).
"""

import os
import sys

import numpy as np

import nexus as nx
import nexus.distributed as dist
from nexus import GraphBuilder, Shape

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mpi_jobs  # noqa: E402

RANK, N = dist.rank(), dist.world_size()
x, y, _, _ = nx.data.load("digits")
x, y = x[:300], y[:300]
B = 64


def report(**kw):
    mpi_jobs.report(RANK, N, **kw)


def build(seed=0, opt=None):
    g = GraphBuilder(seed=seed)
    g.input("x", Shape(B, 64)).dense(32, "relu").dense(10, "softmax")
    return g.compile(loss="cross_entropy", optimizer=opt or nx.optim.SGD(lr=0.1))


def flat(model):
    return np.concatenate([p.numpy().ravel() for p in model.params.values()])


def same_everywhere(model):
    everyone = dist.all_gather(flat(model)[None, :])
    return all(np.array_equal(everyone[r], everyone[0]) for r in range(N))


# ---- DataParallel in a custom loop: rank-specific init is replaced by rank 0's; weights are
# identical after every step; the result equals single-process full-batch SGD.
model = build(seed=RANK)
dp = dist.DataParallel(model, bucket_bytes=2048)
loader = nx.data.DataLoader((x, y), batch_size=B, seed=5, rank=RANK, world_size=N)
identical, losses = [same_everywhere(model)], []
for xb, yb in loader:
    losses.append(dp.train_step(xb, yb))
    identical.append(same_everywhere(model))
report(check="custom_loop", identical=identical, losses=losses, buckets=dp.num_buckets)
if RANK == 0:
    ref = build(seed=0)
    ref_losses = [ref.train_step(xb, yb)
                  for xb, yb in nx.data.DataLoader((x, y), batch_size=B, seed=5)]
    report(check="custom_loop_reference", max_diff=float(np.abs(flat(ref) - flat(model)).max()),
           loss_diff=float(np.abs(np.array(ref_losses) - np.array(losses)).max()))

# ---- fit(distributed=True) with unequal shares (one rank gets none at 4 ranks) -----------------
shares = {1: [B], 2: [40, 24], 3: [30, 30, 4], 4: [30, 0, 20, 14]}[N]
model = build()
history = model.fit(x, y, epochs=2, batch_size=B, distributed=True, shares=shares, seed=1,
                    progress=False)
report(check="fit_shares", identical=same_everywhere(model), loss=history["loss"])
if RANK == 0:
    ref = build()
    ref_history = ref.fit(x, y, epochs=2, batch_size=B, seed=1, progress=False)
    report(check="fit_shares_reference", max_diff=float(np.abs(flat(ref) - flat(model)).max()),
           loss=ref_history["loss"])

# ---- fit with a lossy codec and Adam: still identical weights; log only from rank 0 -----------
model = build(opt=nx.optim.Adam(lr=1e-2))
history = model.fit(x, y, epochs=3, batch_size=B, distributed=True, compression="int8",
                    log_file=sys.argv[1], progress=False, validation_data=(x, y))
report(check="fit_int8", identical=same_everywhere(model), loss=history["loss"],
       accuracy=history["val_accuracy"][-1])

# ---- reduction overlapping backward vs after it: the same weights up to rounding (the
# overlapped path weights by the previous step's count and rescales when it changes). SGD, so
# rounding stays rounding; unequal shares, several buckets; at 4 ranks rank 1 has no rows.
runs = {}
for overlap in (True, False):
    model = build()
    dp = dist.DataParallel(model, bucket_bytes=2048, overlap=overlap)
    for xb, yb in nx.data.DataLoader((x, y), batch_size=B, seed=2, rank=RANK, shares=shares):
        dp.train_step(xb, yb)
    runs[overlap] = (flat(model), dp.overlap)
report(check="overlap", max_diff=float(np.abs(runs[True][0] - runs[False][0]).max()),
       used=[runs[True][1], runs[False][1]], identical=same_everywhere(model))

# ---- hierarchical, overlapped and not, sharded (equal groups) and through leaders: the same
# weights up to rounding as the flat reduction after backward, identical on every rank
flat_ref = runs[False][0]
layouts = [[r * 2 // N for r in range(N)]] + ([[0, 0, 0, 1]] if N == 4 else [])
for labels in layouts:
    for overlap in (True, False):
        model = build()
        dp = dist.DataParallel(model, bucket_bytes=2048, overlap=overlap, groups=labels)
        for xb, yb in nx.data.DataLoader((x, y), batch_size=B, seed=2, rank=RANK, shares=shares):
            dp.train_step(xb, yb)
        report(check="hierarchical_training", labels=labels, overlap=dp.overlap,
               max_diff=float(np.abs(flat(model) - flat_ref).max()), identical=same_everywhere(model))

