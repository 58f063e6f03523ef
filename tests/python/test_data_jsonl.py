"""nx.data.read_jsonl / iter_jsonl: types, exact floats, escapes, missing keys, errors, chunks."""

import json
import math
import random

import numpy as np
import pytest

import nexus as nx


def _write(tmp_path, lines, name="d.jsonl"):
    p = tmp_path / name
    p.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return p


def test_types_per_column():
    t = nx.data.read_jsonl(b'{"i": 1, "f": 2.5, "b": true, "s": "x", "l": [1, 2]}\n'
                           b'{"i": -7, "f": 3, "b": false, "s": "yz", "l": [3.5, 4]}\n')
    assert list(t) == ["i", "f", "b", "s", "l"]
    assert t["i"].dtype == np.int64 and t["i"].tolist() == [1, -7]
    assert t["f"].dtype == np.float64 and t["f"].tolist() == [2.5, 3.0]
    assert t["b"].dtype == np.bool_ and t["b"].tolist() == [True, False]
    assert t["s"].dtype == object and t["s"].tolist() == ["x", "yz"]
    assert t["l"].shape == (2, 2) and t["l"].tolist() == [[1, 2], [3.5, 4]]
    assert t.stats["rows"] == 2 and t.stats["skipped"] == 0


def test_integer_lists_stay_int64():
    t = nx.data.read_jsonl(b'{"l": [1, 2, 3]}\n{"l": [4, 5, 6]}\n')
    assert t["l"].dtype == np.int64 and t["l"].shape == (2, 3)


def test_floats_round_trip_exactly():
    rng = random.Random(0)
    vals = [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(3000)]
    vals += [5e-324, 2.2250738585072014e-308, 1.7976931348623157e308, 0.1, -0.0, 1e22, 1e23]
    data = "".join(json.dumps({"x": v, "l": [v, -v]}) + "\n" for v in vals).encode()
    t = nx.data.read_jsonl(data)
    assert [float(x) for x in t["x"]] == vals
    assert all(a == b and math.copysign(1, a) == math.copysign(1, b)
               for a, b in zip(t["x"].tolist(), vals))
    assert t["l"][:, 1].tolist() == [-v for v in vals]


def test_nan_infinity_and_out_of_range():
    t = nx.data.read_jsonl(b'{"x": NaN}\n{"x": Infinity}\n{"x": -Infinity}\n{"x": 1e400}\n'
                           b'{"x": 1e-400}\n')
    x = t["x"]
    assert math.isnan(x[0]) and x[1] == math.inf and x[2] == -math.inf
    assert x[3] == math.inf and x[4] == 0.0


def test_big_integers_become_float():
    t = nx.data.read_jsonl(b'{"x": 1}\n{"x": 100000000000000000000}\n')
    assert t["x"].dtype == np.float64 and t["x"][1] == 1e20


def test_string_escapes_and_utf8():
    strings = ["plain", 'q"uote', "back\\slash", "tab\tnl\nret\r", "é中文", "😀", "\x00\x1f",
               "/", "\ud800", "a\udc00b", ""]
    data = "".join(json.dumps({"s": s}) + "\n" for s in strings).encode()
    assert nx.data.read_jsonl(data)["s"].tolist() == strings
    raw = "".join(json.dumps({"s": s}, ensure_ascii=False) + "\n" for s in strings[:8])
    assert nx.data.read_jsonl(raw.encode())["s"].tolist() == strings[:8]


def test_surrogate_pair_escape():
    t = nx.data.read_jsonl(b'{"s": "\\ud83d\\ude00 \\u00e9\\u4e2d"}\n')
    assert t["s"][0] == "😀 é中"


def test_missing_keys_and_nulls():
    t = nx.data.read_jsonl(b'{"i": 1, "f": 1.5, "b": true, "s": "x", "l": [1.0, 2.0]}\n'
                           b'{"i": null}\n'
                           b'{"z": 3}\n')
    assert t["i"].dtype == np.float64 and t["i"][0] == 1 and np.isnan(t["i"][1:]).all()
    assert np.isnan(t["f"][1:]).all()
    assert t["b"].dtype == np.float64 and t["b"][0] == 1.0 and np.isnan(t["b"][1:]).all()
    assert t["s"].tolist() == ["x", None, None]
    assert t["l"].shape == (3, 2) and np.isnan(t["l"][1:]).all()
    assert t["z"].dtype == np.int64 or np.isnan(t["z"][0])
    assert np.isnan(t["z"][:2]).all() and t["z"][2] == 3


def test_all_null_column_is_float_nan():
    t = nx.data.read_jsonl(b'{"a": null}\n{"a": null}\n')
    assert t["a"].dtype == np.float64 and np.isnan(t["a"]).all()


def test_columns_selects_and_skips_nested():
    t = nx.data.read_jsonl(b'{"a": 1, "n": {"x": [1, {"y": null}]}, "b": "s"}\n',
                           columns=["b", "a"])
    assert list(t) == ["b", "a"]
    with pytest.raises(ValueError, match="nested object"):
        nx.data.read_jsonl(b'{"a": 1, "n": {"x": 1}}\n')
    with pytest.raises(ValueError, match="no line has it"):
        nx.data.read_jsonl(b'{"a": 1}\n', columns=["missing"])


def test_dtypes_override():
    t = nx.data.read_jsonl(b'{"f": [0.1, 0.2], "i": 3}\n', dtypes={"f": "float32", "i": np.int32})
    assert t["f"].dtype == np.float32 and t["f"][0, 0] == np.float32(0.1)
    assert t["i"].dtype == np.int32
    with pytest.raises(ValueError, match="cannot be read as"):
        nx.data.read_jsonl(b'{"s": "x"}\n', dtypes={"s": "float32"})


def test_duplicate_key_last_wins():
    assert nx.data.read_jsonl(b'{"a": 1, "a": 2}\n')["a"].tolist() == [2]


def test_blank_lines_and_crlf():
    t = nx.data.read_jsonl(b'\n{"a": 1}\r\n   \n{"a": 2}')
    assert t["a"].tolist() == [1, 2] and t.stats["lines"] == 4


@pytest.mark.parametrize("line,what", [
    ('{"a": 1,}', "expected '\"' to start a key"),
    ('{"a" 1}', "expected ':'"),
    ('[1, 2]', "expected '{'"),
    ('{"a": tru}', "expected a value"),
    ('{"a": "x}', "unterminated string"),
    ('{"a": 1} x', "end of the line"),
    ('{"a": [1, 2}', "expected ',' or ']'"),
    ('{"a": "\\q"}', "invalid escape"),
])
def test_malformed_line_names_line_and_byte(line, what):
    data = ('{"z": 0}\n' * 2 + line + "\n").encode()
    with pytest.raises(ValueError, match=r"line 3, byte (\d+): .*" + what.replace("[", r"\[")) as e:
        nx.data.read_jsonl(data)
    byte = int(str(e.value).split("byte ")[1].split(":")[0])
    assert 18 <= byte <= 18 + len(line)  # the line starts at byte 18


def test_type_conflict_and_list_length_raise_even_when_skipping():
    with pytest.raises(ValueError, match="line 2.*column 'a' holds integers"):
        nx.data.read_jsonl(b'{"a": 1}\n{"a": "x"}\n', on_error="skip")
    with pytest.raises(ValueError, match="lists of length 2"):
        nx.data.read_jsonl(b'{"a": [1, 2]}\n{"a": [1]}\n')


def test_skip_counts_and_keeps_good_rows(tmp_path):
    lines = ['{"a": %d, "b": "s%d"}' % (i, i) for i in range(1000)]
    bad = {10: '{"a": 1', 500: 'garbage', 999: '{"a": 5, "b": "x'}
    for i, b in bad.items():
        lines[i] = b
    p = _write(tmp_path, lines)
    with pytest.raises(ValueError, match="line 11, byte"):
        nx.data.read_jsonl(p)
    t = nx.data.read_jsonl(p, on_error="skip", threads=2)
    good = [i for i in range(1000) if i not in bad]
    assert t["a"].tolist() == good and t["b"].tolist() == [f"s{i}" for i in good]
    assert t.stats["skipped"] == 3 and t.stats["skipped_lines"] == [11, 501, 1000]


def test_parallel_ranges_equal_one_thread(tmp_path):
    rng = random.Random(1)
    rows = [{"id": i, "x": rng.random(), "s": "é" * (i % 5), "l": [rng.random(), i]}
            for i in range(20000)]
    for r in rows[::7]:
        del r["x"]
    p = _write(tmp_path, [json.dumps(r) for r in rows])
    one = nx.data.read_jsonl(p, threads=1)
    many = nx.data.read_jsonl(p)
    for k in one:
        np.testing.assert_array_equal(one[k], many[k])
    assert one["id"].tolist() == list(range(20000))


def test_chunked_iteration_equals_full_read(tmp_path):
    rows = [{"id": i, "x": i / 3, "s": str(i)} for i in range(1234)]
    rows.insert(100, {"id": 5000, "x": 1.0, "s": "x"})
    p = _write(tmp_path, [json.dumps(r) for r in rows])
    full = nx.data.read_jsonl(p)
    chunks = list(nx.data.iter_jsonl(p, chunk_rows=100, dtypes={"x": "float64"}))
    assert [len(c["id"]) for c in chunks] == [100] * 12 + [35]
    for k in full:
        np.testing.assert_array_equal(np.concatenate([c[k] for c in chunks]), full[k])


def test_chunked_errors_count_lines_from_the_start(tmp_path):
    p = _write(tmp_path, ['{"a": 1}'] * 250 + ["oops"])
    with pytest.raises(ValueError, match="line 251, byte 2250"):
        list(nx.data.iter_jsonl(p, chunk_rows=100))


def test_errors_for_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="cannot open"):
        nx.data.read_jsonl(tmp_path / "nope.jsonl")
    with pytest.raises(ValueError, match="on_error"):
        nx.data.read_jsonl(b"", on_error="ignore")
    with pytest.raises(ValueError, match="chunk_rows"):
        next(nx.data.iter_jsonl(tmp_path / "x", chunk_rows=0))
    assert nx.data.read_jsonl(b"") == {}
