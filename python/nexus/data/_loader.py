"""DataLoader: batches gathered by a native background thread, sharded across ranks."""

from __future__ import annotations

import os
from typing import Mapping, Sequence

import numpy as np

from .. import _C
from .. import functional as F


def _even_shares(batch_size: int, world_size: int) -> list[int]:
    base, extra = divmod(batch_size, world_size)
    return [base + (1 if r < extra else 0) for r in range(world_size)]


def _int(name, v, low):
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < low:
        raise ValueError(f"DataLoader: {name} must be an integer >= {low}, got {v!r}")
    return int(v)


class DataLoader:
    """Yields batches of ``arrays`` (one array, a tuple/list or a dict of arrays sharing their
    first dimension), in the same structure.

    A native thread gathers the rows of the next ``prefetch`` batches into buffers while the
    caller works (the GIL is released while it waits); ``prefetch=0`` gathers on demand. Each
    ``iter()`` is one epoch: the order is a shuffle seeded by ``(seed, epoch)``, the same on every
    rank, so with ``rank``/``world_size`` (an even split) or ``shares`` (per-rank micro-batch
    sizes summing to ``batch_size``, e.g. from the scheduler's plan) each rank gets a disjoint
    slice of every global batch, and the slices cover it. A short last batch is split in
    proportion to the shares, or dropped with ``drop_last=True``. Object arrays (strings) are
    gathered in Python.

    ``device=None`` yields numpy arrays. With a device the numeric arrays come as Nexus tensors
    on it (object arrays stay numpy): on ``"cpu"`` sharing the gathered buffers, on a GPU copied
    through pinned memory on a copy stream of its own, the next batch's copy queued before the
    current batch is handed out, so it runs while the step on that batch does (the step's stream
    waits for each batch's copy, and the batch's memory is recorded on it: see
    ``nx.cuda.Stream``). Example::

        for x, y in nx.data.DataLoader((images, labels), 256, device="cuda"):
            loss = model.train_step(x, y)

    Raises:
        ValueError, TypeError, IndexError: a bad argument (the message says which and why).
        RuntimeError: ``device`` is a GPU and CUDA cannot be used here.
    """

    def __init__(self, arrays, batch_size: int, shuffle: bool = True, seed: int = 0,
                 drop_last: bool = False, prefetch: int = 2, rank: int | None = None,
                 world_size: int | None = None, shares: Sequence[int] | None = None, device=None):
        if isinstance(arrays, (str, bytes, os.PathLike)):
            raise TypeError(f"DataLoader takes arrays, not a file ({arrays!r}): read it first with "
                            "nx.data.read_csv, read_jsonl or read_idx")
        if isinstance(arrays, Mapping):
            self._keys, items = list(arrays), list(arrays.values())
        elif isinstance(arrays, (tuple, list)):
            self._keys, items = None, list(arrays)
        else:
            self._keys, items = False, [arrays]
        if not items:
            raise ValueError("DataLoader: no arrays given")
        items = [np.asarray(a) for a in items]
        for a in items:
            if a.ndim == 0:
                raise ValueError("DataLoader: arrays need at least one dimension")
        rows = len(items[0])
        for a in items:
            if len(a) != rows:
                raise ValueError(f"DataLoader: every array needs the same number of rows; "
                                 f"got {rows} and {len(a)}")
        self._items = [a if a.dtype == object else np.ascontiguousarray(a) for a in items]
        self._native = [a for a in self._items if a.dtype != object]
        if not self._native:
            self._native = [np.empty((rows, 0), np.uint8)]
        self._rows = rows
        o = _C.LoaderOptions()
        o.batch_size = _int("batch_size", batch_size, 1)
        o.prefetch = _int("prefetch", prefetch, 0)
        o.shuffle, o.drop_last = bool(shuffle), bool(drop_last)
        o.seed = _int("seed", seed, 0)
        if shares is not None:
            shares = [_int("shares[i]", s, 0) for s in shares]
            if world_size is not None and world_size != len(shares):
                raise ValueError(f"DataLoader: {len(shares)} shares for world_size={world_size}")
            if sum(shares) != o.batch_size:
                raise ValueError(f"DataLoader: shares sum to {sum(shares)} but batch_size is "
                                 f"{o.batch_size}")
        elif world_size is not None:
            shares = _even_shares(o.batch_size, _int("world_size", world_size, 1))
        if shares is not None:
            if rank is None:
                raise ValueError("DataLoader: world_size= or shares= needs rank=")
            if not 0 <= _int("rank", rank, 0) < len(shares):
                raise IndexError(f"DataLoader: rank {rank} out of range for {len(shares)} ranks")
            o.shares, o.rank = shares, int(rank)
        elif rank is not None:
            raise ValueError("DataLoader: rank= needs world_size= or shares=")
        self._options = o
        self._pool = _C.BufferPool()
        self.epoch = 0
        self._device = None if device is None else F._device(device)
        if self._device is not None:
            if self._device.type == "cuda":
                from .. import cuda
                cuda._index(self._device)  # RuntimeError naming what is missing
            for a in self._items:  # a dtype tensors cannot hold raises here, not mid-epoch
                if a.dtype != object:
                    try:
                        F.from_numpy(a[:0])
                    except TypeError as e:
                        raise TypeError(f"DataLoader(device={str(self._device)!r}) yields tensors, and an "
                                        f"array of dtype {a.dtype} cannot be one ({e}); convert it first "
                                        "(e.g. a.astype(np.float32)) or leave device=None for numpy "
                                        "batches") from None

    def __len__(self) -> int:
        return _C.batch_count(self._rows, self._options)

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next iter() uses (its shuffle); it counts up by one per iter()."""
        self.epoch = _int("epoch", epoch, 0)

    def __iter__(self):
        batches = self._host_batches()
        if self._device is None:
            return batches
        if self._device.type == "cpu":
            return (self._map(b, F.from_numpy) for b in batches)
        return self._cuda_batches(batches)

    def _map(self, batch, fn):
        """``batch`` (an array, tuple or dict) with ``fn`` applied to its numeric arrays."""
        def one(a):
            return a if a.dtype == object else fn(a)
        if self._keys is False:
            return one(batch)
        if self._keys is None:
            return tuple(one(a) for a in batch)
        return {k: one(a) for k, a in batch.items()}

    def _cuda_batches(self, batches):
        from .. import cuda
        device, index = self._device, self._device.index
        copy = cuda.Stream(index)

        def stage(batch):  # queue the copies; they run beside whatever the step queues meanwhile
            with cuda.stream(copy):
                moved = self._map(batch, lambda a: F.from_numpy(a).pin_memory().to(device, non_blocking=True))
            return moved, copy.record_event()

        def deliver(moved, event):
            step = cuda.current_stream(index)
            step.wait_event(event)
            self._map(moved, lambda t: t.record_stream(step) if isinstance(t, _C.Tensor) else None)
            return moved

        staged = None
        for batch in batches:
            nxt = stage(batch)
            if staged is not None:
                yield deliver(*staged)
            staged = nxt
        if staged is not None:
            yield deliver(*staged)

    def _host_batches(self):
        producer = _C.BatchProducer(self._native, self._options, self.epoch, self._pool)
        self.epoch += 1
        while (out := producer.next()) is not None:
            buffers, idx = out
            buffers = iter(buffers)
            batch = []
            for a in self._items:
                if a.dtype == object:
                    batch.append(a[idx])
                else:
                    batch.append(next(buffers).view(a.dtype).reshape((len(idx),) + a.shape[1:]))
            if self._keys is False:
                yield batch[0]
            elif self._keys is None:
                yield tuple(batch)
            else:
                yield dict(zip(self._keys, batch))
