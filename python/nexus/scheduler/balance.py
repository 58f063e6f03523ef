"""Adaptive rebalancing: per-rank throughput measured from every step's busy times, shares
re-solved every ``every`` steps, changed only when the predicted gain beats ``hysteresis``.

A rank's busy time in a step is everything but waiting for the others (DataParallel's
``last_busy_seconds``: the update, the data, forward and backward; on a shared core, also the
time the core gave to the other rank), so equal busy times are what makes nobody wait. A rank's
rate over a window of steps is its samples over its busy seconds, summed over the window
(single steps of a few milliseconds are at the mercy of the OS scheduler's time slices when
ranks share cores); the estimate is an exponential moving average of window rates.

Ranks that share cores (``profile.sharing_groups``) need more than that: when one of two ranks on
a core finishes first, the other has the core to itself for the rest of its step, so the rank
with more work looks faster, is given still more, and the split drifts away from the right one
(and the two ranks' apparent rates add up to more than their core). Their rates are therefore
taken at the contention they meet together: each rank's samples over its CPU seconds, times the
share of a core each of the group's ranks gets while all of them compute: the group's CPU
seconds over its wall seconds, divided among its ranks (``Readings``).

Every rank feeds the same numbers (the step's busy seconds are all-reduced) through the same
arithmetic, so every rank takes the same decision without another message.

A move is a trial: the window after it is compared with the window before it by the step's
critical path (the longest busy time, which every rank knows alike), and a move that made the
step slower by more than the hysteresis is rolled back, and that direction is not tried again
for ``TABU_DECISIONS`` decisions.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .split import split_batch, step_time

TABU_DECISIONS = 3  # decisions during which a rolled-back direction is not proposed again


class Readings:
    """Per-rank sums over a run of steps, and the samples/s they make (``rates``).

    ``add`` takes one step's shares, every rank's busy seconds and CPU seconds over them (each
    cut to ``limit``). A rank's rate is its samples over its busy seconds; for ranks that
    ``sharing`` labels alike (ranks competing for cores, ``profile.sharing_groups``) it is its
    samples over its CPU seconds, times the share of a core each of them gets while all of
    them compute: the group's CPU seconds over its wall seconds (each step's longest busy time
    in the group) is the cores the group had, divided among its ranks with samples. A rank
    with no samples or time has rate 0.0.

        >>> r = Readings(2)
        >>> r.add([200, 100], [1.0, 1.0])
        >>> r.rates()
        [200.0, 100.0]
        >>> # ranks 1 and 2 share a core and take it in turns: rank 1 ran first, alone
        >>> r = Readings(3, sharing=[0, 1, 1])
        >>> r.add([200, 80, 120], [1.0, 0.4, 1.0], [1.0, 0.4, 0.6])
        >>> r.rates()
        [200.0, 100.0, 100.0]
    """

    def __init__(self, n_ranks: int, sharing: Sequence[int] | None = None):
        self.sharing = None if sharing is None else list(sharing)
        self.samples = [0.0] * n_ranks
        self.busy = [0.0] * n_ranks
        self.cpu = [0.0] * n_ranks
        self.crowd = [0.0] * n_ranks  # the longest busy time in the rank's group, summed

    def add(self, shares: Sequence[int], busy: Sequence[float], cpu: Sequence[float] | None = None,
            limit: float = math.inf) -> None:
        cpu = [0.0] * len(shares) if cpu is None else cpu
        seen = [r for r, (s, t) in enumerate(zip(shares, busy)) if s > 0 and t > 0 and math.isfinite(t)]
        for r in seen:
            self.samples[r] += shares[r]
            self.busy[r] += min(float(busy[r]), limit)
            c = float(cpu[r])
            self.cpu[r] += min(c, limit) if math.isfinite(c) and c > 0 else 0.0
        if self.sharing is not None:
            for r in seen:
                self.crowd[r] += max(min(float(busy[q]), limit) for q in seen
                                     if self.sharing[q] == self.sharing[r])

    def rates(self) -> list[float]:
        rates = [s / t if s > 0 and t > 0 else 0.0 for s, t in zip(self.samples, self.busy)]
        if self.sharing is None:
            return rates
        for label in set(self.sharing):
            group = [r for r, g in enumerate(self.sharing) if g == label and self.samples[r] > 0]
            wall = max((self.crowd[r] for r in group), default=0.0)
            if len(group) < 2 or wall <= 0 or any(self.cpu[r] <= 0 for r in group):
                continue  # alone, or no CPU readings: busy time alone
            share = sum(self.cpu[r] for r in group) / wall / len(group)
            for r in group:
                rates[r] = self.samples[r] / self.cpu[r] * share
        return rates


class AdaptiveBalancer:
    """Smoothed per-rank rates (samples/s) and the decision to move samples between ranks.

    ``smoothing``: weight of the newest window in the exponential moving average.
    ``every``: steps between decisions. ``hysteresis``: the re-solved split must predict a step
    at least this fraction faster than the current one, at two decisions in a row and moving
    samples the same way both times, or the shares stay (so one noisy window does not move them
    and measurement noise does not make them oscillate). ``caps``: per-rank memory limits in
    samples. ``sharing``: a label per rank, equal for ranks that compete for cores
    (``profile.sharing_groups``; None: every rank alone).
    """

    def __init__(self, rates: Sequence[float], caps: Sequence[int | None] | None = None,
                 every: int = 10, hysteresis: float = 0.05, smoothing: float = 0.5,
                 sharing: Sequence[int] | None = None):
        if isinstance(every, bool) or not isinstance(every, int) or every < 1:
            raise ValueError(f"rebalance_every must be an integer >= 1, got {every!r}")
        if not 0 <= hysteresis < 1:
            raise ValueError(f"hysteresis must be in [0, 1), got {hysteresis!r}")
        if not 0 < smoothing <= 1:
            raise ValueError(f"smoothing must be in (0, 1], got {smoothing!r}")
        self.rates = [float(r) for r in rates]
        self.caps, self.sharing = caps, None if sharing is None else list(sharing)
        self._window = Readings(len(self.rates), self.sharing)
        self.every, self.hysteresis, self.smoothing = every, hysteresis, smoothing
        self._since = 0
        self._pending = None  # the direction of the last decision's proposal, to confirm
        self._critical: list[float] = []  # this window's steps: the longest busy time of each
        self._before = math.nan  # the mean critical path of the window before the last move
        self._trial: tuple[list[int], list[int]] | None = None  # (old, new) of a move on trial
        self._tabu: tuple[list[int], int] | None = None  # a rolled-back direction, decisions left
        # Every decision taken: the shares it started from, the split it re-solved at the
        # smoothed rates, the predicted gain and whether it moved the shares (what a run's
        # rebalances can be checked against, whatever speeds the machine gave the ranks).
        self.decisions: list[dict] = []

    def observe(self, shares: Sequence[int], seconds: Sequence[float],
                cpu: Sequence[float] | None = None) -> None:
        """One step's shares, each rank's busy seconds and CPU seconds over them."""
        self._window.add(shares, seconds, cpu)
        busy = [t for s, t in zip(shares, seconds) if s > 0 and math.isfinite(t)]
        if busy:
            self._critical.append(max(busy))
        self._since += 1

    def _fold_window(self) -> None:
        a = self.smoothing
        for r, rate in enumerate(self._window.rates()):
            if rate > 0:
                self.rates[r] = (1 - a) * self.rates[r] + a * rate
        self._window = Readings(len(self.rates), self.sharing)

    def propose(self, shares: Sequence[int]) -> tuple[list[int], float] | None:
        """The new shares and their predicted speed-up when it is time to decide and the gain
        clears the hysteresis for the second decision running, in the same direction; or, at the
        first decision after a move whose window's critical path came out slower than the window
        before by more than the hysteresis, the old shares and the measured slowdown (a roll
        back; that direction then waits ``TABU_DECISIONS`` decisions). None otherwise (counting
        restarts at every decision)."""
        if self._since < self.every:
            return None
        self._since = 0
        self._fold_window()
        window = sum(self._critical) / len(self._critical) if self._critical else math.nan
        self._critical = []
        if self._trial is not None:  # the window after a move: keep it, or go back
            old, moved_to = self._trial
            self._trial = None
            if list(shares) == moved_to and window > self._before * (1 + self.hysteresis):
                self.decisions.append({"shares": list(shares), "solved": list(old), "gain": window / self._before,
                                       "moved": True, "rolled_back": True, "before": self._before, "after": window})
                self._tabu = ([(n > s) - (n < s) for n, s in zip(moved_to, old)], TABU_DECISIONS)
                self._pending = None
                return list(old), window / self._before
        batch = sum(shares)
        new = split_batch(self.rates, batch, self.caps)
        now, then = step_time(shares, self.rates), step_time(new, self.rates)
        decision = {"shares": list(shares), "solved": list(new), "gain": now / then if then > 0 else 1.0,
                    "moved": False}
        self.decisions.append(decision)
        direction = [(n > s) - (n < s) for n, s in zip(new, shares)]
        tabu = self._tabu is not None and direction == self._tabu[0]
        if self._tabu is not None:
            self._tabu = None if self._tabu[1] <= 1 else (self._tabu[0], self._tabu[1] - 1)
        if list(new) == list(shares) or then <= 0 or now / then < 1 + self.hysteresis or tabu:
            self._pending = None
            return None
        confirmed, self._pending = direction == self._pending, direction
        if not confirmed:
            return None
        self._pending = None
        decision["moved"] = True
        self._trial, self._before = (list(shares), list(new)), window
        return new, now / then


class RunMeter:
    """What a run reached against what its ranks could reach, measured over the same steps.

    ``add`` takes each step's shares, every rank's busy seconds, the step's wall seconds and
    every rank's CPU seconds. ``samples_per_second`` is all samples over all wall time;
    ``summed_rate`` is the sum of the ranks' rates over the run (``Readings``: samples over
    busy seconds, or at their group's contention for ranks that ``sharing`` says compete for
    cores): what a perfect split with free communication would reach. A rank cannot be busy
    for longer than the step took (a longer reading is clock skew and is cut to the step), so
    ``samples_per_second <= summed_rate`` and ``efficiency`` is a fraction in [0, 1]. Ranks
    that never got a sample have no rate and count for nothing on either side.

        >>> m = RunMeter(2)
        >>> m.add([3, 1], [0.5, 0.25], wall=0.5)
        >>> m.samples_per_second, m.summed_rate, m.efficiency
        (8.0, 10.0, 0.8)
    """

    def __init__(self, n_ranks: int, sharing: Sequence[int] | None = None):
        self.readings = Readings(n_ranks, sharing)
        self.wall = 0.0

    def add(self, shares: Sequence[int], busy_seconds: Sequence[float], wall: float,
            cpu_seconds: Sequence[float] | None = None) -> None:
        self.wall += wall
        self.readings.add(shares, busy_seconds, cpu_seconds, limit=wall)

    @property
    def samples_per_second(self) -> float:
        return sum(self.readings.samples) / self.wall if self.wall > 0 else 0.0

    @property
    def summed_rate(self) -> float:
        return sum(self.readings.rates())

    @property
    def efficiency(self) -> float:
        """samples_per_second / summed_rate, in [0, 1] (nan before any step)."""
        ideal = self.summed_rate
        return min(self.samples_per_second / ideal, 1.0) if ideal > 0 else math.nan


PHASES = ("compute", "reduction", "waiting", "overhead")


class StepTimes:
    """Where one rank's steps spent their time, summed over the steps it is given.

    ``add`` takes one step: ``phases`` (``DataParallel.last_phases``: the call, forward+backward,
    the reduction after backward, the counts' exchange), every rank's busy seconds, this rank and
    the step's wall seconds (from the end of the previous step). It books:

    - compute: the call less its reduction and exchange (data, forward, backward, and the
      optimizer update when the step goes through the ring);
    - waiting: for the slowest rank (the busiest rank's busy seconds less this rank's), at most
      the time this rank spent in the reduction and exchange;
    - reduction: the rest of that time (moving and summing the gradient, the counts; through
      shared memory also this rank's part of the sharded update and the wait for the others');
    - overhead: the wall time outside the call (the loop, the log, the heat map, rebalancing).

        >>> t = StepTimes()
        >>> t.add({"call": 0.010, "reduction": 0.003, "counts": 0.001}, [0.006, 0.008], 0, 0.011)
        >>> {k: round(v * 1e3, 3) for k, v in t.per_step().items()}
        {'compute': 6.0, 'reduction': 2.0, 'waiting': 2.0, 'overhead': 1.0}
    """

    def __init__(self):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.steps = 0

    def add(self, phases: dict, busy_seconds: Sequence[float], rank: int, wall: float) -> None:
        comm = phases["reduction"] + phases["counts"]
        finite = [t for t in busy_seconds if math.isfinite(t)]
        waiting = min(max(max(finite, default=0.0) - busy_seconds[rank], 0.0), comm)
        for name, t in zip(PHASES, (phases["call"] - comm, comm - waiting, waiting,
                                    wall - phases["call"])):
            self.seconds[name] += max(t, 0.0)
        self.steps += 1

    def per_step(self) -> dict[str, float]:
        """Mean seconds per step of each phase (zeros before any step)."""
        return {k: v / self.steps if self.steps else 0.0 for k, v in self.seconds.items()}
