"""nexus.scheduler.visual: heat map text and PNG, our PNG encoder, live redraw, JSONL log."""

import errno
import io
import json
import math
import os
import struct
import zlib

import numpy as np
import pytest

from fs_faults import run_with_file_size_limit
from nexus.scheduler import visual
from nexus.scheduler.visual import RAMP, HeatMap, JsonlLog, LiveHeatMap, write_png


def _rows(text, metric):
    """The cell strings of ``metric``'s block in render(color=False) output."""
    lines = text.split("\n")
    start = next(i for i, s in enumerate(lines) if s.split(" ")[0] == metric)
    rows = []
    for s in lines[start + 1:]:
        if "|" not in s or s.startswith("low"):
            break
        rows.append(s[s.index("|") + 1:s.rindex("|")])
    return rows


def _one_metric(rows_of_columns, **kw):
    hm = HeatMap(len(rows_of_columns), metrics=("x",), **kw)
    for step, col in enumerate(np.array(rows_of_columns, float).T):
        hm.add(step, {"x": col})
    return hm


def _read_png(path):
    """Decodes an 8-bit RGB PNG with filter 0, checking the signature and every CRC."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, []
    while pos < len(data):
        (n,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + n]
        (crc,) = struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])
        assert crc == zlib.crc32(kind + body) & 0xFFFFFFFF, kind
        chunks.append((kind, body))
        pos += 12 + n
    assert chunks[0][0] == b"IHDR" and chunks[-1] == (b"IEND", b"")
    w, h, depth, ctype, comp, filt, interlace = struct.unpack(">IIBBBBB", chunks[0][1])
    assert (depth, ctype, comp, filt, interlace) == (8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(b for k, b in chunks if k == b"IDAT"))
    rows = np.frombuffer(raw, np.uint8).reshape(h, 1 + 3 * w)
    assert (rows[:, 0] == 0).all()  # filter type 0 (None): the bytes are the pixels
    return rows[:, 1:].reshape(h, w, 3)


def _block(img, color):
    """(top, left, height, width) of the pixels equal to ``color``; asserts they are a box."""
    ys, xs = np.nonzero((img == np.asarray(color, np.uint8)).all(axis=2))
    assert ys.size, f"no pixel of colour {color}"
    top, left, h, w = ys.min(), xs.min(), ys.max() - ys.min() + 1, xs.max() - xs.min() + 1
    assert ys.size == h * w
    return top, left, h, w


class FakeTTY(io.StringIO):
    def isatty(self):
        return True


# ---- render -------------------------------------------------------------------------------


def test_render_has_a_row_per_rank_and_at_most_width_cells():
    hm = HeatMap(3, labels=["fast", "mid", "slow"])
    for step in range(100):
        hm.add(step, {"throughput": [3, 2, 1], "share": [30, 20, 10], "memory": [1, 2, 3]})
    assert len(hm) == 100
    text = hm.render(width=25, color=False)
    for metric in hm.metrics:
        rows = _rows(text, metric)
        assert len(rows) == 3 and all(len(r) == 25 for r in rows)
    assert "fast |" in text and "samples/s" in text and "MB" in text
    assert "steps 0..99" in text and "100 columns in 25 cells" in text
    assert "\x1b" not in text


def test_render_keeps_all_columns_when_they_fit_the_width():
    hm = _one_metric([[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]])
    assert _rows(hm.render(width=60, color=False), "x") == [" .:-=+*#%@"]


def test_downsampling_averages_each_bucket():
    # Buckets of two columns: means 0, 5, 10, 5 on row 0 and 10, 10, 0, 0 on row 1.
    hm = _one_metric([[0, 0, 0, 10, 10, 10, 5, 5],
                      [10, 10, 10, 10, 0, 0, 0, 0]])
    assert _rows(hm.render(width=4, color=False), "x") == [" +@+", "@@  "]
    assert "0..10" in hm.render(width=4, color=False)


def test_uneven_buckets_average_their_own_columns():
    # 5 columns into 2 buckets: columns 0-1 and 2-4.
    hm = _one_metric([[0, 0, 3, 6, 9]])
    assert _rows(hm.render(width=2, color=False), "x") == [" @"]
    assert "0..6" in hm.render(width=2, color=False)


def test_constant_data_renders_mid_scale():
    hm = _one_metric([[7, 7, 7], [7, 7, 7]])
    text = hm.render(color=False)
    assert _rows(text, "x") == ["+++", "+++"] and "7..7" in text


def test_nan_cells_are_unknown_and_do_not_spoil_the_scale():
    hm = _one_metric([[0, np.nan, 10], [np.nan, np.nan, np.nan]])
    assert _rows(hm.render(color=False), "x") == [" ?@", "???"]
    # A bucket with one known value shows that value, not NaN.
    assert _rows(hm.render(width=1, color=False), "x") == ["+", "?"]


def test_metric_with_no_data_at_all():
    hm = HeatMap(2)
    hm.add(0, {"throughput": [1, 2]})  # share and memory left out: unknown
    text = hm.render(color=False)
    assert _rows(text, "share") == ["?", "?"] and "no data" in text
    assert _rows(text, "throughput") == [" ", "@"]


def test_color_uses_ansi_256_backgrounds_and_resets():
    hm = _one_metric([[0, 5, 10, np.nan]])
    text = hm.render(color=True)
    row = next(s for s in text.split("\n") if s.lstrip().startswith("r0"))
    first, last = visual.RAMP_ANSI[0], visual.RAMP_ANSI[255]
    assert f"\x1b[48;5;{first}m" in row and f"\x1b[48;5;{last}m" in row
    assert row.endswith("?|") and "\x1b[0m?" in row
    assert row.count("\x1b[0m") == 1
    plain = hm.render(color=False)
    assert "\x1b" not in plain and _rows(plain, "x") == [" +@?"]


@pytest.mark.parametrize("isatty, env, expected", [
    (False, {}, False), (True, {}, True), (True, {"NO_COLOR": "1"}, False),
    (True, {"TERM": "dumb"}, False)])
def test_color_none_follows_the_terminal(monkeypatch, isatty, env, expected):
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.delenv("NO_COLOR", raising=False)
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("sys.stdout", FakeTTY() if isatty else io.StringIO())
    hm = _one_metric([[0, 1]])
    assert ("\x1b[" in hm.render()) is expected


def test_render_empty_heat_map():
    assert "no steps" in HeatMap(2).render(color=False)


def test_add_and_constructor_errors_say_what_is_wrong():
    hm = HeatMap(2)
    with pytest.raises(ValueError, match="one value per rank"):
        hm.add(0, {"throughput": [1, 2, 3]})
    with pytest.raises(ValueError, match=r"unknown metrics \['speed'\]"):
        hm.add(0, {"speed": [1, 2]})
    with pytest.raises(ValueError, match="must be 2 numbers"):
        hm.add(0, {"share": ["a", "b"]})
    with pytest.raises(ValueError, match="step must be an integer"):
        hm.add(1.5, {"share": [1, 2]})
    assert len(hm) == 0
    with pytest.raises(ValueError, match="ranks"):
        HeatMap(0)
    with pytest.raises(ValueError, match="2 ranks but 1 labels"):
        HeatMap(2, labels=["a"])
    with pytest.raises(ValueError, match="distinct"):
        HeatMap(2, metrics=("a", "a"))
    with pytest.raises(ValueError, match="unknown metrics"):
        HeatMap(2, units={"speed": "x/s"})
    with pytest.raises(ValueError, match="width"):
        hm.render(width=0)


def test_many_columns_grow_storage():
    hm = HeatMap(2, metrics=("x",))
    for step in range(1000):
        hm.add(step, {"x": [step, 999 - step]})
    assert len(hm) == 1000
    assert _rows(hm.render(width=10, color=False), "x") == [" .:-=+*#%@", "@%#*+=-:. "]


# ---- PNG ----------------------------------------------------------------------------------


def test_save_png_is_a_valid_png_with_the_ramp_at_both_ends(tmp_path):
    hm = HeatMap(3)
    for step in range(30):
        v = np.full(3, 5.0)
        if step == 0:
            v[0] = 0.0  # the lowest throughput: rank 0, first column
        if step == 29:
            v[2] = 9.0  # the highest: rank 2, last column
        hm.add(step, {"throughput": v, "share": [4, 4, 4], "memory": [np.nan, 3, 3]})
    path = tmp_path / "hm.png"
    hm.save_png(path, cell=6)
    img = _read_png(path)
    assert img.shape == hm.image(cell=6).shape
    low, high = _block(img, RAMP[0]), _block(img, RAMP[255])
    assert low[2:] == high[2:] == (6, 6)  # exactly one cell each
    assert (high[0] - low[0], high[1] - low[1]) == (2 * 6, 29 * 6)
    # memory's unknown row is light grey; share and the rest of memory are constant: mid-ramp
    assert (img == visual.PNG_UNKNOWN).all(axis=2).sum() == 30 * 6 * 6
    assert (img == RAMP[128]).all(axis=2).sum() == (3 + 2) * 30 * 6 * 6
    assert not list(tmp_path.glob("*.tmp"))


def test_save_png_downsamples_to_200_columns(tmp_path):
    hm = _one_metric([list(range(450))])
    hm.save_png(tmp_path / "wide.png", cell=1)
    img = _read_png(tmp_path / "wide.png")
    assert img.shape[1] == 200 and img.shape[0] == 7 + 1  # title strip + one row


def test_save_png_errors(tmp_path):
    with pytest.raises(ValueError, match="no steps"):
        HeatMap(2).save_png(tmp_path / "x.png")
    with pytest.raises(ValueError, match="cell"):
        _one_metric([[1]]).save_png(tmp_path / "x.png", cell=0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        _one_metric([[1]]).save_png(tmp_path / "missing" / "x.png")


def test_write_png_round_trips_pixels(tmp_path, rng):
    rgb = rng.integers(0, 256, size=(5, 7, 3), dtype=np.uint8)
    write_png(tmp_path / "r.png", rgb)
    assert (_read_png(tmp_path / "r.png") == rgb).all()


@pytest.mark.parametrize("bad, match", [
    (np.zeros((4, 4, 3), np.float32), "uint8"), (np.zeros((4, 4), np.uint8), "shape"),
    (np.zeros((4, 4, 4), np.uint8), "shape"), (np.zeros((0, 4, 3), np.uint8), "shape"),
    ([[[0, 0, 0]]], "uint8 numpy array, got list")])
def test_write_png_rejects_bad_arrays(tmp_path, bad, match):
    with pytest.raises(ValueError, match=match):
        write_png(tmp_path / "bad.png", bad)
    assert not list(tmp_path.iterdir())


def test_failed_write_keeps_the_old_file_and_no_temp(tmp_path):
    """A write that fails half way (a file-size limit stands in for a full disk) leaves the old
    file and no temporary file, and the error names the file."""
    path = tmp_path / "hm.png"
    path.write_bytes(b"old")
    proc = run_with_file_size_limit(
        "import numpy as np\nfrom nexus.scheduler.visual import write_png",
        f"write_png({str(path)!r}, np.arange(64 * 64 * 3, dtype=np.uint8).reshape(64, 64, 3))", limit=16)
    assert proc.returncode != 0
    assert f"OSError: [Errno {errno.EFBIG}]" in proc.stderr and str(path) in proc.stderr
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["hm.png"]


# ---- LiveHeatMap --------------------------------------------------------------------------


def test_live_writes_nothing_to_a_non_tty():
    out = io.StringIO()
    live = LiveHeatMap(out, interval=0)
    hm = _one_metric([[1, 2]])
    live.update(hm)
    live.close()
    assert out.getvalue() == ""
    off = FakeTTY()
    with LiveHeatMap(off, interval=0, enabled=False) as live:
        live.update(hm)
    assert off.getvalue() == ""


def test_live_redraws_over_the_previous_drawing():
    out = FakeTTY()
    live = LiveHeatMap(out, interval=0)
    hm = _one_metric([[1, 2], [3, 4]])
    live.update(hm)
    first = out.getvalue()
    lines = hm.render(color=live._color).split("\n")
    assert "\x1b[" not in first.split("\r\x1b[2K")[0]  # the first drawing moves nothing up
    assert first.count("\n") == len(lines)
    hm.add(2, {"x": [5, 6]})
    live.update(hm)
    second = out.getvalue()[len(first):]
    assert second.startswith(f"\x1b[{len(lines)}A") and second.endswith("\x1b[J")
    assert "3 columns in 3 cells" in second
    live.close()
    assert out.getvalue() == first + second  # close leaves the drawing as it is


def test_live_throttles_and_close_draws_the_skipped_update(monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(visual, "_clock", lambda: clock[0])
    out = FakeTTY()
    live = LiveHeatMap(out, interval=1.0)
    hm = _one_metric([[1, 2]])
    live.update(hm)
    drawn = out.getvalue()
    hm.add(2, {"x": [3]})
    clock[0] += 0.5
    live.update(hm)
    assert out.getvalue() == drawn  # too soon: skipped
    live.close()
    assert "3 columns" in out.getvalue()[len(drawn):]


# ---- JsonlLog -----------------------------------------------------------------------------


def _lines(path):
    return [json.loads(s) for s in path.read_text(encoding="utf-8").splitlines()]


def test_jsonl_log_round_trips_numpy_values_and_fixed_fields(tmp_path, monkeypatch):
    monkeypatch.setattr(visual, "_wall", lambda: 1_700_000_000.25)  # unix seconds
    path = tmp_path / "sched.jsonl"
    with JsonlLog(path, rank=np.int64(0), world=3) as log:
        log.write("rebalance", step=np.int32(7), shares=np.array([5, 3, 2]),
                  times=np.array([0.5, np.nan], np.float32), ok=np.bool_(True),
                  ratio=np.float64(1.5), where=tmp_path, nested={"a": (np.uint8(1), math.inf)})
        log.write("step", world=4)
    first, second = _lines(path)
    assert first["event"] == "rebalance" and first["time"] == 1_700_000_000.25
    assert first["rank"] == 0 and first["world"] == 3
    assert first["step"] == 7 and first["shares"] == [5, 3, 2]
    assert first["times"] == [0.5, None] and first["ok"] is True and first["ratio"] == 1.5
    assert first["where"] == str(tmp_path) and first["nested"] == {"a": [1, None]}
    assert list(first)[:2] == ["time", "event"]
    assert second["world"] == 4  # a field of the call overrides a fixed one


def test_jsonl_log_appends_and_each_line_is_one_write(tmp_path, monkeypatch):
    path = tmp_path / "a.jsonl"
    path.write_text('{"event": "old"}\n', encoding="utf-8")
    log = JsonlLog(path)
    writes = []
    real = log._file.write
    monkeypatch.setattr(log._file, "write", lambda b: writes.append(b) or real(b))
    log.write("x", a=1)
    log.write("y")
    assert len(writes) == 2 and all(w.endswith(b"\n") and w.count(b"\n") == 1 for w in writes)
    # flushed: readable before close
    assert [d["event"] for d in _lines(path)] == ["old", "x", "y"]
    log.close()
    log.close()
    with pytest.raises(ValueError, match="after close"):
        log.write("z")


def test_jsonl_log_disabled_and_errors(tmp_path):
    with JsonlLog(None, rank=1) as log:
        log.write("anything", x=np.arange(3))
    with pytest.raises(FileNotFoundError, match="does not exist"):
        JsonlLog(tmp_path / "no" / "such" / "log.jsonl")
    with pytest.raises(ValueError, match="'time'"):
        JsonlLog(tmp_path / "l.jsonl", time=1)
    log = JsonlLog(tmp_path / "l.jsonl")
    with pytest.raises(ValueError, match="'time'"):
        log.write("e", time=2)
    with pytest.raises(TypeError, match="cannot write a object"):
        log.write("e", x=object())
    log.close()
    assert (tmp_path / "l.jsonl").read_text() == ""


def test_saved_png_gets_the_permissions_of_a_plain_file(tmp_path):
    import stat

    path = tmp_path / "h.png"
    write_png(path, np.zeros((2, 3, 3), np.uint8))
    mask = os.umask(0o022)
    os.umask(mask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~mask
