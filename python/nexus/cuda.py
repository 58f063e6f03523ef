"""``nx.cuda``: the CUDA devices, as ``torch.cuda``.

The backend is the extension ``nexus._C_cuda``, built when a CUDA toolkit was found at install
time. It loads the NVIDIA driver lazily, so it imports everywhere; on a machine without a driver
or a GPU :func:`is_available` is False and says why in :func:`unavailable_reason`, and any CUDA
tensor raises a RuntimeError with the same reason.

    >>> import nexus as nx
    >>> if nx.cuda.is_available():
    ...     x = nx.ones(4, device="cuda")
"""

from __future__ import annotations

from . import _C

try:  # registers the backend with the core (one per process), whatever the machine has
    from . import _C_cuda as _backend
except ImportError:  # built without a CUDA toolkit
    _backend = None

__all__ = ["is_available", "unavailable_reason", "is_built", "device_count", "synchronize", "memory_stats",
           "empty_cache", "get_device_name", "get_device_capability", "allow_tf32", "set_allow_tf32"]


def is_built() -> bool:
    """True when this installation carries the CUDA backend (nvcc was found at build time)."""
    return _backend is not None


def unavailable_reason() -> str | None:
    """Why CUDA cannot be used here (no build, no driver, no device), or None when it can.

    Example: ``nx.cuda.unavailable_reason()`` -> ``'no NVIDIA driver: ...'`` on a CPU machine.
    """
    if _backend is None:
        return ("this installation of nexus was built without its CUDA backend (no CUDA toolkit "
                "at build time; `nexus info` shows the build); reinstall where nvcc is on PATH")
    ok, reason = _backend.is_available()
    return None if ok else reason


def is_available() -> bool:
    """True when a CUDA device can be used: the backend is built, the driver loads, a GPU is there."""
    return unavailable_reason() is None


def device_count() -> int:
    """The number of CUDA devices (0 without a build, a driver or a device)."""
    return 0 if _backend is None else int(_backend.device_count())


def _index(device) -> int:
    """The ordinal of ``device`` (None, an int, "cuda:N" or an nx.device); RuntimeError when
    CUDA cannot be used, ValueError for a host or malformed device."""
    reason = unavailable_reason()
    if reason is not None:
        raise RuntimeError(f"CUDA is not available: {reason}")
    if device is None:
        return 0
    if isinstance(device, int) and not isinstance(device, bool):
        d = _C.device("cuda", device)
    else:
        d = device if isinstance(device, _C.device) else _C.device(str(device))
    if d.type != "cuda":
        raise ValueError(f"expected a CUDA device, got {d}")
    return d.index


def synchronize(device=None) -> None:
    """Waits until every kernel queued on ``device`` (default cuda:0) has finished."""
    index = _index(device)
    _backend.synchronize(index)


def memory_stats(device=None) -> dict:
    """The caching allocator's counters for ``device``: allocated_bytes, cached_bytes,
    peak_allocated_bytes, hits and misses (as ``torch.cuda.memory_stats``, fewer keys)."""
    index = _index(device)
    return dict(_backend.memory_stats(index))


def empty_cache() -> None:
    """Returns the blocks the caching allocator holds for reuse to the driver."""
    if _backend is not None and is_available():
        _backend.empty_cache()


def allow_tf32() -> bool:
    """Whether float32 matmuls on CUDA may round their inputs to TF32 on tensor cores (off by
    default, as ``torch.backends.cuda.matmul.allow_tf32``; ``NEXUS_CUDA_TF32=1`` turns it on)."""
    return _backend is not None and bool(_backend.allow_tf32())


def set_allow_tf32(on: bool) -> None:
    """Lets float32 matmuls on CUDA use TF32 tensor cores (about 8x the float32 rate on an A100 or
    H100, with a 10-bit mantissa for the inputs), or not. Example: ``nx.cuda.set_allow_tf32(True)``.

    Raises:
        RuntimeError: this installation has no CUDA backend.
    """
    if _backend is None:
        raise RuntimeError(f"CUDA is not available: {unavailable_reason()}")
    _backend.set_allow_tf32(bool(on))


def get_device_name(device=None) -> str:
    """The device's product name, e.g. ``'NVIDIA H200'``."""
    index = _index(device)
    return str(_backend.device_name(index))


def get_device_capability(device=None) -> tuple[int, int]:
    """The device's compute capability (major, minor), e.g. ``(9, 0)``."""
    index = _index(device)
    return tuple(_backend.compute_capability(index))
