"""What the heterogeneous scheduler shows while it trains: heat maps of ranks x time and a log.

``HeatMap`` records one column per step (a value per rank for each metric: throughput, share,
memory), renders it as terminal text (ANSI 256-colour cells or shade characters) and saves it as
a PNG through ``write_png``, our own encoder. ``LiveHeatMap`` redraws a heat map in place on a
terminal during training. ``JsonlLog`` writes every decision as one JSON object per line.

Only numpy and the standard library: no matplotlib, PIL or rich.
"""

from __future__ import annotations

import json
import math
import os
import struct
import sys
import time
import zlib
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from nexus.checkpoint import write_atomic

DEFAULT_UNITS = {"throughput": "samples/s", "share": "samples", "memory": "MB"}
SHADES = " .:-=+*#%@"  # low to high; a cell shows SHADES[floor(t * 10)], t in [0, 1]
UNKNOWN = "?"  # a cell with no finite value (NaN: unknown)
PNG_MAX_COLUMNS = 200

# Viridis (perceptually uniform, readable in grey and by most colour-blind readers) at 9 stops,
# interpolated to 256 entries: RAMP[0] is the lowest value, RAMP[255] the highest.
_STOPS = np.array([(68, 1, 84), (72, 40, 120), (62, 73, 137), (49, 104, 142), (38, 130, 142),
                   (31, 158, 137), (53, 183, 121), (110, 206, 88), (253, 231, 37)], float)
RAMP = np.stack([np.interp(np.linspace(0, 8, 256), np.arange(9), _STOPS[:, c])
                 for c in range(3)], axis=1).round().astype(np.uint8)
PNG_BACKGROUND = (255, 255, 255)
PNG_TEXT = (32, 32, 32)
PNG_UNKNOWN = (200, 200, 200)


def _ansi256(rgb: np.ndarray) -> np.ndarray:
    """The nearest xterm-256 colour index (6x6x6 cube or grey ramp) for each RGB row."""
    levels = np.array([0, 95, 135, 175, 215, 255])
    greys = np.arange(8, 239, 10)
    palette = np.array([(r, g, b) for r in levels for g in levels for b in levels]
                       + [(v, v, v) for v in greys], float)
    dist = ((rgb[:, None, :].astype(float) - palette[None]) ** 2).sum(axis=2)
    return 16 + dist.argmin(axis=1)


RAMP_ANSI = _ansi256(RAMP)


def use_color(stream=None) -> bool:
    """Whether to colour text for ``stream`` (default sys.stdout): it is a tty, TERM is not
    "dumb" and NO_COLOR is unset or empty (https://no-color.org)."""
    stream = sys.stdout if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return (bool(isatty and isatty()) and os.environ.get("TERM") != "dumb"
            and not os.environ.get("NO_COLOR"))


class HeatMap:
    """Ranks x time for a few metrics, one column per recorded step.

    ``ranks``: rows of each metric. ``metrics``: the metric names, in display order.
    ``units``: metric -> unit string shown in legends (defaults: throughput samples/s, share
    samples, memory MB; "" for other metrics). ``labels``: one row label per rank (default
    "r0".."rN"). Each metric is scaled over its own min..max, so ranks compare within a metric.
    """

    def __init__(self, ranks: int, metrics: Sequence[str] = ("throughput", "share", "memory"),
                 units: Mapping[str, str] | None = None,
                 labels: Sequence[str] | None = None):
        if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"HeatMap: ranks must be an integer >= 1, got {ranks!r}")
        metrics = tuple(metrics)
        if not metrics or len(set(metrics)) != len(metrics) or \
                not all(isinstance(m, str) and m for m in metrics):
            raise ValueError(f"HeatMap: metrics must be distinct non-empty names, got {metrics}")
        units = dict(units or {})
        stray = sorted(set(units) - set(metrics))
        if stray:
            raise ValueError(f"HeatMap: units for unknown metrics {stray}; metrics are "
                             f"{list(metrics)}")
        labels = [f"r{r}" for r in range(ranks)] if labels is None else [str(x) for x in labels]
        if len(labels) != ranks:
            raise ValueError(f"HeatMap: {ranks} ranks but {len(labels)} labels")
        self.ranks, self.metrics, self.labels = ranks, metrics, labels
        self.units = {m: units.get(m, DEFAULT_UNITS.get(m, "")) for m in metrics}
        self._data = np.full((len(metrics), ranks, 64), np.nan)  # grows by doubling
        self._steps = np.zeros(64, np.int64)
        self._n = 0

    def __len__(self) -> int:
        """The number of columns (steps) recorded."""
        return self._n

    def add(self, step: int, values: Mapping[str, Sequence[float]]) -> None:
        """Records one time column. ``values[metric]``: ``ranks`` floats (NaN = unknown); a
        metric left out is unknown for every rank. Raises ValueError naming a wrong metric or
        length."""
        if isinstance(step, bool) or not isinstance(step, (int, np.integer)):
            raise ValueError(f"HeatMap.add: step must be an integer, got {step!r}")
        unknown = [m for m in values if m not in self.metrics]
        if unknown:
            raise ValueError(f"HeatMap.add: unknown metrics {unknown}; this heat map records "
                             f"{list(self.metrics)}")
        column = np.full((len(self.metrics), self.ranks), np.nan)
        for i, m in enumerate(self.metrics):
            if m not in values:
                continue
            try:
                v = np.asarray(values[m], dtype=float)
            except (TypeError, ValueError) as e:
                raise ValueError(f"HeatMap.add: {m} must be {self.ranks} numbers ({e})") from None
            if v.shape != (self.ranks,):
                raise ValueError(f"HeatMap.add: {m} needs one value per rank ({self.ranks}), "
                                 f"got shape {v.shape}")
            column[i] = v
        if self._n == self._steps.size:
            self._data = np.concatenate([self._data, np.full_like(self._data, np.nan)], axis=2)
            self._steps = np.concatenate([self._steps, np.zeros_like(self._steps)])
        self._data[:, :, self._n] = column
        self._steps[self._n] = int(step)
        self._n += 1

    def _cells(self, metric: str, limit: int) -> np.ndarray:
        """(ranks, buckets) means of the finite values, at most ``limit`` buckets; NaN where a
        bucket has none. Bucket b holds columns starts[b] .. starts[b+1]-1."""
        data = self._data[self.metrics.index(metric), :, :self._n]
        starts = np.arange(min(self._n, limit)) * self._n // min(self._n, limit)
        finite = np.isfinite(data)
        total = np.add.reduceat(np.where(finite, data, 0.0), starts, axis=1)
        count = np.add.reduceat(finite, starts, axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            return total / count

    def _range(self, metric: str, cells: np.ndarray) -> str:
        """"lo..hi unit" over the cells shown, and the steps they cover."""
        unit = f" {self.units[metric]}" if self.units[metric] else ""
        rng = "no data" if np.isnan(cells).all() else \
            f"{_num(np.nanmin(cells))}..{_num(np.nanmax(cells))}{unit}"
        return f"{rng}, steps {self._steps[0]}..{self._steps[self._n - 1]}"

    def render(self, width: int = 60, color: bool | None = None) -> str:
        """Terminal text: per metric a title, one row per rank with one cell per time bucket
        (columns averaged into at most ``width`` buckets) and a legend (min..max of the cells,
        unit, step range). ``color``: True for ANSI 256-colour cells on the viridis ramp, False
        for the shades " .:-=+*#%@" (low to high, "?" unknown), None to colour only when
        sys.stdout is a tty, TERM is not "dumb" and NO_COLOR is unset."""
        if isinstance(width, bool) or not isinstance(width, int) or width < 1:
            raise ValueError(f"HeatMap.render: width must be an integer >= 1, got {width!r}")
        color = use_color() if color is None else color
        if self._n == 0:
            return "(heat map: no steps recorded yet)"
        pad = max(len(x) for x in self.labels)
        out = []
        for metric in self.metrics:
            cells = self._cells(metric, width)
            t = _scale(cells)
            unit = f" ({self.units[metric]})" if self.units[metric] else ""
            out.append(f"{metric}{unit}")
            for label, row in zip(self.labels, t):
                out.append(f"  {label.rjust(pad)} |{_row_text(row, color)}|")
            out.append(f"  {' ' * pad}  {self._range(metric, cells)}, "
                       f"{self._n} columns in {cells.shape[1]} cells")
        key = _row_text(np.linspace(0, 1, 10), color)
        out.append(f"low |{key}| high, {UNKNOWN} unknown")
        return "\n".join(out)

    def image(self, cell: int = 8) -> np.ndarray:
        """The PNG picture as an (h, w, 3) uint8 array; see save_png."""
        if isinstance(cell, bool) or not isinstance(cell, int) or cell < 1:
            raise ValueError(f"HeatMap.save_png: cell must be an integer >= 1, got {cell!r}")
        if self._n == 0:
            raise ValueError("HeatMap.save_png: no steps recorded yet")
        title_scale, label_scale = max(1, cell // 4), cell // 5  # label_scale 0: no labels
        title_h = 7 * title_scale
        left = (4 * max(len(x) for x in self.labels) + 1) * label_scale if label_scale else 0
        panels, titles = [], []
        for metric in self.metrics:
            cells = self._cells(metric, PNG_MAX_COLUMNS)
            t = _scale(cells)
            rgb = RAMP[np.where(np.isnan(t), 0, np.rint(t * 255)).astype(int)]
            rgb[np.isnan(t)] = PNG_UNKNOWN
            panels.append(rgb.repeat(cell, axis=0).repeat(cell, axis=1))
            titles.append(f"{metric} {self._range(metric, cells)}")
        width = max([left + panels[0].shape[1]]
                    + [_text_mask(s).shape[1] * title_scale for s in titles])
        height = len(panels) * (title_h + self.ranks * cell) + (len(panels) - 1) * cell
        img = np.empty((height, width, 3), np.uint8)
        img[:] = PNG_BACKGROUND
        y = 0
        for panel, title in zip(panels, titles):
            _draw_text(img, 0, y + title_scale, title, title_scale)
            y += title_h
            img[y:y + panel.shape[0], left:left + panel.shape[1]] = panel
            for r, label in enumerate(self.labels if label_scale else ()):
                _draw_text(img, 0, y + r * cell + (cell - 5 * label_scale) // 2, label,
                           label_scale)
            y += panel.shape[0] + cell
        return img

    def save_png(self, path, cell: int = 8) -> None:
        """Writes the heat map as a PNG, atomically: one panel per metric stacked vertically
        with a one-cell gap, each under a title (metric, range, steps); ranks are rows (labelled
        on the left when ``cell`` >= 5), time buckets (columns averaged into at most 200) are
        columns, each bucket a ``cell`` x ``cell`` block coloured on the viridis ramp (RAMP[0]
        lowest, RAMP[255] highest, light grey unknown)."""
        write_png(path, self.image(cell))


def _num(v: float) -> str:
    return f"{v:.4g}"


def _scale(cells: np.ndarray) -> np.ndarray:
    """Maps cells to [0, 1] over their own finite min..max (constant data: 0.5); NaN stays."""
    if np.isnan(cells).all():
        return cells
    lo, hi = np.nanmin(cells), np.nanmax(cells)
    if hi == lo:
        return np.where(np.isnan(cells), np.nan, 0.5)
    return (cells - lo) / (hi - lo)


def _row_text(t: np.ndarray, color: bool) -> str:
    """One row of cells: shade characters, or spaces on ANSI 256-colour backgrounds."""
    known = ~np.isnan(t)
    if not color:
        level = np.minimum((np.where(known, t, 0) * len(SHADES)).astype(int), len(SHADES) - 1)
        return "".join(SHADES[i] if k else UNKNOWN for i, k in zip(level, known))
    codes = RAMP_ANSI[np.rint(np.where(known, t, 0) * 255).astype(int)]
    parts, current = [], None
    for code, k in zip(codes, known):
        want = int(code) if k else None
        if want != current:
            parts.append("\x1b[0m" if want is None else f"\x1b[48;5;{want}m")
            current = want
        parts.append(" " if k else UNKNOWN)
    return "".join(parts) + ("\x1b[0m" if current is not None else "")


# A 3x5 bitmap font: per glyph five rows, each an octal digit whose bits are the pixels, left
# pixel first. Text is drawn upper case; a character without a glyph is drawn as "?".
_FONT = dict(zip(
    "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ .-/():,+_%?=",
    ("75557 26227 71747 71317 55711 74717 74757 71122 75757 75717 "
     "25755 65656 34443 65556 74647 74644 34553 55755 72227 11152 55655 44447 57755 65555 "
     "25552 65644 25563 65655 34216 72222 55557 55552 55775 55255 55222 71247 "
     "00000 00002 00700 11244 24442 21112 02020 00024 02720 00007 51245 71202 07070").split()))


def _text_mask(text: str) -> np.ndarray:
    """(5, 4 * len - 1) bool pixels of ``text`` in the 3x5 font, one blank column between."""
    mask = np.zeros((5, max(4 * len(text) - 1, 0)), bool)
    for i, ch in enumerate(text.upper()):
        for row, digit in enumerate(_FONT.get(ch, _FONT["?"])):
            mask[row, 4 * i:4 * i + 3] = [int(digit) >> 2 & 1, int(digit) >> 1 & 1,
                                          int(digit) & 1]
    return mask


def _draw_text(img: np.ndarray, x: int, y: int, text: str, scale: int) -> None:
    """Draws ``text`` with its top-left at (x, y), each font pixel ``scale`` x ``scale``,
    clipped to the image."""
    mask = _text_mask(text).repeat(scale, axis=0).repeat(scale, axis=1)
    h, w = min(mask.shape[0], img.shape[0] - y), min(mask.shape[1], img.shape[1] - x)
    img[y:y + h, x:x + w][mask[:h, :w]] = PNG_TEXT


def write_png(path, rgb: np.ndarray) -> None:
    """Writes an (h, w, 3) uint8 RGB array as an 8-bit truecolour PNG, atomically (temp file in
    the same folder, then rename). Our own encoder: filter 0 on every row, one zlib IDAT, CRCs.
    Raises ValueError for any other shape or dtype, FileNotFoundError for a missing folder."""
    if not isinstance(rgb, np.ndarray) or rgb.dtype != np.uint8:
        kind = rgb.dtype if isinstance(rgb, np.ndarray) else type(rgb).__name__
        raise ValueError(f"write_png: need a uint8 numpy array, got {kind}")
    if rgb.ndim != 3 or rgb.shape[2] != 3 or rgb.shape[0] < 1 or rgb.shape[1] < 1:
        raise ValueError(f"write_png: need shape (height, width, 3) with height, width >= 1, "
                         f"got {rgb.shape}")
    h, w, _ = rgb.shape
    raw = np.concatenate([np.zeros((h, 1), np.uint8), rgb.reshape(h, w * 3)], axis=1)

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw.tobytes(), 6)) + chunk(b"IEND", b""))
    write_atomic(_existing_folder(path, "write_png"), png)


def _existing_folder(path, who: str) -> Path:
    """``path`` as a Path, after checking its folder exists (a clear error, not a temp name)."""
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{who}: folder {str(path.parent)!r} for {path.name!r} does not "
                                "exist; create it first")
    return path


class LiveHeatMap:
    """Draws a HeatMap in place on a terminal during training.

    ``update(heatmap)`` redraws at most every ``interval`` seconds, moving the cursor up over
    the previous drawing (ANSI); ``close()`` draws the latest state if it was skipped and leaves
    it on screen. ``stream``: default sys.stdout. ``enabled``: None draws only when the stream
    is a tty, True always, False never. Colour follows ``use_color(stream)``. ``width``: the
    most cells per row.
    """

    def __init__(self, stream=None, interval: float = 1.0, enabled: bool | None = None,
                 width: int = 60):
        self.stream = sys.stdout if stream is None else stream
        self.interval, self.width = float(interval), width
        isatty = getattr(self.stream, "isatty", None)
        self.enabled = bool(isatty and isatty()) if enabled is None else bool(enabled)
        self._color = use_color(self.stream)
        self._lines = 0  # lines of the drawing on screen
        self._last = -math.inf  # clock time of the last drawing
        self._pending = None  # a heat map whose latest update was not drawn

    def update(self, heatmap: HeatMap) -> None:
        """Redraws ``heatmap`` unless the last drawing is younger than ``interval``."""
        if not self.enabled:
            return
        now = _clock()
        if now - self._last < self.interval:
            self._pending = heatmap
            return
        self._draw(heatmap)
        self._last = now

    def _draw(self, heatmap: HeatMap) -> None:
        lines = heatmap.render(self.width, self._color).split("\n")
        up = f"\x1b[{self._lines}A" if self._lines else ""
        # One write per frame: cursor up, each line erased then drawn, clear anything below.
        self.stream.write(up + "".join(f"\r\x1b[2K{s}\n" for s in lines) + "\x1b[J")
        self.stream.flush()
        self._lines, self._pending = len(lines), None

    def close(self) -> None:
        """Draws a skipped last update, then leaves the drawing on screen."""
        if self.enabled and self._pending is not None:
            self._draw(self._pending)

    def __enter__(self) -> LiveHeatMap:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


_clock = time.monotonic  # tests replace it; nothing here measures time
_wall = time.time  # the log's timestamps (unix seconds); tests replace it


class JsonlLog:
    """An append-only JSON-lines event log.

    Each ``write(event, **fields)`` appends one object ``{"time": unix seconds, "event": ...,
    **fixed_fields, **fields}`` (a field of the call overrides a fixed one) as one line, with a
    single write() on an unbuffered append-mode file, so a crash loses at most that line and
    ranks may share a file. numpy scalars and arrays become plain JSON numbers and lists;
    NaN and infinities become null (strict JSON). ``path`` None: disabled, write() does
    nothing. A missing folder raises FileNotFoundError. Usable as a context manager.
    """

    def __init__(self, path, **fixed_fields):
        for key in ("time", "event"):
            if key in fixed_fields:
                raise ValueError(f"JsonlLog: {key!r} is set on every line; pick another name")
        self.path = None if path is None else _existing_folder(path, "JsonlLog")
        self.fixed = _plain(fixed_fields)
        self._file = None if path is None else open(self.path, "ab", buffering=0)  # noqa: SIM115

    def write(self, event: str, **fields) -> None:
        """Appends one line for ``event`` with ``fields``; raises ValueError after close()."""
        if self.path is None:
            return
        if self._file is None:
            raise ValueError(f"JsonlLog: write({event!r}) after close() of {self.path}")
        if "time" in fields:
            raise ValueError("JsonlLog: 'time' is set on every line; pick another field name")
        line = {"time": _wall(), "event": str(event), **self.fixed, **_plain(fields)}
        self._file.write((json.dumps(line, allow_nan=False) + "\n").encode("utf-8"))
        self._file.flush()

    def close(self) -> None:
        """Closes the file; a second close does nothing."""
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> JsonlLog:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _plain(value):
    """``value`` with numpy scalars/arrays, tuples and paths made plain JSON; NaN/inf -> None.
    Raises TypeError for anything JSON cannot hold."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    elif isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if value is None or isinstance(value, (str, int, bool)):
        return value
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"JsonlLog: cannot write a {type(value).__name__} ({value!r:.60}); pass "
                    "numbers, strings, lists, dicts or numpy values")
