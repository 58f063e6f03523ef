"""The process group: MPI's COMM_WORLD through mpi4py, and the collectives on it.

``init()`` imports ``mpi4py.MPI`` (which loads and initialises the MPI library) and only then the
``_C_mpi`` extension, so the process holds one MPI library (DESIGN decision 5). A plain ``python``
process is a world of one. A build without the MPI extension still runs as a world of one and
raises a RuntimeError saying so when launched under mpiexec with more ranks.

Every wait has a timeout (NEXUS_COMM_TIMEOUT seconds): the ring's waits in C++, and the waits on
mpi4py's non-blocking barrier, broadcast and all-gather here; a timeout raises CommError naming
this rank and what it waited for. Under MPI with more than one rank, an uncaught exception on any
rank prints its traceback prefixed with the rank and calls MPI_Abort, so mpiexec ends every rank
with a non-zero exit instead of leaving the others waiting.
"""

from __future__ import annotations

import atexit
import importlib.util
import os
import sys
import time
import traceback
from typing import NamedTuple

import numpy as np

from .. import _C, config

CommError = _C.comm.CommError

# Set by MPI launchers in every rank's environment: MPICH/Hydra, Intel MPI, Open MPI.
_LAUNCHER_SIZE_VARS = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "MPI_LOCALNRANKS")
_ABORT_GRACE_S = 0.5
# The longest sleep between tests of a pending request: it bounds how late a rank that waited
# for slower ones notices they arrived (every step of data-parallel training waits once).
_MAX_PAUSE_S = 2e-4


class Stats(NamedTuple):
    """What the last all-reduce cost on this rank."""

    bytes_sent: int  # on the wire, this rank, after compression
    bytes_uncompressed: int  # what the uncompressed ring would have sent
    seconds: float  # wall time of the call on this rank


class _World:
    def __init__(self):
        self.mpi = None  # the mpi4py.MPI module, when MPI is in use
        self.comm = None  # mpi4py communicator (COMM_WORLD)
        self.transport = None  # _C_mpi.MpiTransport over a duplicate of it
        self.rank, self.size = 0, 1
        self.last = Stats(0, 0, 0.0)


_world: _World | None = None


def _launched_size() -> int:
    for var in _LAUNCHER_SIZE_VARS:
        try:
            return max(1, int(os.environ[var]))
        except (KeyError, ValueError):
            continue
    return 1


def _have_mpi_extension() -> bool:
    return importlib.util.find_spec("nexus._C_mpi") is not None


def init() -> None:
    """Joins the job's process group (MPI COMM_WORLD through mpi4py). Idempotent; every other
    function calls it. A plain ``python`` process is a world of one."""
    global _world
    if _world is not None:
        return
    w = _World()
    if _have_mpi_extension():
        try:
            from mpi4py import MPI  # noqa: PLC0415  (loads and initialises MPI first)
        except ImportError as e:
            raise ImportError(f"nexus.distributed needs mpi4py to reach MPI ({e}); "
                              "pip install mpi4py mpich, or reinstall nexus") from e
        from .. import _C_mpi  # noqa: PLC0415  (links the MPI library mpi4py just loaded)

        w.mpi, w.comm = MPI, MPI.COMM_WORLD
        w.rank, w.size = w.comm.Get_rank(), w.comm.Get_size()
        w.transport = _C_mpi.MpiTransport(w.comm.py2f())
        atexit.register(_release, w)  # runs before mpi4py's MPI_Finalize (registered earlier)
        if w.size > 1:
            sys.excepthook = _abort_on_uncaught
    elif _launched_size() > 1:
        raise RuntimeError(
            f"nexus.distributed: this process was launched as one of {_launched_size()} MPI ranks, "
            "but this build of nexus has no MPI extension (_C_mpi; `nexus info` shows mpi ✗). "
            "Install the mpich and mpi4py wheels and rebuild nexus (pip install .), or build "
            "with -Ccmake.define.NEXUS_MPI=ON to make a missing MPI an error at build time")
    _world = w


def _release(w: _World) -> None:
    w.transport = None


def _abort_on_uncaught(tp, value, tb) -> None:
    w = _world
    rank, size = (w.rank, w.size) if w is not None else ("?", "?")
    lines = "".join(traceback.format_exception(tp, value, tb)).rstrip("\n").splitlines()
    sys.stderr.write("".join(f"[rank {rank}] {line}\n" for line in lines))
    sys.stderr.write(f"nexus.distributed: rank {rank} of {size} raised {tp.__name__}; "
                     "aborting the job (MPI_Abort) so the other ranks do not wait for it\n")
    sys.stderr.flush()
    sys.stdout.flush()
    # The launcher forwards output through pipes and stops reading them once the abort reaches
    # it: give it a moment to pass the traceback on first.
    time.sleep(_ABORT_GRACE_S)
    from .. import _C_mpi  # noqa: PLC0415

    _C_mpi.abort(1)


def world() -> _World:
    """The world this process belongs to, initialized on first use (the package's modules share it)."""
    init()
    return _world


def is_initialized() -> bool:
    return _world is not None


def rank() -> int:
    """This process's rank in the world, 0 .. world_size() - 1."""
    return world().rank


def world_size() -> int:
    """The number of ranks (1 in a plain ``python`` process)."""
    return world().size


def last_stats() -> Stats:
    """Bytes and seconds of this rank's last all-reduce (or data-parallel gradient reduction)."""
    return world().last


def record_stats(s) -> None:
    """Keeps a native reduction's statistics (``bytes_sent``, ``bytes_uncompressed``, ``seconds``) as
    the world's ``last_stats()``."""
    world().last = Stats(int(s.bytes_sent), int(s.bytes_uncompressed), float(s.seconds))


def _wait(req, what: str) -> None:
    """Completes an mpi4py request within NEXUS_COMM_TIMEOUT, else raises CommError."""
    w = _world
    timeout = config.comm_timeout()
    deadline = time.monotonic() + timeout
    pause = 0.0
    while not req.Test():
        if time.monotonic() > deadline:
            raise CommError(f"rank {w.rank} (this rank) timed out after {timeout:g} s in {what}: "
                            f"some of the {w.size} ranks did not join it; they may have failed, "
                            "exited, or be running a different collective (NEXUS_COMM_TIMEOUT)")
        time.sleep(pause)
        pause = min(_MAX_PAUSE_S, pause * 2 or 1e-6)


def _sum_in_place(x: np.ndarray, what: str, op: str = "sum") -> None:
    """Reduces a numpy array over the ranks through MPI (``op``: "sum", "max" or "min"; bool
    arrays take max as "or" and min as "and"), in place, within the timeout."""
    w = _world
    mpi = w.mpi
    if x.dtype == np.bool_:
        mpi_op = {"sum": mpi.SUM, "max": mpi.LOR, "min": mpi.LAND}[op]
    else:
        mpi_op = {"sum": mpi.SUM, "max": mpi.MAX, "min": mpi.MIN}[op]
    _wait(w.comm.Iallreduce(mpi.IN_PLACE, x, op=mpi_op), what)


def barrier() -> None:
    """Returns once every rank has called barrier()."""
    w = world()
    if w.size > 1:
        _wait(w.comm.Ibarrier(), "barrier()")


# ---- buffers ---------------------------------------------------------------------------------
_FLOATS = ("float32", "float64", "float16", "bfloat16")


def _as_tensor(x, op: str):
    """The float tensor to reduce in place (sharing x's memory), or None for an integer or bool
    numpy array (reduced through MPI)."""
    if isinstance(x, np.ndarray):
        if not x.flags.c_contiguous or not x.flags.writeable:
            raise ValueError(f"{op}: works in place, so the array must be writeable and "
                             f"C-contiguous (pass np.ascontiguousarray(x)); got c_contiguous="
                             f"{x.flags.c_contiguous}, writeable={x.flags.writeable}")
        if x.dtype.kind in "iub":
            return None
        if x.dtype.kind != "f" or x.dtype.itemsize not in (2, 4, 8):
            raise TypeError(f"{op}: cannot reduce dtype {x.dtype}; valid: float32, float64, "
                            "float16 (and bfloat16 tensors), or integer/bool arrays")
        return _C.from_numpy(x)
    if isinstance(x, _C.Tensor):
        if x.dtype.name not in _FLOATS:
            raise TypeError(f"{op}: cannot reduce a {x.dtype.name} tensor; valid: "
                            f"{', '.join(_FLOATS)} (integer data: pass a numpy array)")
        if x.numel() and not x.is_contiguous():
            raise ValueError(f"{op}: works in place, so the tensor must be contiguous (use "
                             "t.contiguous() and pass that)")
        return x
    raise TypeError(f"{op}: expected a numpy array or a nexus Tensor, got {type(x).__name__}")


def _buffer(w: _World, x):
    """An mpi4py buffer spec over x's memory (a numpy array, or a contiguous Tensor of any
    dtype, bfloat16 included, as bytes)."""
    if isinstance(x, np.ndarray):
        return x
    if x.device.type != "cpu":  # MPI reads host memory: the callers stage device tensors
        raise ValueError(f"the tensor is on {x.device}: MPI reads host memory (copy it with .cpu())")
    if x.numel() and not x.is_contiguous():
        raise ValueError("the tensor must be contiguous (use t.contiguous() and pass that)")
    return [w.mpi.buffer.fromaddress(x.data_ptr(), x.numel() * x.dtype.itemsize), w.mpi.BYTE]


def codec_spec(compression) -> str:
    """The canonical codec spec of ``compression``: None gives "none", a spec string or a nexus
    Codec its spec ("topk:0.01"). Raises ValueError listing the valid specs for an unknown one,
    TypeError for anything else. Example: ``dist.codec_spec("int8")`` is ``"int8"``."""
    if compression is None:
        return "none"
    if isinstance(compression, _C.comm.Codec):
        return compression.spec
    if isinstance(compression, str):
        return _C.comm.Codec(compression).spec  # raises ValueError listing the valid specs
    raise TypeError(f"compression must be None, a codec spec string such as 'int8' or "
                    f"'topk:0.01', or a nexus Codec; got {type(compression).__name__}")


def all_reduce(x, op: str = "sum", compression=None, residual=None):
    """Reduces ``x`` (a numpy array or nexus Tensor) across ranks, in place; returns ``x``.

    ``op``: "sum", "mean", "max" or "min" (elementwise over the ranks, as torch.distributed's
    ReduceOp.SUM/AVG/MAX/MIN; a nan on any rank wins max and min, as numpy.maximum).
    ``compression``: a codec spec ("none", "fp16", "bf16", "int8", "topk:RATIO", "sign") or a
    Codec, for float32 buffers with "sum" or "mean" (float16/bfloat16 travel in their own format;
    float64, "max" and "min" take "none"). ``residual``: a ``nexus._C.comm.Residual(x.numel())``
    kept by the caller across calls for error feedback. Integer and bool arrays are reduced
    exactly through MPI ("sum", "max", "min"). Every rank must call it with the same size, dtype,
    op and compression. Raises ValueError for an unknown op or codec, TypeError for a dtype the
    op cannot take. Example: ``dist.all_reduce(np.array([rank, -rank]), op="max")`` gives
    ``[n - 1, 0]`` on every rank of n.
    """
    if op not in _C.REDUCTIONS:
        raise ValueError(f"all_reduce: op {op!r} is not one of "
                         f"{', '.join(map(repr, _C.REDUCTIONS))}")
    spec = codec_spec(compression)
    w = world()
    t = _as_tensor(x, "all_reduce")
    if t is None:  # an integer or bool array
        if op == "mean":
            raise TypeError(f"all_reduce: op='mean' needs a floating dtype, got {x.dtype}")
        if w.size > 1:
            _sum_in_place(x, "all_reduce()", op)
        record_stats(Stats(0, 0, 0.0))
        return x
    if t.dtype.name == "float64" and not _C.comm.Codec(spec).lossless:
        raise ValueError(f'all_reduce: codec "{spec}" compresses float32 buffers; a float64 '
                         'buffer takes compression=None ("none")')
    if op in ("max", "min") and not _C.comm.Codec(spec).lossless:
        raise ValueError(f'all_reduce: op="{op}" takes compression=None ("none"), got codec '
                         f'"{spec}": a lossy codec would change which value wins')
    if w.size == 1:
        record_stats(Stats(0, 0, 0.0))
        return x
    from .. import _C_mpi  # noqa: PLC0415

    record_stats(_C_mpi.all_reduce(w.transport, t, op, spec, residual,
                                 _C.comm.MAX_SEGMENT_BYTES, config.comm_timeout()))
    return x


def broadcast(x, root: int = 0):
    """Overwrites ``x`` on every rank with root's ``x`` (in place); returns ``x``. A tensor on a
    CUDA device goes through a host copy (MPI reads host memory)."""
    w = world()
    _check_root(w, root)
    if isinstance(x, np.ndarray) and (not x.flags.c_contiguous or not x.flags.writeable):
        raise ValueError("broadcast: works in place, so the array must be writeable and "
                         "C-contiguous (pass np.ascontiguousarray(x))")
    if not isinstance(x, (np.ndarray, _C.Tensor)):
        raise TypeError(f"broadcast: expected a numpy array or a nexus Tensor, got "
                        f"{type(x).__name__}")
    if w.size > 1:
        _check_same_shape(w, x, "broadcast")
        staged = x.cpu().contiguous() if isinstance(x, _C.Tensor) and x.device.type != "cpu" else x
        _wait(w.comm.Ibcast(_buffer(w, staged), root=root), f"broadcast(root={root})")
        if staged is not x:
            _C.copy_(x, staged)
    return x


def all_gather(x) -> list:
    """Every rank's ``x`` in rank order, as a list of ``world_size()`` new arrays (a Tensor gives
    Tensors), as mpi4py's ``allgather`` and torch.distributed's ``all_gather``.

    ``x``: a numpy array or nexus Tensor; the ranks' arrays may differ in shape but must agree in
    the number of dimensions and the dtype (ValueError otherwise). Element r of the result has
    rank r's shape: with a (2, 3) array on every rank of 4, the result is four (2, 3) arrays
    (``np.concatenate(parts)`` makes one (8, 3) array). Example:
    ``dist.all_gather(np.array([dist.rank()]))`` gives ``[array([0]), array([1]), ...]``.
    """
    w = world()
    is_tensor = isinstance(x, _C.Tensor)
    if is_tensor:
        if x.device.type != "cpu":  # gathered on the host (MPI reads host memory), returned on x's device
            return [_C.to_device(p, x.device) for p in all_gather(x.cpu())]
        if x.dtype.name == "bfloat16":
            return [_C.astype(_C.from_numpy(p), x.dtype.code)
                    for p in all_gather(x.astype("float32").numpy())]
        a = np.ascontiguousarray(x.numpy()).reshape(x.shape)
    elif isinstance(x, np.ndarray):
        a = np.ascontiguousarray(x).reshape(x.shape)
    else:
        raise TypeError(f"all_gather: expected a numpy array or a nexus Tensor, got "
                        f"{type(x).__name__}")
    if w.size == 1:
        parts = [a.copy()]
    else:
        shapes = _gather_meta(w, a)
        for r, s in enumerate(shapes):
            if s[-1] != a.dtype.num:
                raise ValueError(f"all_gather: rank {r} has dtype number {s[-1]}, rank {w.rank} "
                                 f"(this rank) {a.dtype} (number {a.dtype.num}); the dtypes "
                                 "must agree")
        counts = [int(np.prod(s[:-1], dtype=np.int64)) for s in shapes]
        flat = np.empty(sum(counts), a.dtype)
        _wait(w.comm.Iallgatherv(a.reshape(-1), [flat, counts]), "all_gather()")
        starts = np.cumsum([0] + counts)
        parts = [flat[starts[r]:starts[r + 1]].reshape(s[:-1]) for r, s in enumerate(shapes)]
    return [_C.from_numpy(p) for p in parts] if is_tensor else parts


def ring_shift(send: np.ndarray, recv: np.ndarray) -> None:
    """Sends ``send`` to the next rank in the ring (rank + 1) while receiving ``recv`` from the
    previous one (rank - 1), every rank at once: each link of the ring carries one message, as in
    a step of the ring all-reduce (the scheduler measures its links with it).

    ``send`` and ``recv``: contiguous numpy arrays of the same size on every rank. A world of one
    copies ``send`` into ``recv``. Raises CommError when a neighbour does not take part within
    NEXUS_COMM_TIMEOUT. Example: ``dist.ring_shift(np.ones(8, np.uint8), np.empty(8, np.uint8))``.
    """
    w = world()
    if w.size == 1:
        np.copyto(recv, send)
        return
    right, left = (w.rank + 1) % w.size, (w.rank - 1) % w.size
    for req in (w.comm.Irecv(recv, source=left, tag=77), w.comm.Isend(send, dest=right, tag=77)):
        _wait(req, "ring_shift()")


def _gather_meta(w: _World, a: np.ndarray) -> list[tuple]:
    """Every rank's (shape..., dtype code); the ndim must agree first."""
    ndims = np.zeros(w.size, np.int64)
    _wait(w.comm.Iallgather(np.array([a.ndim], np.int64), ndims), "all_gather() (shapes)")
    if len(set(ndims.tolist())) != 1:
        raise ValueError(f"all_gather: the ranks' arrays have {ndims.tolist()} dimensions "
                         "(by rank); they must agree")
    mine = np.array(list(a.shape) + [a.dtype.num], np.int64)
    every = np.zeros((w.size, len(mine)), np.int64)
    _wait(w.comm.Iallgather(mine, every), "all_gather() (shapes)")
    return [tuple(int(v) for v in row) for row in every]


def _check_root(w: _World, root) -> None:
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < w.size:
        raise ValueError(f"root must be a rank in 0..{w.size - 1}, got {root!r}")


def _check_same_shape(w: _World, x, op: str) -> None:
    a = np.array([_numel(x), _itemsize(x)], np.int64)
    every = np.zeros((w.size, 2), np.int64)
    _wait(w.comm.Iallgather(a, every), f"{op}() (sizes)")
    bad = [r for r in range(w.size) if (every[r] != every[0]).any()]
    if bad:
        raise ValueError(f"{op}: ranks disagree on the buffer: (elements, itemsize) by rank "
                         f"{[tuple(map(int, e)) for e in every]}")


def _itemsize(x) -> int:
    return x.itemsize if isinstance(x, np.ndarray) else x.dtype.itemsize


def _numel(x) -> int:
    return x.size if isinstance(x, np.ndarray) else x.numel()
