"""The heterogeneous scheduler: one training job over unequal ranks (GPU, CPU groups, edge
boxes), each batch split by measured speed.

    from nexus import ClusterConfig, DeviceType, Scheduler, Epochs, BatchSize
    cluster = ClusterConfig().add_node("fast", DeviceType.CPU, 1).add_node("slow", DeviceType.CPU, 2)
    report = Scheduler.with_graph(g, cluster, optimizer=nx.optim.Adam(lr=1e-3)).train(
        "digits", Epochs(10), BatchSize(256))

``nexus train --config run.toml`` runs the same from a file; ``nexus plan cluster.toml`` models a
cluster that is not here (cost_model.py).
"""

from .cluster import ClusterConfig, DeviceType
from .scheduler import BatchSize, Epochs, Report, Scheduler
from .split import equal_split, split_batch

__all__ = ["ClusterConfig", "DeviceType", "Scheduler", "Report", "Epochs", "BatchSize",
           "split_batch", "equal_split"]
