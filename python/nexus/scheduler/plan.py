"""The Plan a training job starts from, and the Rebalances that change its Split later.

``Scheduler.train`` builds one ``Plan`` from the ranks' profiles and probes: which device group
each rank is in, how the batch is split, which codec each ring uses and how the learning rate is
scaled. Rank 0 prints it (``Plan.render``) and logs it (``Plan.to_dict``, the JSON form).
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from .profile import Profile
from .split import Split
from .table import format_table

AUTO_CODEC = "int8"  # what compression="auto" puts on a slow link without codec costs to go by
AUTO_CODECS = ("fp16", "bf16", "int8")  # what "auto" chooses from (lossy, but not sparse)
# The 1-bit and sparse codecs "auto" also weighs when it knows the step's compute time, with the
# steps each needs to reach the accuracy the dense codecs reach in one. Measured on digits
# (benchmarks/slowlink.py, two seedings): top-k:0.01 needed 27 and 24 epochs, sign 24 and 27,
# where none, fp16 and int8 needed 13 and 17; the larger ratio, rounded up. A prior from one
# model: they pay where the link, not the compute, sets the step time.
AUTO_SPARSE_CODECS = {"sign": 1.9, "topk:0.01": 2.1}
AUTO_MIN_GAIN = 0.10  # "auto" compresses only when the reduction gets at least this much faster
BALANCES = ("adaptive", "static", "equal")


@dataclass(frozen=True)
class Compression:
    """The codec spec of the flat (or in-group) ring and of the group leaders' ring, and why.

    Example:
        >>> Compression("none", "int8", "slowest link 0.50 GB/s < 1 GB/s").leaders
        'int8'
    """

    ring: str
    leaders: str
    reason: str
    warning: str = ""  # an explicit codec predicted to slow the reduction: both numbers

    @classmethod
    def choose(cls, compression, profiles: Sequence[Profile], groups: Sequence[str],
               hierarchical: bool, below_gbps: float, grad_bytes: float | None = None,
               codec_costs: dict[str, float] | None = None,
               compute_seconds: float | None = None) -> Compression:
        """The codecs for ``compression``: None or a codec spec applies as requested; "auto"
        considers the links measured slower than ``below_gbps`` GB/s (the links that cross from
        one group to the next when ``hierarchical``, every link otherwise) and, given the
        gradient's size and each codec's measured encode+decode cost (``codec_costs``: seconds
        per float32 byte, the slowest rank's), picks the codec of ``AUTO_CODECS`` whose ring is
        predicted fastest (``ring_seconds``), if it beats no codec by ``AUTO_MIN_GAIN``; without
        costs, ``AUTO_CODEC``. Given also ``compute_seconds`` (a step's forward, backward and
        update on the slowest rank), it compares predicted time to accuracy instead, (compute +
        ring) x the steps a codec needs, and weighs ``AUTO_SPARSE_CODECS`` too (those in
        ``codec_costs``). An explicit codec predicted to slow the ring gets a ``warning``
        naming both times.

        Raises:
            ValueError, TypeError: an unknown codec spec (listing the valid ones).
        """
        n = len(profiles)
        if hierarchical:
            crossing = [p for r, p in enumerate(profiles) if groups[r] != groups[(r + 1) % n]]
        else:
            crossing = list(profiles) if n > 1 else []
        links = [p.link_bandwidth for p in crossing]
        ring_ranks = len(links)
        costed = bool(links) and grad_bytes is not None and codec_costs is not None
        latency = max((p.link_latency_s for p in crossing), default=0.0)

        def seconds(spec: str) -> float:
            return ring_seconds(grad_bytes, ring_ranks, min(links), spec, codec_costs, latency)

        if compression != "auto":
            from .. import distributed as dist  # noqa: PLC0415

            spec = dist.codec_spec(compression)
            warning = ""
            if costed and spec != "none" and spec in codec_costs and seconds(spec) > seconds("none"):
                warning = (f"compression={spec!r} is predicted to slow each gradient reduction: "
                           f"{seconds(spec) * 1e3:.3g} ms with it (encoding and decoding included) "
                           f"vs {seconds('none') * 1e3:.3g} ms without, on a slowest link of "
                           f"{min(links) / 1e9:.2f} GB/s")
            return cls(spec, spec, "as requested", warning)
        slow = [b for b in links if b < below_gbps * 1e9]
        why = (f"slowest link {min(links) / 1e9:.2f} GB/s {'<' if slow else '>='} "
               f"{below_gbps:g} GB/s") if links else "no links"
        codec = AUTO_CODEC if slow else "none"
        if slow and costed:
            # without the compute time, the reduction alone; with it, a step's worth of training
            compute = compute_seconds or 0.0
            steps = {c: 1.0 for c in AUTO_CODECS}
            if compute_seconds is not None and not hierarchical:
                steps |= AUTO_SPARSE_CODECS
            options = {c: k * (compute + seconds(c)) for c, k in steps.items() if c in codec_costs}
            best = min(options, key=options.get)
            plain = compute + seconds("none")
            gain = f"{options[best] * 1e3:.3g} ms vs {plain * 1e3:.3g} ms uncompressed per " + (
                "reduction" if compute_seconds is None else
                f"step's worth of training ({steps[best]:g} steps of {compute * 1e3:.3g} ms compute + "
                f"{seconds(best) * 1e3:.3g} ms reduction)")
            if options[best] <= (1 - AUTO_MIN_GAIN) * plain:
                codec, why = best, f"{why}; {best}: {gain}"
            else:
                codec, why = "none", f"{why}, but the best codec ({best}) would not pay: {gain}"
        return cls("none" if hierarchical else codec, codec, why)


def codec_ratio(spec: str) -> float:
    """The bytes a codec sends per float32 byte of a large buffer (1 for "none")."""
    from .. import _C  # noqa: PLC0415

    n = 1 << 20
    return _C.comm.Codec(spec).max_encoded_bytes(n) / (4 * n)


def ring_seconds(grad_bytes: float, ranks: int, bandwidth: float, spec: str,
                 codec_costs: dict[str, float], latency: float = 0.0) -> float:
    """The predicted time of one ring all-reduce of ``grad_bytes`` (float32) over ``ranks``
    ranks whose slowest link carries ``bandwidth`` bytes/s and takes ``latency`` seconds per
    message: each rank sends and receives 2(ranks-1)/ranks of the buffer, compressed by the
    codec, in 2(ranks-1) steps (top-k, an all-gather: ranks-1), and encodes and decodes as much
    (``codec_costs[spec]`` seconds per byte; "none" costs nothing).

    Example:
        >>> ring_seconds(4e6, 2, 1e9, "none", {})  # 4 MB over 1 GB/s
        0.004
    """
    if ranks < 2:
        return 0.0
    moved = 2 * (ranks - 1) / ranks * grad_bytes
    hops = (ranks - 1) * (1 if spec.startswith("topk:") else 2)
    if spec == "none":
        return moved / bandwidth + hops * latency
    return moved * (codec_ratio(spec) / bandwidth + codec_costs[spec]) + hops * latency


def measure_codec_costs(specs=AUTO_CODECS, floats: int = 1 << 20, repeats: int = 3) -> dict[str, float]:
    """Each codec's encode+decode time on this rank, in seconds per float32 byte (the best of
    ``repeats`` runs over ``floats`` values, through the Python binding).

    Example:
        >>> measure_codec_costs(["int8"])["int8"] > 0
        True
    """
    from .. import _C  # noqa: PLC0415

    x = np.random.default_rng(0).standard_normal(floats).astype(np.float32)
    decoded = np.empty_like(x)
    out = {}
    for spec in specs:
        codec, best = _C.comm.Codec(spec), math.inf
        wire = np.empty(codec.max_encoded_bytes(floats), np.uint8)
        for _ in range(repeats):
            t0 = time.perf_counter()  # into preallocated buffers, as the ring encodes and decodes
            codec.decode(wire[: codec.encode(x, out=wire)], floats, out=decoded)
            best = min(best, time.perf_counter() - t0)
        out[spec] = best / x.nbytes
    return out


@dataclass(frozen=True)
class Plan:
    """What a training job starts from; the same on every rank.

    ``batch`` is the global batch that trains (``requested_batch`` unless the ranks' memory
    cannot hold it); ``groups`` names each rank's device group; ``hierarchical``: gradients are
    reduced inside groups, then across their leaders; ``probe_rates`` are the ranks' samples/s
    measured with the model, ``bytes_per_sample`` the activation memory a sample takes in a
    step (planned by the model), ``caps`` the most samples each rank's memory holds and ``split`` the
    first Split; ``predicted_speedup_vs_equal`` is the equal split's step time over this one's at
    the probe rates.

    Raises:
        ValueError: a per-rank field whose length is not ``world_size``, a split that does not
            sum to ``batch``, an unknown ``balance`` or a learning-rate scale that is not > 0.
    """

    world_size: int
    batch: int
    requested_batch: int
    balance: str
    groups: tuple[str, ...]
    hierarchical: bool
    compression: Compression
    lr_scale: float
    probe_rates: tuple[float, ...]
    bytes_per_sample: float
    caps: tuple[int, ...]
    split: Split
    profiles: tuple[Profile, ...]
    predicted_speedup_vs_equal: float

    def __post_init__(self):
        for name in ("groups", "probe_rates", "caps", "split", "profiles"):
            if len(getattr(self, name)) != self.world_size:
                raise ValueError(f"Plan: {name} has {len(getattr(self, name))} entries for "
                                 f"{self.world_size} ranks; give one per rank")
        if self.split.batch != self.batch:
            raise ValueError(f"Plan: the split {list(self.split)} sums to {self.split.batch}, "
                             f"not the batch {self.batch}")
        if self.balance not in BALANCES:
            raise ValueError(f"Plan: unknown balance {self.balance!r}; valid: "
                             f"{', '.join(BALANCES)}")
        if not (self.lr_scale > 0 and self.bytes_per_sample > 0):
            raise ValueError(f"Plan: lr_scale and bytes_per_sample must be > 0, got "
                             f"{self.lr_scale!r} and {self.bytes_per_sample!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the log records (``split`` as ``shares``, a list)."""
        out = {name: getattr(self, name) for name in self.__dataclass_fields__}
        out.update(groups=list(self.groups), compression=asdict(self.compression),
                   probe_rates=list(self.probe_rates), caps=list(self.caps),
                   profiles=[p.to_dict() for p in self.profiles])
        out["shares"] = list(out.pop("split"))
        return out

    def render(self) -> str:
        """The plan table rank 0 prints at start."""
        rows = []
        for r, p in enumerate(self.profiles):
            link = "-" if math.isinf(p.link_bandwidth) else round(p.link_bandwidth / 1e9, 2)
            rows.append([r, p.host, self.groups[r], p.device, p.device_name[:24], p.threads,
                         round(p.gemm_flops / 1e9, 1), round(p.memory_free / 2**30, 1), link,
                         round(p.link_latency_s * 1e6, 1), round(self.probe_rates[r]),
                         self.caps[r], self.split[r]])
        table = format_table(["rank", "host", "group", "kind", "device", "thr", "GEMM GF/s",
                              "free GiB", "link GB/s", "lat us", "probe/s", "cap", "share"], rows,
                             title="nexus scheduler plan (measured on this job)")
        mode = "hierarchical (groups, then leaders)" if self.hierarchical else "flat ring"
        c = self.compression
        return (f"{table}\nbatch {self.batch} (requested {self.requested_batch}), balance "
                f"{self.balance}, reduction {mode}, compression ring={c.ring} "
                f"leaders={c.leaders} ({c.reason}), lr x{self.lr_scale:.3g}, predicted "
                f"{self.predicted_speedup_vs_equal:.2f}x the equal split's step")


@dataclass(frozen=True)
class Rebalance:
    """A change of Split at ``step``, from ``old`` to ``new``, predicted to make a step
    ``predicted_speedup`` times faster at the smoothed per-rank ``rates`` (samples/s).

    Raises:
        ValueError: splits over different ranks or batches, or a speed-up that is not > 1.
    """

    step: int
    old: Split
    new: Split
    predicted_speedup: float
    rates: tuple[float, ...]

    def __post_init__(self):
        if len(self.old) != len(self.new) or self.old.batch != self.new.batch:
            raise ValueError(f"Rebalance: {list(self.old)} and {list(self.new)} must split the "
                             "same batch over the same ranks")
        if not self.predicted_speedup > 1:
            raise ValueError(f"Rebalance: predicted_speedup must be > 1, got "
                             f"{self.predicted_speedup!r}")

    def to_dict(self) -> dict[str, Any]:
        """The JSON form the log records (splits as lists)."""
        return {"step": self.step, "old": list(self.old), "new": list(self.new),
                "predicted_speedup": self.predicted_speedup, "rates": list(self.rates)}


def lr_scale(rule: str | None, batch: int, reference: int) -> float:
    """The learning-rate factor for training ``batch`` when the lr was chosen for ``reference``:
    ``batch / reference`` ("linear"), its square root ("sqrt"), or 1 (None)."""
    if rule is None or batch == reference:
        return 1.0
    ratio = batch / reference
    return ratio if rule == "linear" else math.sqrt(ratio)
