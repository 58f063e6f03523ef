"""One ``Profile`` per rank, measured at start and gathered to every rank (as JSON).

The link to the next rank in the ring is measured by shifting messages around the ring (every
link busy at once, as in the all-reduce).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import time
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .. import _C

_GEMM_N = 256
_GPU_GEMM_N = 4096  # a GPU needs a product this large to run near its rate
_LATENCY_BYTES, _LATENCY_REPS = 8, 20
_BANDWIDTH_BYTES, _BANDWIDTH_REPS = 4 << 20, 4
DEVICE_KINDS = ("gpu", "cpu")


@dataclass(frozen=True)
class Gpu:
    """One NVIDIA GPU as nvidia-smi reports it: ``index`` of ``count`` visible GPUs, its memory
    in bytes and its compute capability ("8.0").

    Raises:
        ValueError: a negative memory size, or an index outside ``0 .. count - 1``.

    Example:
        >>> Gpu("A100", memory_total=80 << 30, memory_free=79 << 30, compute_capability="8.0",
        ...     index=0, count=1).name
        'A100'
    """

    name: str
    memory_total: int
    memory_free: int
    compute_capability: str
    index: int
    count: int

    def __post_init__(self):
        if min(self.memory_total, self.memory_free) < 0:
            raise ValueError(f"Gpu {self.name!r}: memory sizes must be >= 0 bytes, got "
                             f"total={self.memory_total}, free={self.memory_free}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"Gpu {self.name!r}: index {self.index} is not one of the "
                             f"{self.count} visible GPUs")


@dataclass(frozen=True)
class Profile:
    """What one rank measured about itself at start.

    ``device`` is "gpu" or "cpu" and ``device_name`` the GPU's name, else the CPU model;
    ``cores`` are the cores this process may run on (``cpus``: their ids, the affinity; empty
    where unknown) and ``threads`` Nexus's intra-op threads;
    ``gemm_flops`` the measured float32 GEMM FLOP/s with those threads; ``memory_total`` /
    ``memory_free`` are bytes (the GPU's when there is one, else the host's); ``gpu`` is
    nvidia-smi's view or None; ``link_latency_s`` and ``link_bandwidth`` (bytes/s, inf in a world
    of one) describe the link to the next rank in the ring. ``to_dict`` / ``from_dict`` are the
    JSON form the ranks exchange and the log records.

    Raises:
        ValueError: a negative rank, an unknown device kind, or a measurement that is not a
            positive (latency, memory: non-negative) number, naming the field.

    Example:
        >>> p = Profile(rank=0, host="n1", device="cpu", device_name="EPYC", cores=2, threads=2,
        ...             gemm_flops=1e11, memory_total=8 << 30, memory_free=4 << 30)
        >>> Profile.from_dict(p.to_dict()) == p
        True
    """

    rank: int
    host: str
    device: str
    device_name: str
    cores: int
    threads: int
    gemm_flops: float
    memory_total: int
    memory_free: int
    gpu: Gpu | None = None
    link_latency_s: float = 0.0
    link_bandwidth: float = float("inf")
    cpus: tuple[int, ...] = ()  # the CPU ids this process may run on (empty: unknown)

    def __post_init__(self):
        object.__setattr__(self, "cpus", tuple(int(c) for c in self.cpus))
        if self.rank < 0:
            raise ValueError(f"Profile: rank must be >= 0, got {self.rank}")
        if self.device not in DEVICE_KINDS:
            raise ValueError(f"Profile of rank {self.rank}: unknown device {self.device!r}; "
                             f"valid: {', '.join(DEVICE_KINDS)}")
        for name in ("cores", "threads", "gemm_flops", "link_bandwidth"):
            if not getattr(self, name) > 0:
                raise ValueError(f"Profile of rank {self.rank}: {name} must be > 0, got "
                                 f"{getattr(self, name)!r}")
        for name in ("memory_total", "memory_free", "link_latency_s"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"Profile of rank {self.rank}: {name} must be >= 0, got "
                                 f"{getattr(self, name)!r}")

    def to_dict(self) -> dict[str, Any]:
        """The profile as plain JSON-able data (``gpu`` a nested dict or None)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Profile:
        """The profile ``to_dict`` wrote.

        Raises:
            ValueError: a missing or unknown field (naming it and the valid ones), or a value
                ``Profile`` refuses.
        """
        unknown = sorted(set(data) - set(cls.__dataclass_fields__))
        if unknown:
            raise ValueError(f"Profile.from_dict: unknown fields {unknown}; valid: "
                             f"{', '.join(cls.__dataclass_fields__)}")
        gpu = data.get("gpu")
        try:
            return cls(**{**data, "gpu": None if gpu is None else Gpu(**gpu)})
        except TypeError as e:  # a missing field
            raise ValueError(f"Profile.from_dict: {e}") from None


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def host_memory() -> tuple[int, int]:
    """(total, available) bytes of host memory."""
    info = {}
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if "MemTotal" in info:
        return info["MemTotal"], info.get("MemAvailable", info.get("MemFree", 0))
    pages, size = os.sysconf("SC_PHYS_PAGES"), os.sysconf("SC_PAGE_SIZE")
    return pages * size, os.sysconf("SC_AVPHYS_PAGES") * size


def local_rank() -> int:
    for var in ("MPI_LOCALRANKID", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"):
        if var in os.environ:
            try:
                return int(os.environ[var])
            except ValueError:
                pass
    return 0


def find_gpu(index: int) -> Gpu | None:
    """The ``index``-th visible NVIDIA GPU's name and memory (nvidia-smi), or None."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run([smi, "--query-gpu=name,memory.total,memory.free,compute_cap",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True,
                             timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = [[c.strip() for c in line.split(",")] for line in out.splitlines() if line.strip()]
    if not rows:
        return None
    name, total, free, cap = (rows[index % len(rows)] + ["", "", "", ""])[:4]
    try:
        return Gpu(name, int(float(total)) << 20, int(float(free)) << 20, cap,
                   index % len(rows), len(rows))
    except ValueError:
        return None


def rank_device() -> str | None:
    """The CUDA device this rank computes on (its local rank over the visible GPUs, round
    robin, as ``cuda:N``), or None where Nexus cannot use CUDA (no build, driver or GPU)."""
    from .. import cuda  # noqa: PLC0415

    return f"cuda:{local_rank() % cuda.device_count()}" if cuda.is_available() else None


def measure_gemm_flops(n: int | None = None, min_seconds: float = 0.05, device: str | None = None) -> float:
    """Float32 GEMM FLOP/s of Nexus's matmul where this rank computes: with this process's
    threads on the host, or on ``device`` (a CUDA device: a larger product, each run ended by a
    synchronize). The median of runs.

    Example: ``measure_gemm_flops()`` is about 1e11 on two modern cores.
    """
    from .. import cuda  # noqa: PLC0415

    n = n or (_GPU_GEMM_N if device else _GEMM_N)
    rng = np.random.default_rng(0)
    a = _C.from_numpy(rng.standard_normal((n, n), dtype=np.float32))
    b = _C.from_numpy(rng.standard_normal((n, n), dtype=np.float32))
    sync = (lambda: None) if device is None else (lambda: cuda.synchronize(device))
    if device is not None:
        a, b = _C.to_device(a, _C.device(device)), _C.to_device(b, _C.device(device))
    _C.matmul(a, b)  # warm up: threads, allocator, cuBLAS
    sync()
    times, spent = [], 0.0
    while len(times) < 5 or (spent < min_seconds and len(times) < 200):
        t0 = time.perf_counter()
        _C.matmul(a, b)
        sync()
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return 2.0 * n ** 3 / float(np.median(times))


def measure_ring_links() -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of this rank's link to the next rank in the ring: every
    rank sends to rank+1 and receives from rank-1 at once; small messages give the latency,
    4 MiB ones the bandwidth."""
    from .. import distributed as dist  # noqa: PLC0415

    if dist.world_size() == 1:
        return 0.0, float("inf")

    def shift(nbytes: int, reps: int) -> float:
        send, recv = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        times = []
        for _ in range(reps + 1):  # the first exchange sets up the connection
            dist.barrier()
            t0 = time.perf_counter()
            dist.ring_shift(send, recv)
            times.append(time.perf_counter() - t0)
        return float(np.median(times[1:]))

    latency = shift(_LATENCY_BYTES, _LATENCY_REPS)
    big = shift(_BANDWIDTH_BYTES, _BANDWIDTH_REPS)
    return latency, _BANDWIDTH_BYTES / max(big - latency, 1e-9)


def profile_rank() -> Profile:
    """This rank's profile, measured now (every rank calls it at once: the link measurement
    exchanges messages around the ring)."""
    from .. import distributed as dist  # noqa: PLC0415

    gpu = find_gpu(local_rank())
    device = rank_device() if gpu else None  # the GPU this rank computes on, when Nexus can use it
    total, free = host_memory()
    latency, bandwidth = measure_ring_links()
    try:
        cpus = tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:
        cpus = ()
    cores = len(cpus) or os.cpu_count() or 1
    return Profile(
        rank=dist.rank(), host=socket.gethostname(), device="gpu" if gpu else "cpu",
        device_name=gpu.name if gpu else cpu_model(), cores=cores,
        threads=_C.get_num_threads(), gemm_flops=measure_gemm_flops(device=device),
        memory_total=gpu.memory_total if gpu else total,
        memory_free=gpu.memory_free if gpu else free, gpu=gpu, link_latency_s=latency,
        link_bandwidth=bandwidth, cpus=cpus)


def sharing_groups(profiles: list[Profile]) -> list[int]:
    """A label per rank (the lowest rank of its group): ranks on one host whose CPU sets
    overlap, directly or through another rank, compete for the same cores and share a label;
    a rank whose CPU set is unknown is alone. The scheduler measures such ranks' speed at the
    contention they meet together, not each alone (see ``balance.Readings``).

        >>> p = [Profile(rank=r, host="n1", device="cpu", device_name="x", cores=1, threads=1,
        ...              gemm_flops=1e9, memory_total=0, memory_free=0, cpus=c)
        ...      for r, c in enumerate([(0,), (1,), (1,)])]
        >>> sharing_groups(p)
        [0, 1, 1]
    """
    label = list(range(len(profiles)))

    def root(r):
        while label[r] != r:
            r = label[r]
        return r

    for a, pa in enumerate(profiles):
        for b in range(a + 1, len(profiles)):
            pb = profiles[b]
            if pa.host == pb.host and set(pa.cpus) & set(pb.cpus):
                ra, rb = root(a), root(b)
                label[max(ra, rb)] = min(ra, rb)
    return [root(r) for r in range(len(profiles))]


def gather_profiles(mine: Profile) -> list[Profile]:
    """Every rank's profile, in rank order, on every rank."""
    from .. import distributed as dist  # noqa: PLC0415

    if dist.world_size() == 1:
        return [mine]
    raw = np.frombuffer(json.dumps(mine.to_dict()).encode(), np.uint8)
    return [Profile.from_dict(json.loads(part.tobytes())) for part in dist.all_gather(raw)]
