"""Figures of a heterogeneous run, drawn with matplotlib from the scheduler's JSON-lines log
(``log_file=`` of ``Scheduler.train``/``fit``, or ``nexus train``): what ``nexus report`` makes.

- the heat map: ranks x steps, each cell the rank's throughput in that step (samples/s, colour
  bar), with a second time axis in seconds;
- the timeline: the batch's shares per rank as a stacked area, and each rank's throughput as a
  line.

Both mark rebalances (dashed) and epoch boundaries (dotted), explained in the legend, and are
written as PNG and SVG. matplotlib comes with the ``plots`` extra (``pip install
"nexus[plots]"``); the terminal heat map (``visual.HeatMap``) needs nothing.
"""

from __future__ import annotations

import io
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from nexus.checkpoint import write_atomic

FORMATS = ("png", "svg")


@dataclass
class RunLog:
    """A finished run as its log recorded it.

    Attributes:
        labels: one label per rank ("r0 a100", ...).
        steps: (steps,) step numbers.
        seconds: (steps,) each step's wall time.
        shares: (steps, ranks) samples per rank in each step.
        busy: (steps, ranks) each rank's busy seconds in each step.
        epochs: the step after which each epoch ended.
        rebalances: (step, old shares, new shares) of each rebalance.
    """

    labels: list[str]
    steps: np.ndarray
    seconds: np.ndarray
    shares: np.ndarray
    busy: np.ndarray
    epochs: list[int] = field(default_factory=list)
    rebalances: list[tuple[int, list[int], list[int]]] = field(default_factory=list)

    @property
    def throughput(self) -> np.ndarray:
        """(steps, ranks) samples/s per rank (NaN where a rank had no samples or no time)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where((self.shares > 0) & (self.busy > 0), self.shares / self.busy, np.nan)

    @property
    def elapsed(self) -> np.ndarray:
        """(steps,) seconds from the start to the end of each step."""
        return np.cumsum(self.seconds)


def read_run_log(path: str | os.PathLike) -> RunLog:
    """Reads a scheduler log (JSON lines: ``plan``, ``step``, ``rebalance``, ``epoch``,
    ``done`` events).

    Raises:
        FileNotFoundError: no file at ``path``.
        ValueError: a line that is not JSON, or a log without a plan or without steps (names the
            line or what is missing).

    Example:
        >>> run = read_run_log("run.jsonl")
        >>> run.shares[-1]
    """
    path = Path(path)
    plan, steps, epochs, rebalances = None, [], [], []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{number}: not a JSON line ({e.msg})") from None
            kind = event.get("event") if isinstance(event, dict) else None
            if kind == "plan" and plan is None:
                plan = event
            elif kind == "step":
                steps.append(event)
            elif kind == "epoch":
                epochs.append(len(steps))
            elif kind == "rebalance":
                rebalances.append((int(event["step"]), list(event["old"]), list(event["new"])))
    if plan is None:
        raise ValueError(f"{path}: no 'plan' line: not a log of Scheduler.train/fit or nexus train")
    if not steps:
        raise ValueError(f"{path}: the log has a plan but no steps")
    ranks = int(plan["world_size"])
    groups = plan.get("groups") or ["?"] * ranks
    return RunLog(
        labels=[f"r{r} {groups[r]}" for r in range(ranks)],
        steps=np.array([s["step"] for s in steps], np.int64),
        seconds=np.array([s["seconds"] for s in steps], float),
        shares=np.array([s["shares"] for s in steps], float),
        busy=np.array([[math.nan if b is None else b for b in s["busy_seconds"]] for s in steps], float),
        epochs=[steps[e - 1]["step"] for e in epochs if e > 0], rebalances=rebalances)


def _pyplot():
    try:
        import matplotlib
    except ImportError as e:
        raise ImportError('nexus report needs matplotlib: pip install "nexus[plots]"') from e
    matplotlib.use("Agg")  # files only, no window
    import matplotlib.pyplot as plt

    plt.rcParams["svg.fonttype"] = "none"  # SVG text stays text (searchable, editable)
    return plt


def _marks(ax, run: RunLog) -> None:
    """Rebalances (dashed) and epoch ends (dotted) as vertical lines, once each in the legend."""
    for k, (step, *_) in enumerate(run.rebalances):
        ax.axvline(step + 0.5, color="tab:red", linestyle="--", linewidth=1,
                   label="rebalance (new split from here)" if k == 0 else None)
    for k, step in enumerate(run.epochs[:-1]):  # the last epoch's end is the figure's edge
        ax.axvline(step + 0.5, color="0.3", linestyle=":", linewidth=1, label="epoch end" if k == 0 else None)


def _seconds_axis(ax, run: RunLog) -> None:
    """A second x axis on top: wall time in seconds since the first step began (step s ends at
    elapsed[s]; beyond the run the mean step time extends it linearly, so ticks never pile up)."""
    far = 1e9
    rate = run.elapsed[-1] / len(run.steps)  # seconds per step
    steps = np.concatenate([[run.steps[0] - 1 - far, run.steps[0] - 1], run.steps, [run.steps[-1] + far]]).astype(float)
    elapsed = np.concatenate([[-far * rate, 0.0], run.elapsed, [run.elapsed[-1] + far * rate]])

    def to_seconds(s):
        return np.interp(s, steps, elapsed)

    def to_steps(t):
        return np.interp(t, elapsed, steps)
    top = ax.secondary_xaxis("top", functions=(to_seconds, to_steps))
    top.set_xlabel("time (s)")


def _save(fig, out: Path, formats) -> list[Path]:
    written = []
    for fmt in formats:
        target = out.with_name(f"{out.name}.{fmt}")
        buf = io.BytesIO()
        fig.savefig(buf, format=fmt, dpi=120, bbox_inches="tight")
        write_atomic(target, buf.getvalue())
        written.append(target)
    return written


def heatmap_figure(run: RunLog):
    """The heat map of ``run`` as a matplotlib Figure (ranks x steps, throughput in colour)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(6.0, min(14.0, 4 + len(run.steps) / 20)), 1.6 + 0.45 * len(run.labels)))
    tp = run.throughput.T
    extent = (run.steps[0] - 0.5, run.steps[-1] + 0.5, len(run.labels) - 0.5, -0.5)
    image = ax.imshow(np.ma.masked_invalid(tp), aspect="auto", interpolation="nearest", cmap="viridis", extent=extent)
    fig.colorbar(image, ax=ax, label="throughput (samples/s)", pad=0.02)
    ax.set_yticks(range(len(run.labels)), run.labels)
    ax.set_xlabel("step")
    ax.set_ylabel("rank")
    ax.set_title("Throughput per rank and step")
    _marks(ax, run)
    _seconds_axis(ax, run)
    if run.rebalances or len(run.epochs) > 1:
        ax.legend(loc="upper left", bbox_to_anchor=(0, -0.25), ncol=2, frameon=False, fontsize="small")
    return fig


def timeline_figure(run: RunLog):
    """Shares (stacked area) and per-rank throughput (lines) of ``run`` over the steps."""
    plt = _pyplot()
    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(max(6.0, min(14.0, 4 + len(run.steps) / 20)), 6.5))
    colors = plt.get_cmap("tab10").colors
    top.stackplot(run.steps, run.shares.T, labels=run.labels, step="mid",
                  colors=[colors[r % 10] for r in range(len(run.labels))], alpha=0.85)
    top.set_ylabel("samples per step")
    top.set_title("Share of each step's batch")
    for r, label in enumerate(run.labels):
        bottom.plot(run.steps, run.throughput[:, r], color=colors[r % 10], linewidth=1.2, label=label)
    bottom.set_ylabel("throughput (samples/s)")
    bottom.set_xlabel("step")
    bottom.set_title("Throughput of each rank")
    for ax in (top, bottom):
        _marks(ax, run)
    _seconds_axis(top, run)
    handles, labels = bottom.get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(4, len(labels)), frameon=False, fontsize="small")
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def draw_report(log_path: str | os.PathLike, out_dir: str | os.PathLike | None = None,
                formats=FORMATS) -> list[Path]:
    """Draws the heat map and the timeline of a finished run from its log.

    Args:
        log_path: the run's JSON-lines log.
        out_dir: where the figures go (default: beside the log), as ``<log name>_heatmap.png``,
            ``<log name>_timeline.svg``, ...
        formats: any of "png", "svg".

    Returns:
        The paths written (each written atomically).

    Raises:
        ValueError: an unknown format, or a log that is not a scheduler log.
        FileNotFoundError: no log, or no folder ``out_dir``.
        ImportError: matplotlib is not installed.

    Example:
        >>> draw_report("run.jsonl")
        [PosixPath('run_heatmap.png'), PosixPath('run_heatmap.svg'), ...]
    """
    formats = tuple(formats)
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise ValueError(f"formats must be some of {list(FORMATS)}, got {list(formats)}")
    log_path = Path(log_path)
    run = read_run_log(log_path)
    folder = log_path.parent if out_dir is None else Path(out_dir)
    if not folder.is_dir():
        raise FileNotFoundError(f"nexus report: no folder {str(folder)!r} for the figures")
    plt = _pyplot()
    written = []
    for name, make in (("heatmap", heatmap_figure), ("timeline", timeline_figure)):
        fig = make(run)
        try:
            written += _save(fig, folder / f"{log_path.stem}_{name}", formats)
        finally:
            plt.close(fig)
    return written


def add_report_arguments(parser) -> None:
    """The ``nexus report`` command line."""
    parser.add_argument("log", help="the JSON-lines log of a finished run (log_file=...)")
    parser.add_argument("--out", default=None, help="folder for the figures (default: beside the log)")
    parser.add_argument("--format", default="png,svg", help="comma-separated: png, svg (default both)")


def run_report(args) -> int:
    """``nexus report``: draws the figures, prints their paths; exit 2 on a bad log or argument."""
    try:
        paths = draw_report(args.log, args.out, [f.strip() for f in args.format.split(",") if f.strip()])
    except (ValueError, FileNotFoundError, ImportError) as e:
        print(f"nexus report: error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0
