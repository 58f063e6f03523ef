"""mpiexec job: the heterogeneous scheduler on 3 ranks, checked by tests/mpi/test_mpi_scheduler.py.

Usage: scheduler.py OUT_DIR. Launched with rank 0 alone on one core and ranks 1-2 sharing the
other (taskset), so rank 0 computes about twice as fast as each of the others.
"""

import os
import sys

import numpy as np

import nexus as nx
import nexus.distributed as dist
from nexus import BatchSize, ClusterConfig, DeviceType, Epochs, GraphBuilder, Scheduler, Shape

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import mpi_jobs  # noqa: E402

RANK, N = dist.rank(), dist.world_size()
OUT = sys.argv[1]


def report(**kw):
    mpi_jobs.report(RANK, N, **kw)


def build(width=256, features=64):
    g = GraphBuilder(seed=0)
    g.input("features", Shape(32, features)).dense(width, "relu").dropout(0.1).dense(10, "softmax")
    return g


def flat(model):
    return np.concatenate([p.numpy().ravel() for p in model.params.values()])


def identical(model):
    everyone = dist.all_gather(flat(model)[None, :])
    return all(np.array_equal(everyone[r], everyone[0]) for r in range(N))


# ---- adaptive balance: rank 0 (a core of its own) ends with the largest share
# (big enough that a step computes for tens of milliseconds: shorter steps measure the OS
# scheduler's time slices on the shared core more than the ranks' speed)
rng = np.random.default_rng(0)
teacher = rng.standard_normal((256, 10)).astype(np.float32)
xs = rng.standard_normal((8192, 256)).astype(np.float32)
ys = np.argmax(xs @ teacher, axis=1)
s = Scheduler.with_graph(build(1024, 256), ClusterConfig.auto(), optimizer=nx.optim.Adam(lr=5e-3))
r = s.train((xs[:6144], ys[:6144], xs[6144:], ys[6144:]), Epochs(5), BatchSize(2048),
            balance="adaptive", rebalance_every=3,
            log_file=os.path.join(OUT, "adaptive.jsonl"),
            heatmap_png=os.path.join(OUT, "adaptive.png"), verbose=RANK == 0)
report(check="adaptive", shares=r.shares, accuracy=r.accuracy, steps=r.steps,
       rates=list(r.plan.probe_rates), history=len(r.history), identical=identical(s.model),
       samples_per_second=r.samples_per_second, rebalances=len(r.rebalances),
       plan_shares=list(r.plan.split), groups=list(r.plan.groups), breakdown=r.breakdown,
       step_ms=1e3 * r.seconds / r.steps)

# ---- adaptive from an equal first split: the balancer moves samples to rank 0
s = Scheduler.with_graph(build(1024, 256), ClusterConfig.auto(), optimizer=nx.optim.Adam(lr=5e-3))
r = s.train((xs, ys), Epochs(4), BatchSize(2048), balance="adaptive", rebalance_every=2,
            hysteresis=0.05, shares=[683, 683, 682], verbose=False)
report(check="adaptive_from_equal", shares=r.shares,
       rebalances=[e.to_dict() for e in r.rebalances], decisions=r.decisions,
       identical=identical(s.model))

# ---- declared groups, federated: hierarchical reduction with int8 on its rings, compared with
# the same run uncompressed ("auto" would weigh the codec's cost against these fast links and may
# rightly choose none: tests/python/test_compression_choice.py tests that choice).
accuracy = {}
for compression in (None, "int8"):
    cluster = (ClusterConfig().add_node("fast", DeviceType.CPU, 1)
               .add_node("slow", DeviceType.CPU, 2).enable_federated_scheduling(True)
               .set_compression_threshold(1e9))
    s = Scheduler.with_graph(build(), cluster, optimizer=nx.optim.Adam(lr=1e-3))
    r = s.train("digits", Epochs(15), BatchSize(128), balance="static", compression=compression,
                verbose=False)
    accuracy[str(compression)] = r.accuracy
    report(check=f"federated_{compression}", accuracy=r.accuracy, codecs=r.plan.to_dict()["compression"],
           hierarchical=r.plan.hierarchical, groups=list(r.plan.groups),
           identical=identical(s.model), bytes_sent=dist.last_stats().bytes_sent,
           bytes_uncompressed=dist.last_stats().bytes_uncompressed)

# ---- a declared GPU group on ranks without one is an error naming both
try:
    Scheduler.with_graph(build(), ClusterConfig().add_node("gpu-pool", DeviceType.GPU, 3)).train(
        "digits", 1, 64, verbose=False)
    report(check="gpu_declared", error=None)
except ValueError as e:
    report(check="gpu_declared", error=str(e))
