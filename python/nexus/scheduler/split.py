"""Splitting a global batch over ranks in proportion to their measured speed.

``split_batch`` is the one solver every part of the scheduler uses: the plan at start, the
adaptive rebalancer and the cluster model behind ``nexus plan``. It is pure arithmetic on rates
(samples per second), so it is tested on its own.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def split_batch(rates: Sequence[float], batch: int, caps: Sequence[int | None] | None = None
                ) -> list[int]:
    """Integer micro-batch sizes summing to ``batch``, proportional to ``rates``.

    ``rates``: each rank's throughput (samples/s, > 0; only ratios matter). ``caps``: the most
    samples each rank may hold (its memory limit), or None for no limit. A capped rank gets its
    cap and the rest is shared out among the others in proportion to their rates (water
    filling); rounding gives the leftover samples to the largest remainders, so every share is
    within one sample of the continuous optimum. Raises ValueError when the caps cannot hold the
    batch or a rate is not a positive finite number.
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
    # Water filling: fix the ranks whose proportional share exceeds their cap, repeat.
    ideal = [0.0] * n
    free, left = set(range(n)), float(batch)
    while free:
        total = sum(rates[r] for r in free)
        over = [r for r in free if left * rates[r] / total > limit[r]]
        if not over:
            for r in free:
                ideal[r] = left * rates[r] / total
            break
        for r in over:
            ideal[r] = float(limit[r])
            left -= limit[r]
            free.discard(r)
    shares = [min(int(math.floor(v)), int(min(limit[r], batch))) for r, v in enumerate(ideal)]
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
