"""What the user declares about the cluster: device groups (``ClusterConfig``) and kinds
(``DeviceType``), and how the job's ranks map onto them once their profiles are known."""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from .profile import Profile

DEFAULT_COMPRESS_BELOW_GBPS = 1.0  # links slower than this (GB/s) get gradient compression


class DeviceType(enum.Enum):
    """The device class of a group of ranks."""

    GPU = "gpu"
    CPU = "cpu"
    TPU = "tpu"

    @classmethod
    def parse(cls, value) -> "DeviceType":
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).lower())
        except ValueError:
            raise ValueError(f"unknown device type {value!r}; valid: "
                             f"{', '.join(d.name for d in cls)}") from None


@dataclass(frozen=True)
class NodeGroup:
    """``count`` ranks of one device class, called ``name``."""

    name: str
    device: DeviceType
    count: int


class ClusterConfig:
    """The device groups a job is declared to run on, built fluently::

        cluster = (ClusterConfig()
                   .add_node("gpu-pool", DeviceType.GPU, 8)
                   .add_node("cpu-pool", DeviceType.CPU, 4)
                   .enable_federated_scheduling(True))

    Ranks fill the declared groups in rank order, each taking a group of its own device class;
    the declared counts must add up to the job's ranks. ``ClusterConfig.auto()`` declares
    nothing and groups the ranks by the device each one finds (its class and model).

    Federated scheduling treats each group as its own site: gradients are reduced inside each
    group first, then across the group leaders (hierarchical all-reduce), and a slow link
    between leaders gets compression. Without it every rank joins one flat ring.
    """

    def __init__(self):
        self.groups: list[NodeGroup] = []
        self.federated = False
        self.is_auto = False
        self.compress_below_gbps = DEFAULT_COMPRESS_BELOW_GBPS

    @classmethod
    def auto(cls) -> "ClusterConfig":
        """Discovers the job: one group per device class and model found among the ranks,
        federated (hierarchical) when there is more than one."""
        c = cls()
        c.is_auto = True
        c.federated = True
        return c

    @classmethod
    def from_dict(cls, spec: dict) -> "ClusterConfig":
        """From a ``[cluster]`` table: ``auto = true`` or ``[[cluster.group]]`` entries with
        ``name``, ``device`` and ``count``; optional ``federated`` and ``compress_below_gbps``."""
        if not isinstance(spec, dict):
            raise ValueError(f"cluster: expected a table, got {type(spec).__name__}")
        unknown = set(spec) - {"auto", "group", "federated", "compress_below_gbps"}
        if unknown:
            raise ValueError(f"cluster: unknown keys {sorted(unknown)}; valid: auto, group, "
                             "federated, compress_below_gbps")
        groups = spec.get("group", [])
        if spec.get("auto", not groups):
            if groups:
                raise ValueError("cluster: give either auto = true or [[cluster.group]] entries")
            c = cls.auto()
        else:
            c = cls()
            for i, g in enumerate(groups):
                missing = {"name", "device", "count"} - set(g)
                if missing:
                    raise ValueError(f"cluster.group[{i}]: missing {sorted(missing)} (each group "
                                     "needs name, device and count)")
                c.add_node(g["name"], g["device"], g["count"])
        if "federated" in spec:
            c.enable_federated_scheduling(bool(spec["federated"]))
        if "compress_below_gbps" in spec:
            c.set_compression_threshold(spec["compress_below_gbps"])
        return c

    def add_node(self, name: str, device_type, count: int = 1) -> "ClusterConfig":
        """Declares ``count`` ranks of ``device_type`` (a DeviceType or "gpu"/"cpu"/"tpu")."""
        if not isinstance(name, str) or not name:
            raise ValueError(f"add_node: name must be a non-empty string, got {name!r}")
        if any(g.name == name for g in self.groups):
            raise ValueError(f"add_node: a group named {name!r} is already declared")
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"add_node({name!r}): count must be an integer >= 1, got {count!r}")
        self.groups.append(NodeGroup(name, DeviceType.parse(device_type), count))
        self.is_auto = False
        return self

    def enable_federated_scheduling(self, enabled: bool = True) -> "ClusterConfig":
        """Hierarchical reduction (inside groups, then across leaders) with compression on slow
        links between groups; see the class docstring."""
        self.federated = bool(enabled)
        return self

    def set_compression_threshold(self, gbps: float) -> "ClusterConfig":
        """Links measured slower than ``gbps`` GB/s get compression under ``compression="auto"``."""
        if not isinstance(gbps, (int, float)) or isinstance(gbps, bool) or gbps < 0:
            raise ValueError(f"compression threshold must be a number of GB/s >= 0, got {gbps!r}")
        self.compress_below_gbps = float(gbps)
        return self

    @property
    def num_ranks(self) -> int | None:
        return None if self.is_auto else sum(g.count for g in self.groups)

    def assign(self, profiles: Sequence[Profile]) -> list[str]:
        """The group name of every rank, from the ranks' profiles (``device``, ``device_name``).

        Raises ValueError when the declaration cannot run here: a TPU group, a GPU group with no
        GPU among the ranks, or counts that do not match the ranks found, saying what was
        declared and what was found."""
        if self.is_auto:
            return [f"{p.device}:{p.device_name}" for p in profiles]
        found = {d: [p.rank for p in profiles if p.device == d.value] for d in DeviceType}
        declared = ", ".join(f"{g.name} = {g.count} x {g.device.name}" for g in self.groups)
        seen = "; ".join(f"{len(r)} with a {d.name}" for d, r in found.items() if r) or "none"
        if not self.groups:
            raise ValueError("ClusterConfig declares no groups: call add_node(...) or use "
                             "ClusterConfig.auto()")
        for g in self.groups:
            if g.device is DeviceType.TPU:
                raise ValueError(f"cluster group {g.name!r} declares TPU ranks, but Nexus has no "
                                 f"TPU backend (declared: {declared}; found: {seen})")
        if sum(g.count for g in self.groups) != len(profiles):
            raise ValueError(f"the cluster declares {sum(g.count for g in self.groups)} ranks "
                             f"({declared}) but the job has {len(profiles)} ({seen}); launch "
                             f"with mpiexec -n {sum(g.count for g in self.groups)} or change "
                             "the declaration")
        names = [None] * len(profiles)
        for d in DeviceType:
            want = [g for g in self.groups if g.device is d]
            need = sum(g.count for g in want)
            if need != len(found[d]):
                raise ValueError(f"the cluster declares {need} {d.name} ranks ({declared}) but "
                                 f"{len(found[d])} of the job's {len(profiles)} ranks have a "
                                 f"{d.name} (found: {seen})")
            ranks = iter(found[d])
            for g in want:
                for _ in range(g.count):
                    names[next(ranks)] = g.name
        return names

    def __repr__(self) -> str:
        if self.is_auto:
            return "ClusterConfig.auto()"
        groups = ", ".join(f"{g.name}={g.count}x{g.device.name}" for g in self.groups)
        return f"ClusterConfig({groups}, federated={self.federated})"
