"""DataParallel: one compiled model per rank, identical weights, gradients reduced by the ring.

Each step: every rank runs forward and backward on its own slice of the global batch (one native
call), the gradients are weighted by the rank's share of the batch's samples and summed across
ranks through buckets (BucketReducer, C++), then every rank applies the same fused optimizer
update to the same weights, so weights stay identical bit for bit. Weighting by samples makes the
reduced gradient the full-batch mean gradient even when ranks hold different numbers of rows
(DESIGN decision 7); a rank with no rows this step contributes zeros.

The reduction overlaps backward: the compiled step reports each parameter's gradient as soon as
it is final, and a worker thread (OverlapReduction, C++) reduces each bucket once all of its
gradients are in, from the last bucket to the first, while backward computes the earlier layers.
The gradients are weighted by this rank's samples over the previous step's global count (the
same on every rank, known before backward starts; the first step exchanges the counts first) and
rescaled after the step's counts arrive, if the count changed.

With ``groups`` (a group label per rank) the reduction is hierarchical: a ring inside each group,
then a ring among the group leaders (the lowest rank of each group) with ``leader_compression``,
then each leader broadcasts the result inside its group. Every step also gathers each rank's
busy seconds into ``last_busy_seconds``: the time from the previous step's reduction (the last
moment the ranks were together) to this step's, less nothing but the wait for the others, so it
holds the update, the caller's loop, the data, forward and backward, and on a rank that shares
its core, the time the core spent on the other rank. The scheduler's rebalancing reads them.
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
    one ring all-reduce each. Construction broadcasts parameters and buffers from ``root``.
    """

    def __init__(self, model, compression=None, bucket_bytes: int | None = None, root: int = 0,
                 groups=None, leader_compression=None, overlap: bool = True):
        self.model = model
        self.compression = _world.codec_spec(compression)
        self.leader_compression = _world.codec_spec(leader_compression)
        self.lr_scale = 1.0  # multiplies the optimizer's learning rate (the scheduler's rule)
        w = _world._get()
        self.rank, self.world_size = w.rank, w.size
        native = model._native
        bucket_bytes = 4 << 20 if bucket_bytes is None else bucket_bytes
        if isinstance(bucket_bytes, bool) or not isinstance(bucket_bytes, int) or bucket_bytes < 1:
            raise ValueError(f"DataParallel: bucket_bytes must be an integer >= 1, got "
                             f"{bucket_bytes!r}")
        self.bucket_bytes = bucket_bytes
        self._reducer = None
        self._hier = None
        self._guess = None  # the previous step's global sample count
        # The worker thread calls MPI while this one does not: MPI_THREAD_SERIALIZED at least.
        self.overlap = bool(overlap) and groups is None and w.size > 1 and \
            w.mpi.Query_thread() >= w.mpi.THREAD_SERIALIZED
        if w.size > 1:
            from .. import _C_mpi  # noqa: PLC0415

            self._reducer = _C_mpi.BucketReducer(list(native.params), bucket_bytes,
                                                 self.compression)
            if groups is not None:
                self._hier = _Hierarchy(w, groups, list(native.params), bucket_bytes,
                                        self.leader_compression)
            for t in list(native.params) + list(native.buffers):
                _world.broadcast(t, root=root)
        self.last_samples = 0  # samples of all ranks in the last step
        self.last_busy_seconds = np.zeros(w.size)  # every rank's work in the last step
        self._synced = None  # when the last reduction ended (the ranks were together)
        self._zeros = None

    @property
    def num_buckets(self) -> int:
        return self._reducer.num_buckets if self._reducer is not None else 0

    def train_step(self, x, y) -> float:
        """One data-parallel step on this rank's slice ``(x, y)`` of the global batch; returns the
        global batch's mean loss (the same on every rank)."""
        m = self.model
        w = _world._get()
        n = len(y)
        if self._reducer is None:
            self.last_samples = n
            start = time.perf_counter()
            loss = m.train_step(x, y)
            now = time.perf_counter()
            self.last_busy_seconds = np.array([now - (self._synced or start)])
            self._synced = now
            return loss
        from ..model import _as_features, _as_labels  # noqa: PLC0415

        native = m._native
        start = time.perf_counter()
        if self.overlap:
            from .. import _C_mpi  # noqa: PLC0415

            if self._guess is None:  # the first step: every rank must weight by the same count
                first = np.array([float(n)])
                _world._sum_in_place(first, "DataParallel.train_step (first sample counts)")
                self._guess = float(first[0]) or 1.0
            guess = self._guess
            pending = _C_mpi.OverlapReduction(self._reducer, w.transport, n / guess,
                                              _C.comm.MAX_SEGMENT_BYTES, config.comm_timeout())
        if n > 0:
            loss = native.forward_backward(_as_features(x, m._dtype), _as_labels(y),
                                           pending.hook() if self.overlap else None)
            grads = list(native.grads)
        else:
            loss, grads = 0.0, self._zero_grads()
        busy_end = time.perf_counter()
        if self.overlap:
            stats = pending.finish(grads)  # the buckets backward has not already seen reduced
        # Samples, summed loss and busy seconds of all ranks (exact, tiny), then the weighted
        # gradient sum.
        counts = np.zeros(2 + w.size)
        counts[:2] = float(n), float(n) * loss
        counts[2 + w.rank] = busy_end - (self._synced or start)
        _world._sum_in_place(counts, "DataParallel.train_step (sample counts)")
        total = counts[0]
        self.last_busy_seconds = counts[2:]
        if total <= 0:
            raise ValueError("DataParallel.train_step: no rank has any samples in this step")
        if self.overlap:
            if total != guess:  # weighted by samples / guess: make it samples / total
                for g in grads:
                    g.numpy()[...] *= guess / total
            self._guess = total
        elif self._hier is None:
            stats = self._reducer.reduce(w.transport, grads, n / total, 1.0,
                                         _C.comm.MAX_SEGMENT_BYTES, config.comm_timeout())
        else:
            stats = self._hier.reduce(self._reducer, grads, n / total)
        self._synced = time.perf_counter()
        _world._set_stats(stats)
        state = m.optimizer.native_state()
        _C.optim.step(m._opt_config, m.optimizer.lr_at(state.step) * self.lr_scale,
                      list(native.params), grads, state)
        self.last_samples = int(total)
        return float(counts[1] / total)

    def average_buffers(self) -> None:
        """Averages non-trainable buffers (batch-norm running statistics) across ranks."""
        if self._reducer is None:
            return
        for t in self.model._native.buffers:
            if t.dtype.name in _world._FLOATS:
                _world.all_reduce(t, op="mean")

    def _zero_grads(self):
        if self._zeros is None:
            self._zeros = [_C.from_numpy(np.zeros(p.shape, p.dtype.name))
                           for p in self.model._native.params]
        for z in self._zeros:
            z.numpy()[...] = 0
        return self._zeros


class _Hierarchy:
    """Sub-communicators for the hierarchical reduction: this rank's group, and (on leaders)
    the ring of group leaders."""

    def __init__(self, w, groups, params, bucket_bytes: int, leader_codec: str):
        from .. import _C_mpi  # noqa: PLC0415

        groups = [str(g) for g in groups]
        if len(groups) != w.size:
            raise ValueError(f"DataParallel: {len(groups)} group labels for {w.size} ranks")
        names = sorted(set(groups), key=groups.index)
        self.group = groups[w.rank]
        members = [r for r, g in enumerate(groups) if g == self.group]
        self.leader = members[0]
        self.is_leader = w.rank == self.leader
        self.group_size = len(members)
        self._w = w
        self.group_comm = w.comm.Split(names.index(self.group), w.rank)
        self.leader_comm = w.comm.Split(0 if self.is_leader else w.mpi.UNDEFINED, w.rank)
        self.group_ring = _C_mpi.Communicator(self.group_comm.py2f())
        self.leader_ring = None
        self.leader_reducer = None
        if self.is_leader and len(names) > 1:
            self.leader_ring = _C_mpi.Communicator(self.leader_comm.py2f())
            self.leader_reducer = _C_mpi.BucketReducer(params, bucket_bytes, leader_codec)

    def reduce(self, group_reducer, grads, pre_scale: float):
        """Group ring, then leaders' ring, then broadcast in the group; returns the summed
        stats of this rank's stages."""
        timeout = config.comm_timeout()
        seg = _C.comm.MAX_SEGMENT_BYTES
        start = time.perf_counter()
        sent = raw = 0
        if self.group_size > 1:
            s = group_reducer.reduce(self.group_ring, grads, pre_scale, 1.0, seg, timeout)
            sent, raw = sent + s.bytes_sent, raw + s.bytes_uncompressed
            pre_scale = 1.0
        if self.leader_reducer is not None:
            s = self.leader_reducer.reduce(self.leader_ring, grads, pre_scale, 1.0, seg, timeout)
            sent, raw = sent + s.bytes_sent, raw + s.bytes_uncompressed
        if self.group_size > 1:
            for g in grads:
                _world._wait(self.group_comm.Ibcast(_world._buffer(self._w, g), root=0),
                             "DataParallel (broadcast in the group)")
        return _world.Stats(int(sent), int(raw), time.perf_counter() - start)
