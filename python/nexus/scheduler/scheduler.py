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
from dataclasses import dataclass, field

import numpy as np

from ..graph import GraphBuilder
from ..model import _as_features, _as_labels, check_samples
from .balance import AdaptiveBalancer, RunMeter
from .cluster import ClusterConfig
from .profile import gather_profiles, profile_rank
from .split import equal_split, split_batch, step_time
from .table import format_table

AUTO_CODEC = "int8"  # what compression="auto" puts on a slow link (0.27 of the bytes)
MEMORY_FRACTION = 0.5  # of a rank's free memory its activations may take
_BALANCES = ("adaptive", "static", "equal")
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
    plan: dict  # the plan at start: profiles, groups, shares, compression, lr scale
    history: list[dict] = field(default_factory=list)  # one record per epoch
    rebalances: list[dict] = field(default_factory=list)  # every change of shares
    ideal_samples_per_second: float = 0.0  # the sum of the ranks' rates measured over the same
    # train steps (samples / busy seconds): never below samples_per_second (balance.RunMeter)
    steps: int = 0
    seconds: float = 0.0

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
        from ..distributed import _world  # noqa: PLC0415
        from .visual import HeatMap, JsonlLog, LiveHeatMap  # noqa: PLC0415

        if balance not in _BALANCES:
            raise ValueError(f"train: unknown balance {balance!r}; valid: {', '.join(_BALANCES)}")
        if lr_scaling not in ("linear", "sqrt", None):
            raise ValueError(f"train: lr_scaling must be 'linear', 'sqrt' or None, got "
                             f"{lr_scaling!r}")
        epochs, batch = Epochs(epochs), BatchSize(batch_size)
        x, y, x_test, y_test = _load(data, data_path)
        check_samples("train", x, self.model.builder.sample_shape)
        x, y = x.astype(self.model._dtype, copy=False), _as_labels(y).numpy()
        w = _world._get()
        rank, n = w.rank, w.size
        out = sys.stdout if (rank == 0 and verbose) else None

        # ---- profile, probe, plan
        profiles = gather_profiles(w, profile_rank(w))
        groups = self.cluster.assign(profiles)
        per_sample = self._bytes_per_sample(batch)
        caps = [max(1, int(p["memory_free"] * MEMORY_FRACTION // per_sample)) for p in profiles]
        probe = min(max(1, equal_split(n, batch)[rank]), len(x))
        rates = _world.all_gather(np.array(self._probe_rate(x[:probe], y[:probe])))
        rates = [float(r) for r in rates]
        trained_batch = min(int(batch), sum(caps))
        lr_scale = _lr_scale(lr_scaling, trained_batch, reference_batch or int(batch))
        if shares is not None:
            shares = _given_shares(shares, n, trained_batch, balance)
        elif balance == "equal":
            shares = equal_split(n, trained_batch)
        else:
            shares = split_batch(rates, trained_batch, caps)
        hierarchical = self.cluster.federated and len(set(groups)) > 1
        codecs = self._codecs(compression, profiles, groups, hierarchical)
        plan = {"world_size": n, "batch": trained_batch, "requested_batch": int(batch),
                "balance": balance, "groups": groups, "hierarchical": hierarchical,
                "compression": codecs, "lr_scale": lr_scale, "probe_rates": rates, "caps": caps,
                "shares": list(shares), "profiles": profiles,
                "predicted_speedup_vs_equal": step_time(equal_split(n, trained_batch), rates)
                / max(step_time(shares, rates), 1e-12)}
        if out:
            print(render_plan(plan), file=out, flush=True)

        # ---- train
        dp = dist.DataParallel(self.model, compression=codecs["ring"],
                               groups=groups if hierarchical else None,
                               leader_compression=codecs["leaders"])
        dp.lr_scale = lr_scale
        if shares[rank]:  # warm up at this rank's share: its buffers and kernels, untimed
            self.model._native.forward_backward(_as_features(x[:shares[rank]], self.model._dtype),
                                                _as_labels(y[:shares[rank]]))
        _world.barrier()
        balancer = AdaptiveBalancer(rates, caps, every=rebalance_every, hysteresis=hysteresis)
        heat = HeatMap(n, labels=[f"r{r} {groups[r]}"[:16] for r in range(n)])
        log = JsonlLog(log_file if rank == 0 else None, rank=rank)
        view = LiveHeatMap(enabled=live if out is not None else False)  # None: on a terminal
        report = Report(0.0, list(shares), None, plan)
        log.write("plan", **{k: v for k, v in plan.items() if k != "profiles"},
                  profiles=profiles)
        meter, step = RunMeter(n), 0
        seen = None  # the shares of the previous step
        try:
            for epoch in range(1, int(epochs) + 1):
                order = np.random.default_rng((seed, epoch)).permutation(len(x))
                e_start, e_loss, e_samples = time.perf_counter(), 0.0, 0
                for at in range(0, len(x), trained_batch):
                    size = min(trained_batch, len(x) - at)
                    mine = shares if size == trained_batch else split_batch(balancer.rates, size,
                                                                            caps)
                    lo = at + sum(mine[:rank])
                    rows = order[lo:lo + mine[rank]]  # gather only this rank's rows
                    xb, yb = x[rows], y[rows]
                    t0 = time.perf_counter()
                    loss = dp.train_step(xb, yb)
                    seconds = time.perf_counter() - t0
                    secs = dp.last_busy_seconds
                    meter.add(mine, secs, seconds)
                    step += 1
                    e_loss += loss * size
                    e_samples += size
                    if mine == seen:  # a new micro-batch size first allocates its buffers
                        balancer.observe(mine, secs)
                    seen = list(mine)
                    heat.add(step, {
                        "throughput": [s / t if s and t > 0 else math.nan
                                       for s, t in zip(mine, secs)],
                        "share": [float(s) for s in mine],
                        "memory": [s * per_sample / 2**20 for s in mine]})
                    view.update(heat)
                    log.write("step", step=step, epoch=epoch, loss=loss, shares=list(mine),
                              seconds=seconds, busy_seconds=[float(t) for t in secs])
                    if size == trained_batch:  # every mode measures; adaptive acts on it
                        change = balancer.propose(shares)
                        if change is not None and balance == "adaptive":
                            event = {"step": step, "old": list(shares), "new": change[0],
                                     "predicted_speedup": change[1],
                                     "rates": list(balancer.rates)}
                            shares = change[0]
                            report.rebalances.append(event)
                            log.write("rebalance", **event)
                    if max_steps is not None and step >= max_steps:
                        break
                record = {"epoch": epoch, "loss": e_loss / max(e_samples, 1),
                          "seconds": time.perf_counter() - e_start, "shares": list(shares),
                          "samples_per_second": e_samples / (time.perf_counter() - e_start)}
                report.history.append(record)
                log.write("epoch", **record)
                if out and not view.enabled:
                    print(f"epoch {epoch}/{int(epochs)}  loss {record['loss']:.4f}  "
                          f"{record['samples_per_second']:,.0f} samples/s  shares {shares}",
                          file=out, flush=True)
                if max_steps is not None and step >= max_steps:
                    break
            dp.average_buffers()
        except BaseException:
            log.close()
            raise
        finally:
            view.close()
        report.shares = list(shares)
        report.steps, report.seconds = step, meter.wall
        report.samples_per_second = meter.samples_per_second
        report.ideal_samples_per_second = meter.summed_rate
        if x_test is not None:
            report.accuracy = float(self.model.evaluate(x_test, y_test)["accuracy"])
        log.write("done", samples_per_second=report.samples_per_second,
                  ideal_samples_per_second=report.ideal_samples_per_second,
                  accuracy=report.accuracy, shares=report.shares, steps=step)
        log.close()
        if rank == 0 and heatmap_png is not None and len(heat):
            heat.save_png(heatmap_png)
        if out:
            if not view.enabled and len(heat):
                print(heat.render(), file=out)
            print(report.summary(), file=out, flush=True)
        return report

    # ---- pieces -------------------------------------------------------------------------------
    def _bytes_per_sample(self, batch: int) -> float:
        stats = self.model.memory_stats(int(batch))
        return max(stats["peak_bytes"] / int(batch), 1.0)

    def _probe_rate(self, x, y) -> float:
        """Samples/s of this rank's forward and backward: the median over a few windows of wall
        time that every rank runs at once (after a barrier), so ranks that share cores measure
        each other's load."""
        from ..distributed import _world  # noqa: PLC0415

        native = self.model._native
        xt, yt = _as_features(x, self.model._dtype), _as_labels(y)
        native.forward_backward(xt, yt)  # warm: buffers, JIT kernels
        rates = []
        for _ in range(PROBE_WINDOWS):
            _world.barrier()
            start = time.perf_counter()
            done, now = 0, start
            while now - start < PROBE_SECONDS / PROBE_WINDOWS or done == 0:
                native.forward_backward(xt, yt)
                done += len(y)
                now = time.perf_counter()
            rates.append(done / (now - start))
        return float(np.median(rates))

    def _codecs(self, compression, profiles, groups, hierarchical) -> dict:
        """The codec of the flat/group ring and of the leaders' ring."""
        if compression != "auto":
            from ..distributed._world import _codec_spec  # noqa: PLC0415

            spec = _codec_spec(compression)
            return {"ring": spec, "leaders": spec, "reason": "as requested"}
        limit = self.cluster.compress_below_gbps * 1e9
        n = len(profiles)
        if hierarchical:  # the links that cross from one group to the next
            links = [p["link_bandwidth"] for r, p in enumerate(profiles)
                     if groups[r] != groups[(r + 1) % n]]
        else:
            links = [p["link_bandwidth"] for p in profiles] if n > 1 else []
        slow = [b for b in links if b < limit]
        why = (f"slowest link {min(links) / 1e9:.2f} GB/s "
               f"{'<' if slow else '>='} {self.cluster.compress_below_gbps:g} GB/s") \
            if links else "no links"
        codec = AUTO_CODEC if slow else "none"
        return {"ring": "none" if hierarchical else codec, "leaders": codec, "reason": why}


def _given_shares(shares, n: int, batch: int, balance: str) -> list[int]:
    if balance == "equal":
        raise ValueError('train: shares= sets the first split of balance="static" or '
                         '"adaptive"; balance="equal" splits evenly')
    shares = list(shares)
    if len(shares) != n or any(isinstance(s, bool) or not isinstance(s, (int, np.integer))
                               or s < 0 for s in shares) or sum(shares) != batch:
        raise ValueError(f"train: shares must be {n} integers >= 0 (one per rank) summing to "
                         f"the batch {batch}, got {shares}")
    return [int(s) for s in shares]


def _lr_scale(rule, batch: int, reference: int) -> float:
    if rule is None or batch == reference:
        return 1.0
    ratio = batch / reference
    return ratio if rule == "linear" else math.sqrt(ratio)


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


def render_plan(plan: dict) -> str:
    """The plan table rank 0 prints at start."""
    rows = []
    for r, p in enumerate(plan["profiles"]):
        rows.append([r, p["host"], plan["groups"][r], p["device"],
                     p["device_name"][:24], p["threads"], round(p["gemm_flops"] / 1e9, 1),
                     round(p["memory_free"] / 2**30, 1),
                     "-" if math.isinf(p["link_bandwidth"]) else round(p["link_bandwidth"] / 1e9, 2),
                     round(p["link_latency_s"] * 1e6, 1), round(plan["probe_rates"][r]),
                     plan["caps"][r], plan["shares"][r]])
    table = format_table(["rank", "host", "group", "kind", "device", "thr", "GEMM GF/s",
                          "free GiB", "link GB/s", "lat us", "probe/s", "cap", "share"], rows,
                         title="nexus scheduler plan (measured on this job)")
    mode = "hierarchical (groups, then leaders)" if plan["hierarchical"] else "flat ring"
    c = plan["compression"]
    return (f"{table}\nbatch {plan['batch']} (requested {plan['requested_batch']}), balance "
            f"{plan['balance']}, reduction {mode}, compression ring={c['ring']} "
            f"leaders={c['leaders']} ({c['reason']}), lr x{plan['lr_scale']:.3g}, predicted "
            f"{plan['predicted_speedup_vs_equal']:.2f}x the equal split's step")
