"""The heterogeneous scheduler: one training job over unequal ranks (GPU, CPU groups, edge
boxes), each batch split by measured speed.

    from nexus import ClusterConfig, DeviceType, Scheduler, Epochs, BatchSize
    cluster = ClusterConfig().add_node("fast", DeviceType.CPU, 1).add_node("slow", DeviceType.CPU, 2)
    report = Scheduler.with_graph(g, cluster, optimizer=nx.optim.Adam(lr=1e-3)).train(
        "digits", Epochs(10), BatchSize(256))

The records it keeps are typed: a ``Profile`` per rank, the ``Plan`` (with its ``Split`` and
``Compression``) and every ``Rebalance``. ``nexus train --config run.toml`` runs the same from a
file; ``nexus plan cluster.toml`` models a cluster that is not here (cost_model.py).
"""

from .cluster import ClusterConfig, DeviceType
from .plan import Compression, Plan, Rebalance
from .profile import Profile
from .scheduler import BatchSize, Epochs, Report, Scheduler
from .split import Split, equal_split, split_batch

__all__ = ["ClusterConfig", "DeviceType", "Scheduler", "Report", "Epochs", "BatchSize",
           "Profile", "Plan", "Split", "Compression", "Rebalance", "split_batch", "equal_split"]
