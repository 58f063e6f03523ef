"""Splitting a global batch over ranks in proportion to their measured speed.

``split_batch`` is the one solver every part of the scheduler uses: the plan at start, the
adaptive rebalancer and the cluster model behind ``nexus plan``. It is pure arithmetic on rates
(samples per second), so it is tested on its own; ``Split`` is its result as a record.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Sequence
from dataclasses import dataclass


def split_batch(rates: Sequence[float], batch: int, caps: Sequence[int | None] | None = None
                ) -> list[int]:
    """Integer micro-batch sizes summing to ``batch``, proportional to ``rates``.

    ``rates``: each rank's throughput (samples/s, > 0; only ratios matter). ``caps``: the most
    samples each rank may hold (its memory limit), or None for no limit. When the batch has at
    least one sample per rank, every rank (whose cap allows it) gets at least one, so no rank
    sits a step out and every rank stays measured. Within those bounds the shares are
    proportional (water filling: ``share = clamp(k * rate, 1, cap)`` with one ``k`` for all
    ranks), and rounding gives the leftover samples to the largest remainders, so every share is
    within one sample of that continuous optimum. Raises ValueError when the caps cannot hold
    the batch or a rate is not a positive finite number.

        >>> split_batch([2.0, 1.0, 1.0], 128)
        [64, 32, 32]
        >>> split_batch([1000.0, 1.0], 3)   # the slow rank still gets one sample
        [2, 1]
    """
    n = len(rates)
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 0:
        raise ValueError(f"split_batch: batch must be an integer >= 0, got {batch!r}")
    if n == 0:
        raise ValueError("split_batch: need at least one rank")
    for r, rate in enumerate(rates):
        if not (isinstance(rate, (int, float)) and math.isfinite(rate) and rate > 0):
            raise ValueError(f"split_batch: rank {r} has rate {rate!r}; rates must be positive "
                             "finite samples/s")
    caps = [None] * n if caps is None else list(caps)
    if len(caps) != n:
        raise ValueError(f"split_batch: {n} rates but {len(caps)} caps")
    limit = [math.inf if c is None else int(c) for c in caps]
    if any(c < 0 for c in limit):
        raise ValueError(f"split_batch: caps must be >= 0 or None, got {caps}")
    if sum(limit) < batch:
        raise ValueError(f"split_batch: the ranks' memory limits hold {int(sum(limit))} samples "
                         f"in all (caps {caps}), fewer than the batch of {batch}; use a smaller "
                         "batch or more ranks")
    floor_ = [min(1, limit[r]) if batch >= n else 0 for r in range(n)]
    ideal = _water_fill(rates, batch, floor_, limit)
    shares = [math.floor(v) for v in ideal]
    # Largest remainder first (ties: the faster rank), never past a cap.
    order = sorted(range(n), key=lambda r: (-(ideal[r] - shares[r]), -rates[r], r))
    short = batch - sum(shares)
    while short > 0:
        progressed = False
        for r in order:
            if short == 0:
                break
            if shares[r] < limit[r]:
                shares[r] += 1
                short -= 1
                progressed = True
        if not progressed:  # unreachable: sum(limit) >= batch was checked
            raise AssertionError("split_batch: could not place every sample")
    return shares


def _water_fill(rates, batch, low, high) -> list[float]:
    """``clamp(k * rate, low, high)`` per rank, with the ``k`` that makes the sum ``batch``
    (from below: the sum never passes it, so the floors never do either). The sum grows
    monotonically with ``k``, so bisection finds it; with bounds on both sides, fixing the
    ranks that cross a bound one pass at a time can move ``k`` back across an earlier bound."""
    def fill(k):
        return [min(max(k * rate, lo), hi) for rate, lo, hi in zip(rates, low, high)]

    lo_k, hi_k = 0.0, batch / min(rates) + 1.0  # fill(hi_k) holds min(batch, sum(high))
    for _ in range(200):
        mid = (lo_k + hi_k) / 2
        if mid in (lo_k, hi_k):
            break
        if sum(fill(mid)) <= batch:
            lo_k = mid
        else:
            hi_k = mid
    return fill(lo_k)


def step_time(shares: Sequence[int], rates: Sequence[float]) -> float:
    """Predicted compute time of one step: the slowest rank's share / rate (ranks run in
    parallel and wait for each other at the gradient reduction)."""
    return max((s / r for s, r in zip(shares, rates) if s), default=0.0)


def equal_split(n: int, batch: int) -> list[int]:
    """``batch`` split as evenly as possible over ``n`` ranks (the first ranks get the extra)."""
    if n < 1:
        raise ValueError(f"equal_split: need at least one rank, got {n}")
    q, extra = divmod(int(batch), n)
    return [q + (r < extra) for r in range(n)]


@dataclass(frozen=True)
class Split:
    """Each rank's share of one global batch (its micro-batch size), in rank order.

    ``Split.proportional`` solves it from measured rates (``split_batch``), ``Split.equal``
    spreads the batch evenly; ``len(split)`` is the number of ranks, ``split[r]`` rank r's share
    and ``split.batch`` their sum. Its JSON form (logs, reports) is ``list(split)``.

    Raises:
        ValueError: no ranks, or a share that is not an integer >= 0.

    Example:
        >>> s = Split.proportional([2.0, 1.0, 1.0], 128)
        >>> s.shares, s.batch, s.offset(2)
        ((64, 32, 32), 128, 96)
    """

    shares: tuple[int, ...]

    def __post_init__(self):
        shares = tuple(self.shares)
        if not shares or any(isinstance(s, bool) or not isinstance(s, numbers.Integral) or s < 0
                             for s in shares):
            raise ValueError(f"Split: shares must be integers >= 0, one per rank (at least one), "
                             f"got {list(shares)}")
        object.__setattr__(self, "shares", tuple(int(s) for s in shares))

    @classmethod
    def proportional(cls, rates: Sequence[float], batch: int,
                     caps: Sequence[int | None] | None = None) -> Split:
        """``split_batch(rates, batch, caps)`` as a Split (its errors are split_batch's)."""
        return cls(tuple(split_batch(rates, batch, caps)))

    @classmethod
    def equal(cls, n: int, batch: int) -> Split:
        """``equal_split(n, batch)`` as a Split."""
        return cls(tuple(equal_split(n, batch)))

    @property
    def batch(self) -> int:
        """The global batch: the sum of the shares."""
        return sum(self.shares)

    def offset(self, rank: int) -> int:
        """Where rank ``rank``'s rows start in the global batch (the shares before it)."""
        return sum(self.shares[:rank])

    def step_time(self, rates: Sequence[float]) -> float:
        """``step_time`` of this split at ``rates`` samples/s per rank."""
        return step_time(self.shares, rates)

    def __len__(self) -> int:
        return len(self.shares)

    def __getitem__(self, rank: int) -> int:
        return self.shares[rank]

    def __iter__(self) -> Iterator[int]:
        return iter(self.shares)
