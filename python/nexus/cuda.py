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

from contextlib import contextmanager
from typing import Iterator

from . import _C

try:  # registers the backend with the core (one per process), whatever the machine has
    from . import _C_cuda as _backend
except ImportError:  # built without a CUDA toolkit
    _backend = None

__all__ = ["is_available", "unavailable_reason", "is_built", "device_count", "synchronize", "memory_stats",
           "empty_cache", "get_device_name", "get_device_capability", "allow_tf32", "set_allow_tf32",
           "Stream", "Event", "current_stream", "default_stream", "stream"]


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


class Stream:
    """A queue of work on one CUDA device, as ``torch.cuda.Stream``: kernels and copies queued on
    one stream run in order; two streams run side by side unless an :class:`Event` orders them.

    Every thread queues a device's work on its *current* stream, the legacy default stream unless
    ``with nx.cuda.stream(s):`` says otherwise. A new stream does not wait for the default one
    (non-blocking, from a pool of 32 per device that lives as long as the process, as PyTorch's).
    Memory a stream allocates is reused only by work on that stream; a tensor made on one stream
    and used on another needs ``t.record_stream(other)`` (see :meth:`nexus.Tensor.record_stream`).

    Parameters:
        device: the CUDA device (None: ``cuda:0``; an int, ``"cuda:N"`` or an ``nx.device``).

    Raises:
        RuntimeError: CUDA cannot be used here (the reason says what is missing).

    Example::

        copy = nx.cuda.Stream()
        with nx.cuda.stream(copy):
            x = host_batch.pin_memory().to("cuda", non_blocking=True)
        nx.cuda.current_stream().wait_stream(copy)
        x.record_stream(nx.cuda.current_stream())
    """

    def __init__(self, device=None, *, _handle: int | None = None):
        self.device_index = _index(device)
        self.handle = int(_backend.new_stream(self.device_index) if _handle is None else _handle)

    @property
    def device(self) -> _C.device:
        """The stream's device."""
        return _C.device("cuda", self.device_index)

    def synchronize(self) -> None:
        """Waits until all work queued on this stream has finished."""
        _backend.stream_synchronize(self.device_index, self.handle)

    def query(self) -> bool:
        """True when all work queued on this stream has finished."""
        return bool(_backend.stream_query(self.device_index, self.handle))

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Records ``event`` (a new one when None) after the work queued here so far; returns it."""
        event = Event(self.device) if event is None else event
        event.record(self)
        return event

    def wait_event(self, event: "Event") -> None:
        """Work queued on this stream from now on waits for the work ``event`` recorded."""
        event.wait(self)

    def wait_stream(self, other: "Stream") -> None:
        """Work queued on this stream from now on waits for the work queued on ``other`` so far."""
        self.wait_event(other.record_event())

    def __eq__(self, other) -> bool:
        return isinstance(other, Stream) and (self.device_index, self.handle) == (other.device_index, other.handle)

    def __hash__(self) -> int:
        return hash((self.device_index, self.handle))

    def __repr__(self) -> str:
        return f"<nx.cuda.Stream device={self.device} handle={self.handle:#x}>"


class Event:
    """A point in a stream's work, as ``torch.cuda.Event``: recorded on a stream, then waited for
    by the host (:meth:`synchronize`) or by another stream (:meth:`wait`).

    Parameters:
        device: the CUDA device the event belongs to (None: ``cuda:0``).
        enable_timing: allow :meth:`elapsed_time` (off by default; timing costs a little).

    Raises:
        RuntimeError: CUDA cannot be used here.

    Example::

        start, end = nx.cuda.Event(enable_timing=True), nx.cuda.Event(enable_timing=True)
        start.record(); y = x @ x; end.record(); end.synchronize()
        ms = start.elapsed_time(end)
    """

    def __init__(self, device=None, enable_timing: bool = False):
        self.device_index = _index(device)
        self._event = _backend.Event(self.device_index, bool(enable_timing))

    @property
    def device(self) -> _C.device:
        """The event's device."""
        return _C.device("cuda", self.device_index)

    def _stream(self, stream: Stream | None) -> Stream:
        stream = current_stream(self.device_index) if stream is None else stream
        if stream.device_index != self.device_index:
            raise ValueError(f"Event of {self.device} used with a stream of {stream.device}")
        return stream

    def record(self, stream: Stream | None = None) -> None:
        """Marks the work queued so far on ``stream`` (default: the current stream)."""
        self._event.record(self._stream(stream).handle)

    def wait(self, stream: Stream | None = None) -> None:
        """Work queued on ``stream`` (default: the current one) from now on waits for this event."""
        self._event.wait(self._stream(stream).handle)

    def query(self) -> bool:
        """True when the recorded work has finished (or nothing was recorded)."""
        return bool(self._event.query())

    def synchronize(self) -> None:
        """Waits on the host until the recorded work has finished."""
        self._event.synchronize()

    def elapsed_time(self, end: "Event") -> float:
        """Milliseconds between this event and ``end`` (both recorded, both with enable_timing)."""
        return float(self._event.elapsed_ms(end._event))


def current_stream(device=None) -> Stream:
    """The stream this thread queues ``device``'s work on (the default stream unless inside
    ``with nx.cuda.stream(s)``). Raises RuntimeError where CUDA cannot be used."""
    index = _index(device)
    return Stream(index, _handle=_backend.current_stream(index))


def default_stream(device=None) -> Stream:
    """The device's legacy default stream (handle 0), which every thread starts on."""
    return Stream(_index(device), _handle=0)


@contextmanager
def stream(s: Stream | None) -> Iterator[Stream | None]:
    """Makes ``s`` this thread's current stream on its device for the ``with`` block (as
    ``torch.cuda.stream``); ``None`` changes nothing. The previous stream comes back after.

    Example: ``with nx.cuda.stream(nx.cuda.Stream()): y = x * 2`` queues the multiply there.
    """
    if s is None:
        yield s
        return
    if not isinstance(s, Stream):
        raise TypeError(f"nx.cuda.stream expects an nx.cuda.Stream or None, got {type(s).__name__}")
    before = _backend.current_stream(s.device_index)
    _backend.set_current_stream(s.device_index, s.handle)
    try:
        yield s
    finally:
        _backend.set_current_stream(s.device_index, before)
