"""mpiexec job: data-parallel training, checked by tests/mpi/test_mpi_training.py.

Usage: training.py LOG_FILE. Reports through mpi_jobs.report (rank 0 adds the single-process
reference comparisons).
"""

import gc
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
report(check="custom_loop", identical=identical, losses=losses, buckets=dp.num_buckets, nccl=dp.nccl)
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
    dp = dist.DataParallel(model, bucket_bytes=2048, overlap=overlap, shared_memory=False)  # the ring's overlap
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


# ---- ranks on one machine step through shared memory (csrc/comm/shared_step.h): against the
# ring, for plain SGD (sharded from the first step), momentum and Adam with clipping (their first
# step runs unsharded: it creates the moments); unequal shares, one rank empty at 4 ranks. Every
# rank's optimizer state is whole (what a checkpoint of any rank saves), and an update after the
# data-parallel run (each rank alone, on its own rows) writes only that rank's moments.
def moments(state):
    return np.concatenate([v.ravel() for _, v in sorted(state["state"].items())] or [np.zeros(1, np.float32)])


checkpoint = sys.argv[1] + f".rank{RANK}.safetensors"
for name, make in (("sgd", lambda: nx.optim.SGD(lr=0.1)),
                   ("momentum", lambda: nx.optim.SGD(lr=0.1, momentum=0.9, nesterov=True)),
                   ("adam_clip", lambda: nx.optim.Adam(lr=1e-2, clip_norm=0.5))):
    runs = {}
    for shared_memory in (True, False):
        model = build(opt=make())
        dp = dist.DataParallel(model, shared_memory=shared_memory)
        shared = []
        for xb, yb in nx.data.DataLoader((x, y), batch_size=B, seed=2, rank=RANK, shares=shares):
            dp.train_step(xb, yb)
            shared.append(dp._reducer.last_step_shared)
        runs[shared_memory] = dict(model=model, in_use=dp.shared_memory, shared=shared, weights=flat(model),
                                   state=model.optimizer.state_dict())
    shm, ring = runs[True], runs[False]
    every_state = dist.all_gather(moments(shm["state"])[None, :])
    model = shm["model"]
    identical = same_everywhere(model)
    model.save(checkpoint)
    alone = nx.checkpoint.load(checkpoint)
    os.remove(checkpoint)
    rows = slice(RANK * 7, RANK * 7 + B)
    model.train_step(x[rows], y[rows])
    alone.train_step(x[rows], y[rows])
    report(check="shared_memory", opt=name, in_use=[shm["in_use"], ring["in_use"]], shared=shm["shared"],
           ring_shared=ring["shared"], identical=identical,
           state_identical=all(np.array_equal(every_state[r], every_state[0]) for r in range(N)),
           weights_diff=float(np.abs(shm["weights"] - ring["weights"]).max()),
           state_diff=float(np.abs(moments(shm["state"]) - moments(ring["state"])).max()),
           steps_equal=bool(shm["state"]["step"] == ring["state"]["step"]
                            and np.array_equal(shm["state"]["param_steps"], ring["state"]["param_steps"])),
           alone_equal=bool(np.array_equal(flat(model), flat(alone))
                            and np.array_equal(moments(model.optimizer.state_dict()),
                                               moments(alone.optimizer.state_dict()))))

# ---- through shared memory the parameters themselves live in the segment (no rank copies the
# others' parts): a rank that updates alone while the DataParallel lives moves its own parameters
# out first and leaves the other ranks' alone; arrays taken from a parameter before it moved keep
# the values of that time (as views of a moved tensor do); once the DataParallel is gone every rank's parameters are
# its own again.
model = build(opt=nx.optim.Adam(lr=1e-2))
first = next(iter(model.params))
start = model.params[first].numpy()
dp = dist.DataParallel(model)
history = [start.copy()]
for xb, yb in nx.data.DataLoader((x, y), batch_size=B, seed=2, rank=RANK, shares=shares):
    dp.train_step(xb, yb)
    history.append(model.params[first].numpy().copy())
live = model.params[first].numpy()  # taken while the parameter is in the segment
trained = flat(model)
dist.barrier()
if RANK == 0:
    model.train_step(x[:B], y[:B])  # alone, the DataParallel still alive
dist.barrier()
others_kept = bool(np.array_equal(flat(model), trained)) if RANK else not np.array_equal(flat(model), trained)
# `start` shows the values the parameter had when it moved, never freed memory
start_kept = any(np.array_equal(start, h) for h in history[:-1])
dp.train_step(*[a[RANK * 7:RANK * 7 + 16] for a in (x, y)])  # the rank that left comes back
back_identical = same_everywhere(model)
del dp
gc.collect()
after = flat(model)
dist.barrier()
if RANK == 1:
    model.train_step(x[:B], y[:B])
dist.barrier()
own_after = bool(np.array_equal(flat(model), after)) if RANK != 1 else not np.array_equal(flat(model), after)
report(check="params_in_segment", others_kept=others_kept, start_kept=start_kept,
       live_readable=bool(np.isfinite(live).all()), back_identical=back_identical, own_after=own_after)

# ---- one rank that says no (NEXUS_DP_SHARED_MEMORY=0, or a rank on another machine) makes every
# rank keep the ring, with no rank left waiting
if RANK == N - 1:
    os.environ["NEXUS_DP_SHARED_MEMORY"] = "0"
model = build()
dp = dist.DataParallel(model)
for xb, yb in nx.data.DataLoader((x, y), batch_size=B, seed=2, rank=RANK, shares=shares):
    dp.train_step(xb, yb)
os.environ.pop("NEXUS_DP_SHARED_MEMORY", None)
report(check="one_rank_declines", in_use=dp.shared_memory, identical=same_everywhere(model),
       max_diff=float(np.abs(flat(model) - flat_ref).max()))

# ---- every segment rank 0 made (its name carries rank 0's pid) is gone from /dev/shm -----------
if RANK == 0:
    left = [f for f in os.listdir("/dev/shm") if f.startswith(f"nexus-dp-{os.getpid()}-")] \
        if os.path.isdir("/dev/shm") else []
    report(check="segments_left", names=left)
