"""One profile per rank, measured at start and gathered to every rank.

A profile is a plain dict (it travels as JSON): ``rank``, ``host``, ``device`` ("gpu"/"cpu"),
``device_name`` (the GPU's name from nvidia-smi, else the CPU model), ``cores`` (the cores this
process may run on) and ``threads`` (Nexus's intra-op threads), ``gemm_flops`` (measured float32
GEMM FLOP/s with those threads), ``memory_total`` / ``memory_free`` (bytes: the GPU's when there
is one, else the host's), ``gpu`` (nvidia-smi's fields or None), and the link to the next rank in
the ring, ``link_latency_s`` and ``link_bandwidth`` (bytes/s), measured by shifting messages
around the ring (every link busy at once, as in the all-reduce).
"""

from __future__ import annotations

import json
import os
import platform
import shutil
import socket
import subprocess
import time

import numpy as np

from .. import _C

_GEMM_N = 256
_LATENCY_BYTES, _LATENCY_REPS = 8, 20
_BANDWIDTH_BYTES, _BANDWIDTH_REPS = 4 << 20, 4


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


def find_gpu(index: int) -> dict | None:
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
        return {"name": name, "memory_total": int(float(total)) << 20,
                "memory_free": int(float(free)) << 20, "compute_capability": cap,
                "index": index % len(rows), "count": len(rows)}
    except ValueError:
        return None


def measure_gemm_flops(n: int = _GEMM_N, min_seconds: float = 0.05) -> float:
    """Float32 GEMM FLOP/s of Nexus's matmul with this process's threads (median of runs)."""
    rng = np.random.default_rng(0)
    a = _C.from_numpy(rng.standard_normal((n, n), dtype=np.float32))
    b = _C.from_numpy(rng.standard_normal((n, n), dtype=np.float32))
    _C.matmul(a, b)  # warm up: threads, allocator
    times, spent = [], 0.0
    while len(times) < 5 or (spent < min_seconds and len(times) < 200):
        t0 = time.perf_counter()
        _C.matmul(a, b)
        times.append(time.perf_counter() - t0)
        spent += times[-1]
    return 2.0 * n ** 3 / float(np.median(times))


def measure_ring_links(world) -> tuple[float, float]:
    """(latency s, bandwidth bytes/s) of this rank's link to the next rank in the ring: every
    rank sends to rank+1 and receives from rank-1 at once; small messages give the latency,
    4 MiB ones the bandwidth."""
    from ..distributed import _world as W  # noqa: PLC0415

    if world.size == 1:
        return 0.0, float("inf")
    comm = world.comm
    right, left = (world.rank + 1) % world.size, (world.rank - 1) % world.size

    def shift(nbytes: int, reps: int) -> float:
        send, recv = np.ones(nbytes, np.uint8), np.empty(nbytes, np.uint8)
        times = []
        for _ in range(reps + 1):  # the first exchange sets up the connection
            W.barrier()
            t0 = time.perf_counter()
            reqs = [comm.Irecv(recv, source=left, tag=77), comm.Isend(send, dest=right, tag=77)]
            for r in reqs:
                W._wait(r, "the link measurement")
            times.append(time.perf_counter() - t0)
        return float(np.median(times[1:]))

    latency = shift(_LATENCY_BYTES, _LATENCY_REPS)
    big = shift(_BANDWIDTH_BYTES, _BANDWIDTH_REPS)
    return latency, _BANDWIDTH_BYTES / max(big - latency, 1e-9)


def profile_rank(world) -> dict:
    """This rank's profile (see the module docstring)."""
    gpu = find_gpu(local_rank())
    total, free = host_memory()
    latency, bandwidth = measure_ring_links(world)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return {
        "rank": world.rank,
        "host": socket.gethostname(),
        "device": "gpu" if gpu else "cpu",
        "device_name": gpu["name"] if gpu else cpu_model(),
        "cores": cores,
        "threads": _C.get_num_threads(),
        "gemm_flops": measure_gemm_flops(),
        "memory_total": gpu["memory_total"] if gpu else total,
        "memory_free": gpu["memory_free"] if gpu else free,
        "gpu": gpu,
        "link_latency_s": latency,
        "link_bandwidth": bandwidth,
    }


def gather_profiles(world, mine: dict) -> list[dict]:
    """Every rank's profile, in rank order, on every rank."""
    if world.size == 1:
        return [mine]
    from ..distributed import _world as W  # noqa: PLC0415

    raw = np.frombuffer(json.dumps(mine).encode(), np.uint8)
    return [json.loads(part.tobytes()) for part in W.all_gather(raw)]
