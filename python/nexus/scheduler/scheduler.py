"""The heterogeneous scheduler: profile every rank, plan the split, train, rebalance.

    scheduler = Scheduler.with_graph(g, cluster, loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
    report = scheduler.train("digits", Epochs(10), BatchSize(128))

Run the same script on every rank (``mpiexec -n 3 python train.py``; a plain ``python`` process
is a world of one). At start every rank is profiled (profile.py) and probed with the model itself
(samples/s of forward and backward at its first share); rank 0 prints the plan. Training is
data-parallel (nexus.distributed.DataParallel): each rank takes its share of every global batch,
gradients are weighted by sample counts and reduced (hierarchically when the cluster is
federated), every rank applies the same update. With ``balance="adaptive"`` the shares follow
the measured busy times (balance.py).

Learning-rate rule: when the global batch that trains differs from ``reference_batch`` (the batch
the optimizer's learning rate was chosen for; default: the requested batch), the learning rate is
multiplied by ``batch / reference_batch`` ("linear scaling", Goyal et al. 2017) or its square root
with ``lr_scaling="sqrt"``; ``lr_scaling=None`` leaves it alone. The batch trains smaller than
requested only when the ranks' memory cannot hold it.
"""

from __future__ import annotations

import math
import sys
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from ..graph import GraphBuilder
from ..model import check_samples
from .balance import PHASES, AdaptiveBalancer, RunMeter, StepTimes
from .cluster import ClusterConfig
from .plan import AUTO_CODECS, AUTO_SPARSE_CODECS, BALANCES, Compression, Plan, Rebalance, lr_scale, measure_codec_costs
from .profile import gather_profiles, profile_rank, rank_device, sharing_groups
from .split import Split

MEMORY_FRACTION = 0.5  # of a rank's free memory its activations may take
PROBE_SECONDS = 0.45  # every rank probes over PROBE_WINDOWS windows of this much time in all
PROBE_WINDOWS = 3


class Epochs(int):
    """A number of epochs (>= 1), as in ``scheduler.train(data, Epochs(10), BatchSize(128))``."""

    def __new__(cls, n):
        return _positive(cls, "Epochs", n)


class BatchSize(int):
    """The global batch size (>= 1): the sum of the ranks' micro-batches in every step."""

    def __new__(cls, n):
        return _positive(cls, "BatchSize", n)


def _positive(cls, what, n):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{what} must be an integer >= 1, got {n!r}")
    return int.__new__(cls, int(n))


@dataclass
class Report:
    """What ``Scheduler.train`` returns (the same on every rank)."""

    samples_per_second: float  # global samples / seconds in train steps (profiling, the
    # warm-up step at the planned shares and evaluation excluded)
    shares: list[int]  # the final per-rank micro-batch sizes, summing to the batch
    accuracy: float | None  # on the dataset's test split (None without one)
    plan: Plan  # the plan at start: profiles, groups, split, compression, lr scale
    history: list[dict] = field(default_factory=list)  # one record per epoch
    rebalances: list[Rebalance] = field(default_factory=list)  # every change of split
    # every decision the balancer took (shares, re-solved split, predicted gain, moved or not)
    decisions: list[dict] = field(default_factory=list)
    ideal_samples_per_second: float = 0.0  # the sum of the ranks' rates measured over the same
    # train steps (samples / busy seconds): never below samples_per_second (balance.RunMeter)
    steps: int = 0
    seconds: float = 0.0
    # per rank, the mean milliseconds per step of compute, reduction, waiting and overhead
    # (balance.StepTimes)
    breakdown: list[dict] = field(default_factory=list)

    def summary(self) -> str:
        acc = "n/a" if self.accuracy is None else f"{self.accuracy:.4f}"
        eff = min(self.samples_per_second / self.ideal_samples_per_second, 1.0) \
            if self.ideal_samples_per_second else float("nan")
        return (f"{self.steps} steps in {self.seconds:.2f} s: {self.samples_per_second:,.0f} "
                f"samples/s ({eff:.0%} of the ranks' summed rate), shares {self.shares}, "
                f"{len(self.rebalances)} rebalances, test accuracy {acc}")


class Scheduler:
    """Trains one model over the MPI job's ranks, split by measured speed."""

    def __init__(self, *args, **kwargs):
        raise TypeError("create a Scheduler with Scheduler.with_graph(graph_builder, cluster, "
                        "loss=..., optimizer=...)")

    @classmethod
    def with_graph(cls, graph: GraphBuilder, cluster: ClusterConfig | None = None,
                   loss: str = "cross_entropy", optimizer=None, fusion: bool = True) -> "Scheduler":
        """A scheduler for the model ``graph`` describes, on ``cluster`` (default: auto)."""
        if not isinstance(graph, GraphBuilder):
            raise TypeError(f"Scheduler.with_graph: expected a GraphBuilder, got "
                            f"{type(graph).__name__}")
        if cluster is None:
            cluster = ClusterConfig.auto()
        if not isinstance(cluster, ClusterConfig):
            raise TypeError(f"Scheduler.with_graph: cluster must be a ClusterConfig, got "
                            f"{type(cluster).__name__}")
        self = object.__new__(cls)
        self.graph, self.cluster = graph, cluster
        self.model = graph.compile(loss=loss, optimizer=optimizer, fusion=fusion)
        return self

    # ---- train --------------------------------------------------------------------------------
    def train(self, data, epochs=1, batch_size=128, *, balance: str = "adaptive",
              compression=None, rebalance_every: int = 10, hysteresis: float = 0.05,
              lr_scaling: str | None = "linear", reference_batch: int | None = None,
              seed: int = 0, data_path=None, log_file=None, heatmap_png=None,
              live: bool | None = None, verbose: bool = True, max_steps: int | None = None,
              shares=None) -> Report:
        """Trains on ``data`` ("digits", "mnist" with ``data_path``, or ``(x, y)`` /
        ``(x, y, x_test, y_test)`` arrays) for ``epochs`` with a global ``batch_size``.

        ``balance``: "adaptive" (start from the probe, rebalance every ``rebalance_every``
        steps past ``hysteresis``), "static" (the probe's split, kept) or "equal".
        ``compression``: None, a codec spec for every ring, or "auto" (``AUTO_CODEC`` on links
        measured slower than the cluster's threshold). ``log_file``: JSON lines (plan, steps,
        rebalances, epochs) from rank 0; ``heatmap_png``: the ranks x time heat map, saved at the
        end by rank 0; ``live``: redraw it in the terminal while training (default: when stdout
        is a terminal; never with ``verbose=False``). ``max_steps`` stops early (for smoke runs).
        ``shares``: the first split (per-rank sizes summing to the batch) instead of the probe's, for "static" and
        "adaptive" (say, the split an earlier run ended with).
        """
        from .. import distributed as dist  # noqa: PLC0415

        if balance not in BALANCES:
            raise ValueError(f"train: unknown balance {balance!r}; valid: {', '.join(BALANCES)}")
        if lr_scaling not in ("linear", "sqrt", None):
            raise ValueError(f"train: lr_scaling must be 'linear', 'sqrt' or None, got "
                             f"{lr_scaling!r}")
        epochs, batch = Epochs(epochs), BatchSize(batch_size)
        x, y, x_test, y_test = _load(data, data_path)
        check_samples("train", x, self.model.builder.sample_shape)
        x = x.astype(self.model.builder.dtype, copy=False)
        plan = self._plan(x, y, batch, balance, compression,
                          lr_scale_rule=lr_scaling, reference_batch=reference_batch,
                          shares=shares)
        out = sys.stdout if (dist.rank() == 0 and verbose) else None
        if out:
            print(plan.render(), file=out, flush=True)
        if dist.rank() == 0 and plan.compression.warning:
            warnings.warn(plan.compression.warning, RuntimeWarning, stacklevel=2)
        run = _Run(self.model, plan, x, y, rebalance_every=rebalance_every,
                   hysteresis=hysteresis, log_file=log_file, out=out, live=live)
        try:
            run.epochs(int(epochs), seed, max_steps)
        except BaseException:
            run.log.close()
            raise
        finally:
            run.view.close()
        return run.finish(x_test, y_test, heatmap_png)

    # ---- the plan -----------------------------------------------------------------------------
    def _plan(self, x, y, batch: int, balance: str, compression, *, lr_scale_rule,
              reference_batch, shares) -> Plan:
        """Profiles every rank, probes the model on each, and plans the job (every rank takes
        part; every rank gets the same Plan)."""
        from .. import distributed as dist  # noqa: PLC0415

        rank, n = dist.rank(), dist.world_size()
        profiles = gather_profiles(profile_rank())
        # A GPU rank computes on its GPU (local rank -> device) from the probe on, when Nexus can
        # use it; its gradients reach the MPI ring through host copies.
        if profiles[rank].device == "gpu" and (device := rank_device()) is not None:
            self.model.to(device)
        groups = self.cluster.assign(profiles)
        per_sample = self._bytes_per_sample(batch)
        caps = [max(1, int(p.memory_free * MEMORY_FRACTION // per_sample)) for p in profiles]
        probe = min(max(1, Split.equal(n, batch)[rank]), len(x))
        rates = [float(r) for r in dist.all_gather(np.array(self._probe_rate(x[:probe],
                                                                              y[:probe])))]
        trained_batch = min(int(batch), sum(caps))
        if shares is not None:
            split = _given_split(shares, n, trained_batch, balance)
        elif balance == "equal":
            split = Split.equal(n, trained_batch)
        else:
            split = Split.proportional(rates, trained_batch, caps)
        hierarchical = self.cluster.federated and len(set(groups)) > 1
        # a step's compute on the slowest rank, from the probe's rates: what codecs trade against
        compute = max((rows / rate for rows, rate in zip(split.shares, rates) if rate > 0), default=None)
        return Plan(
            world_size=n, batch=trained_batch, requested_batch=int(batch), balance=balance,
            groups=tuple(groups), hierarchical=hierarchical,
            compression=Compression.choose(compression, profiles, groups, hierarchical,
                                           self.cluster.compress_below_gbps, grad_bytes=self._grad_bytes(),
                                           codec_costs=self._codec_costs(compression, n, self._grad_bytes()),
                                           compute_seconds=compute),
            lr_scale=lr_scale(lr_scale_rule, trained_batch, reference_batch or int(batch)),
            probe_rates=tuple(rates), bytes_per_sample=per_sample, caps=tuple(caps), split=split,
            profiles=tuple(profiles),
            predicted_speedup_vs_equal=Split.equal(n, trained_batch).step_time(rates)
            / max(split.step_time(rates), 1e-12))

    def _grad_bytes(self) -> float:
        """The bytes of the gradient every step reduces (float32 on the wire)."""
        return 4.0 * sum(t.numel() for t in self.model.params.values())

    @staticmethod
    def _codec_costs(compression, n: int, grad_bytes: float) -> dict[str, float] | None:
        """Each candidate codec's encode+decode seconds per byte on the slowest rank, measured on
        a buffer of the gradient's size up to 4 MB (every rank measures, all take the maximum: the
        same numbers, so the same choice, everywhere)."""
        from .. import distributed as dist  # noqa: PLC0415

        if n < 2 or compression is None:
            return None
        specs = [*AUTO_CODECS, *AUTO_SPARSE_CODECS] if compression == "auto" else [dist.codec_spec(compression)]
        specs = [s for s in specs if s != "none"]
        if not specs:
            return None
        mine = measure_codec_costs(specs, floats=int(min(max(grad_bytes // 4, 1024), 1 << 20)))
        every = np.array([np.asarray(part) for part in dist.all_gather(np.array([mine[s] for s in specs]))])
        return dict(zip(specs, every.max(axis=0).tolist()))

    def _bytes_per_sample(self, batch: int) -> float:
        stats = self.model.memory_stats(int(batch))
        return max(stats["peak_bytes"] / int(batch), 1.0)

    def _probe_rate(self, x, y) -> float:
        """Samples/s of this rank's forward and backward: the median over a few windows of wall
        time that every rank runs at once (after a barrier), so ranks that share cores measure
        each other's load."""
        from .. import distributed as dist  # noqa: PLC0415

        self.model.forward_backward(x, y)  # warm: buffers, JIT kernels
        rates = []
        for _ in range(PROBE_WINDOWS):
            dist.barrier()
            start = time.perf_counter()
            done, now = 0, start
            while now - start < PROBE_SECONDS / PROBE_WINDOWS or done == 0:
                self.model.forward_backward(x, y)
                done += len(y)
                now = time.perf_counter()
            rates.append(done / (now - start))
        return float(np.median(rates))


class _Run:
    """One ``Scheduler.train`` call from its plan on: the data-parallel step, the rebalancer,
    the heat map and the log, advanced by named steps (``epochs``, ``epoch``, ``step``,
    ``rebalance``, ``finish``)."""

    def __init__(self, model, plan: Plan, x, y, *, rebalance_every: int, hysteresis: float,
                 log_file, out, live: bool | None):
        from .. import distributed as dist  # noqa: PLC0415
        from .visual import HeatMap, JsonlLog, LiveHeatMap  # noqa: PLC0415

        self.model, self.plan, self.x, self.y, self.out = model, plan, x, y, out
        self.rank, n = dist.rank(), plan.world_size
        self.dp = dist.DataParallel(model, compression=plan.compression.ring,
                                    groups=list(plan.groups) if plan.hierarchical else None,
                                    leader_compression=plan.compression.leaders)
        self.dp.lr_scale = plan.lr_scale
        if plan.split[self.rank]:  # warm up at this rank's share: its buffers and kernels, untimed
            model.forward_backward(x[:plan.split[self.rank]], y[:plan.split[self.rank]])
        dist.barrier()
        sharing = sharing_groups(list(plan.profiles))
        self.balancer = AdaptiveBalancer(plan.probe_rates, plan.caps, every=rebalance_every,
                                         hysteresis=hysteresis, sharing=sharing)
        self.heat = HeatMap(n, labels=[f"r{r} {plan.groups[r]}"[:16] for r in range(n)])
        self.log = JsonlLog(log_file if self.rank == 0 else None, rank=self.rank)
        self.view = LiveHeatMap(enabled=live if out is not None else False)  # None: on a tty
        self.report = Report(0.0, list(plan.split), None, plan)
        self.log.write("plan", **plan.to_dict())
        self.meter, self.times, self.steps = RunMeter(n, sharing), StepTimes(), 0
        self.mark = 0.0  # when the last step ended (or its epoch began)
        self.split = plan.split  # the current split of a full batch
        self.seen = None  # the split of the previous step

    def epochs(self, epochs: int, seed: int, max_steps: int | None) -> None:
        """Runs up to ``epochs`` epochs, stopping after ``max_steps`` steps, then averages the
        ranks' buffers (batch-norm statistics saw only each rank's rows)."""
        for epoch in range(1, epochs + 1):
            self.epoch(epoch, epochs, np.random.default_rng((seed, epoch)), max_steps)
            if max_steps is not None and self.steps >= max_steps:
                break
        self.dp.average_buffers()

    def epoch(self, epoch: int, epochs: int, rng: np.random.Generator,
              max_steps: int | None) -> None:
        """One pass over the data in shuffled global batches; records and prints the epoch."""
        order, batch = rng.permutation(len(self.x)), self.plan.batch
        start, loss, samples = time.perf_counter(), 0.0, 0
        self.mark = start
        for at in range(0, len(self.x), batch):
            size = min(batch, len(self.x) - at)
            loss += self.step(epoch, order[at:at + size]) * size
            samples += size
            if size == batch:  # every mode measures; adaptive acts on it
                self.rebalance()
            if max_steps is not None and self.steps >= max_steps:
                break
        seconds = time.perf_counter() - start
        record = {"epoch": epoch, "loss": loss / max(samples, 1), "seconds": seconds,
                  "shares": list(self.split), "samples_per_second": samples / seconds}
        self.report.history.append(record)
        self.log.write("epoch", **record)
        if self.out and not self.view.enabled:
            print(f"epoch {epoch}/{epochs}  loss {record['loss']:.4f}  "
                  f"{record['samples_per_second']:,.0f} samples/s  shares {list(self.split)}",
                  file=self.out, flush=True)

    def step(self, epoch: int, rows: np.ndarray) -> float:
        """One data-parallel step on the global batch ``rows`` (a short last batch is split
        afresh at the current rates); returns its loss."""
        split = self.split if len(rows) == self.plan.batch else \
            Split.proportional(self.balancer.rates, len(rows), self.plan.caps)
        mine = rows[split.offset(self.rank):split.offset(self.rank) + split[self.rank]]
        loss = self.dp.train_step(self.x[mine], self.y[mine])
        now = time.perf_counter()
        seconds, self.mark = now - self.mark, now  # since the previous step: the loop's costs too
        busy, cpu = self.dp.last_busy_seconds, self.dp.last_cpu_seconds
        self.meter.add(split.shares, busy, seconds, cpu)
        self.times.add(self.dp.last_phases, busy, self.rank, seconds)
        self.steps += 1
        if split == self.seen:  # a new micro-batch size first allocates its buffers
            self.balancer.observe(split.shares, busy, cpu)
        self.seen = split
        self.heat.add(self.steps, {
            "throughput": [s / t if s and t > 0 else math.nan for s, t in zip(split, busy)],
            "share": [float(s) for s in split],
            "memory": [s * self.plan.bytes_per_sample / 2**20 for s in split]})
        self.view.update(self.heat)
        self.log.write("step", step=self.steps, epoch=epoch, loss=loss, shares=list(split),
                       seconds=seconds, busy_seconds=[float(t) for t in busy])
        return loss

    def rebalance(self) -> None:
        """Lets the balancer decide on the current split; with ``balance="adaptive"`` a
        proposed change is taken, recorded and logged."""
        change = self.balancer.propose(self.split.shares)
        self.report.decisions = self.balancer.decisions
        if change is None or self.plan.balance != "adaptive":
            return
        event = Rebalance(self.steps, self.split, Split(tuple(change[0])), change[1],
                          tuple(self.balancer.rates))
        self.split = event.new
        self.report.rebalances.append(event)
        self.report.decisions = self.balancer.decisions
        self.log.write("rebalance", **event.to_dict())

    def finish(self, x_test, y_test, heatmap_png) -> Report:
        """Fills in the report, evaluates on the test split, closes the log, saves and prints
        the heat map and the summary."""
        from .. import distributed as dist  # noqa: PLC0415

        report = self.report
        report.shares = list(self.split)
        report.steps, report.seconds = self.steps, self.meter.wall
        report.samples_per_second = self.meter.samples_per_second
        report.ideal_samples_per_second = self.meter.summed_rate
        mine = self.times.per_step()
        report.breakdown = [{k: 1e3 * float(v) for k, v in zip(PHASES, row)}
                            for row in dist.all_gather(np.array([mine[k] for k in PHASES]))]
        if x_test is not None:
            report.accuracy = float(self.model.evaluate(x_test, y_test)["accuracy"])
        self.log.write("done", samples_per_second=report.samples_per_second,
                       ideal_samples_per_second=report.ideal_samples_per_second,
                       accuracy=report.accuracy, shares=report.shares, steps=self.steps,
                       breakdown_ms=report.breakdown)
        self.log.close()
        if self.rank == 0 and heatmap_png is not None and len(self.heat):
            self.heat.save_png(heatmap_png)
        if self.out:
            if not self.view.enabled and len(self.heat):
                print(self.heat.render(), file=self.out)
            print(report.summary(), file=self.out, flush=True)
        return report


def _given_split(shares, n: int, batch: int, balance: str) -> Split:
    if balance == "equal":
        raise ValueError('train: shares= sets the first split of balance="static" or '
                         '"adaptive"; balance="equal" splits evenly')
    shares = list(shares)
    if len(shares) != n or any(isinstance(s, bool) or not isinstance(s, (int, np.integer))
                               or s < 0 for s in shares) or sum(shares) != batch:
        raise ValueError(f"train: shares must be {n} integers >= 0 (one per rank) summing to "
                         f"the batch {batch}, got {shares}")
    return Split(tuple(shares))


def _load(data, path):
    from ..data import load  # noqa: PLC0415

    if isinstance(data, str):
        if data == "mnist" and path is None:
            raise ValueError("train('mnist'): pass data_path=<folder with the four MNIST IDX "
                             "files> (train-images-idx3-ubyte, train-labels-idx1-ubyte, "
                             "t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, raw or .gz); "
                             "nothing is downloaded")
        x, y, xt, yt = load(data, path)
    elif isinstance(data, (tuple, list)) and len(data) in (2, 4):
        x, y = data[0], data[1]
        xt, yt = (data[2], data[3]) if len(data) == 4 else (None, None)
    else:
        raise TypeError("train: data must be 'digits', 'mnist' (with data_path=) or a tuple "
                        f"(x, y) / (x, y, x_test, y_test), got {type(data).__name__}")
    x, y = np.ascontiguousarray(x), np.ascontiguousarray(y)
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"train: need as many labels as samples (> 0), got {len(x)} and {len(y)}")
    return x, y, xt, yt
