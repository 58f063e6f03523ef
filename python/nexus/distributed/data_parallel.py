"""DataParallel: one compiled model per rank, identical weights, gradients reduced by the ring.

Each step is one native call (``CompiledModel.train_step`` with a ``DataParallelReducer`` from
``nexus._C_mpi``, csrc/comm/data_parallel.h): every rank runs forward and backward on its own
slice of the global batch, the gradients are weighted by the rank's share of the batch's samples
and summed across ranks through buckets, then every rank applies the same fused optimizer update
to the same weights, so weights stay identical bit for bit. Weighting by samples makes the
reduced gradient the full-batch mean gradient even when ranks hold different numbers of rows
(DESIGN decision 7); a rank with no rows this step contributes zeros.

The reduction overlaps backward: the compiled step reports each parameter's gradient as soon as
it is final, and a worker thread reduces each bucket once all of its gradients are in, from the
last bucket to the first, while backward computes the earlier layers. The gradients are weighted
by this rank's samples over the previous step's global count (the same on every rank, known
before backward starts; the first step exchanges the counts first) and rescaled after the step's
counts arrive, if the count changed. Lossy codecs keep an error-feedback residual per bucket.

With ``groups`` (a group label per rank) the reduction is hierarchical. Groups of one size are
sharded: a reduce-scatter inside each group, an all-reduce of each shard among the ranks holding
it in every group (with ``leader_compression``), an all-gather inside each group, so each rank
sends 1/G of the gradient across groups of G. Groups of different sizes go through leaders: a
ring inside each group, then a ring among the group leaders (the lowest rank of each group)
with ``leader_compression``, then each leader broadcasts the result inside its group. Every
step also gathers each rank's
busy seconds into ``last_busy_seconds``: the time from the previous step's reduction (the last
moment the ranks were together) to the end of this step's backward, so it holds the update, the
caller's loop, the data, forward and backward, and on a rank that shares its core, the time the
core spent on the other rank, but not the wait for the others. The scheduler's rebalancing reads
them, with ``last_cpu_seconds``: every rank's process CPU seconds over the same span (busy minus
CPU is the time a rank waited for its core). ``last_phases`` holds this rank's seconds in the
call, forward+backward, the reduction after backward and the counts' exchange. ``lr_scale``
multiplies the optimizer's learning rate (the scheduler's scaling rule).

Ranks on one machine (the flat reduction without a codec) skip the ring: the ranks share one
memory segment (csrc/comm/shared_step.h), each copies its gradient into its slot as backward
makes it final, and each reduces and updates its own 1/N of the parameters in place. The
parameters and the optimizer's moments live in the segment (the parameters move there at the
first such step and back to the rank's own memory when the DataParallel is destroyed), so no rank
copies another's part and every rank's weights and optimizer state are whole. That is 1/N of the
reduction and of the update per rank, where the ring moved the gradient through MPI's buffers in
lock step and every rank ran the whole update. An update outside the step on one rank (the model
trained alone) moves that rank's parameters out first; an in-place write into a parameter while
the DataParallel lives writes every rank's. Arrays taken from a parameter before it moved keep
the values of that time. The first step
of an optimizer with moments runs unsharded (it creates them, as PyTorch does). The reduced
gradient is summed in rank order, so weights stay identical on every rank bit for bit, and
equal the ring's up to rounding. ``shared_memory=False`` keeps the ring; ``dp.shared_memory``
says whether the segment is in use (it is not across machines, or where /dev/shm cannot hold it).
"""

from __future__ import annotations

import time

import numpy as np

from .. import _C, config
from . import _world


class DataParallel:
    """Wraps a compiled ``Model`` for data-parallel training over the world's ranks.

    ``compression``: a codec spec or Codec for the gradients (float32 models); lossy codecs keep
    an error-feedback residual per parameter (one per bucket: its parameters' residuals end to
    end). ``bucket_bytes``: gradients are packed into buckets of about this size (default 4 MiB),
    one ring all-reduce each. ``groups``: a group label per rank for the hierarchical reduction,
    whose cross-group ring uses ``leader_compression``; ``sharded``: None (sharded when the
    groups are of one size), True (a ValueError when they are not) or False (through leaders).
    ``overlap``: reduce while backward runs (MPI at MPI_THREAD_SERIALIZED or above).
    ``shared_memory``: ranks on one machine reduce through a shared segment and shard the
    optimizer update, the parameters living in the segment while this object lives (module
    docstring; ``NEXUS_DP_SHARED_MEMORY=0`` turns it off for every
    DataParallel); ``dp.shared_memory`` says whether they do (False on every rank when any rank
    declines or cannot map the segment). ``nccl``: when every rank's model is on a GPU and NCCL
    loads on every rank (``pip install ".[cuda]"``), the gradients are summed GPU to GPU by
    NCCL after backward (flat reduction, no codec, no host copies; ``NEXUS_NCCL=0`` or
    ``nccl=False`` keeps the host ring); ``dp.nccl`` says whether they are.
    Construction broadcasts parameters and buffers from ``root``. Raises ValueError for a bad
    ``bucket_bytes``, codec, ``groups`` or ``sharded``.

    Example: ``dp = dist.DataParallel(model, compression="int8"); loss = dp.train_step(xb, yb)``.
    """

    def __init__(self, model, compression=None, bucket_bytes: int | None = None, root: int = 0,
                 groups=None, leader_compression=None, overlap: bool = True, sharded: bool | None = None,
                 shared_memory: bool = True, nccl: bool = True):
        self.model = model
        self.compression = _world.codec_spec(compression)
        self.leader_compression = _world.codec_spec(leader_compression)
        self.lr_scale = 1.0  # multiplies the optimizer's learning rate (the scheduler's rule)
        w = _world.world()
        self.rank, self.world_size = w.rank, w.size
        bucket_bytes = 4 << 20 if bucket_bytes is None else bucket_bytes
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise ValueError(f"DataParallel: bucket_bytes must be an integer >= 1, got "
                             f"{bucket_bytes!r}")
        self.bucket_bytes = bucket_bytes
        self._reducer = None
        # The worker thread calls MPI while this one does not: MPI_THREAD_SERIALIZED at least.
        self.overlap = bool(overlap) and w.size > 1 and w.mpi.Query_thread() >= w.mpi.THREAD_SERIALIZED
        if w.size > 1:
            from .. import _C_mpi  # noqa: PLC0415

            group, cross, sharded = _hierarchy(w, groups, sharded) if groups is not None else (None, None, False)
            self._reducer = _C_mpi.DataParallelReducer(
                w.transport, list(model.params.values()), bucket_bytes, self.compression,
                self.leader_compression, self.overlap, group, cross, sharded,
                segment_bytes=_C.comm.MAX_SEGMENT_BYTES, timeout_s=config.comm_timeout(),
                shared_memory=bool(shared_memory), device=model.device, device_collective=bool(nccl))
            for t in [*model.params.values(), *model.buffers.values()]:
                _world.broadcast(t, root=root)
        self.last_samples = 0  # samples of all ranks in the last step
        self.last_busy_seconds = np.zeros(w.size)  # every rank's work in the last step
        self.last_cpu_seconds = np.zeros(w.size)  # every rank's CPU time over its busy seconds
        # this rank's seconds in the last step: the whole call, forward+backward, the
        # reduction after backward (its tail and the wait for slower ranks), the counts' exchange
        self.last_phases = {"call": 0.0, "backward": 0.0, "reduction": 0.0, "counts": 0.0}
        self._synced = None  # when the last step ended, and the CPU time then (a world of one)

    @property
    def shared_memory(self) -> bool:
        """Whether the ranks step through a shared-memory segment (all on one machine, no codec,
        no groups) rather than the ring. False in a world of one."""
        return bool(self._reducer is not None and self._reducer.shared_memory)

    @property
    def nccl(self) -> bool:
        """Whether the gradients are summed on the GPUs by NCCL (every rank's model on a GPU,
        NCCL loaded everywhere) rather than through host copies and the MPI ring."""
        return bool(self._reducer is not None and self._reducer.reduces_on_device)

    @property
    def num_buckets(self) -> int:
        """Buckets the gradients are packed into (0 in a world of one)."""
        return self._reducer.num_buckets if self._reducer is not None else 0

    def train_step(self, x, y) -> float:
        """One data-parallel step on this rank's slice ``(x, y)`` of the global batch (it may be
        empty); returns the global batch's mean loss (the same on every rank). Raises ValueError
        when no rank has any samples."""
        m = self.model
        if self._reducer is None:
            self.last_samples = len(y)
            start, cpu = time.perf_counter(), time.process_time()
            loss = m.train_step(x, y, lr_scale=self.lr_scale)
            now, cpu_now = time.perf_counter(), time.process_time()
            self.last_phases = {"call": now - start, "backward": now - start, "reduction": 0.0, "counts": 0.0}
            synced, synced_cpu = self._synced or (start, cpu)
            self.last_busy_seconds = np.array([now - synced])
            self.last_cpu_seconds = np.array([cpu_now - synced_cpu])
            self._synced = now, cpu_now
            return loss
        # A rank with no rows still joins the step (with zero gradients).
        start = time.perf_counter()
        loss = m.train_step(x, y, reducer=self._reducer, lr_scale=self.lr_scale)
        call = time.perf_counter() - start
        r = self._reducer
        self.last_phases = dict(zip(("backward", "reduction", "counts"), r.last_phases), call=call)
        self.last_samples = r.last_samples
        self.last_busy_seconds = np.array(r.busy_seconds)
        self.last_cpu_seconds = np.array(r.cpu_seconds)
        _world.record_stats(r.last_stats)
        return loss

    def average_buffers(self) -> None:
        """Averages non-trainable buffers (batch-norm running statistics) across ranks."""
        if self._reducer is None:
            return
        for t in self.model.buffers.values():
            if t.dtype.name in _world._FLOATS:
                _world.all_reduce(t, op="mean")


def _hierarchy(w, groups, sharded: bool | None = None) -> tuple:
    """This rank's group's transport (its lowest rank leads), its cross-group transport and
    whether the reduction is sharded. Sharded (the default for groups of one size): the cross
    ring joins the ranks at this rank's position in every group. Through leaders: it joins the
    group leaders, None on the other ranks. None with a single group."""
    from .. import _C_mpi  # noqa: PLC0415

    groups = [str(g) for g in groups]
    if len(groups) != w.size:
        raise ValueError(f"DataParallel: {len(groups)} group labels for {w.size} ranks")
    names = sorted(set(groups), key=groups.index)
    sizes = {name: groups.count(name) for name in names}
    equal = len(set(sizes.values())) == 1
    if sharded is None:
        sharded = equal
    elif sharded and not equal:
        raise ValueError(f"DataParallel: sharded=True needs groups of one size, got {sizes}; "
                         "pass sharded=False (or None) to reduce through the group leaders")
    mine = groups[w.rank]
    group_comm = w.comm.Split(names.index(mine), w.rank)
    if sharded:  # the ranks at this rank's position, one per group, in group order
        cross_comm = w.comm.Split(group_comm.Get_rank(), names.index(mine))
    else:
        is_leader = w.rank == groups.index(mine)
        cross_comm = w.comm.Split(0 if is_leader else w.mpi.UNDEFINED, w.rank)
    joins = len(names) > 1 and cross_comm != w.mpi.COMM_NULL
    cross = _C_mpi.MpiTransport(cross_comm.py2f()) if joins else None
    return _C_mpi.MpiTransport(group_comm.py2f()), cross, bool(sharded)
