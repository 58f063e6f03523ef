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


@pytest.mark.parametrize("text,at,what", [
    ("01", 0, "leading zero"), ("-01", 1, "leading zero"), ("00", 0, "leading zero"),
    ("2.", 2, "digit after the decimal point"), ("0.e1", 2, "digit after the decimal point"),
    ("2.e+3", 2, "digit after the decimal point"), ("1e", 2, "exponent"), ("1E+", 3, "exponent"),
    ("1.5e-", 5, "exponent"),
])
@pytest.mark.parametrize("first", ["", '{"a": 0.5}\n', '{"a": 7}\n'], ids=["new", "float", "int"])
@pytest.mark.parametrize("asked", [True, False], ids=["read", "not asked for"])
def test_numbers_outside_json_grammar_raise_at_their_byte(text, at, what, first, asked):
    # RFC 8259 has no leading zeros, no bare '.', no empty exponent; std::from_chars alone would
    # read a prefix. Checked for a column of no kind yet, of floats (the fast path) and of ints,
    # and for a column that columns= leaves out (validated, not converted).
    data = (first + '{"a": ' + text + ', "b": 1}\n').encode()
    line = 2 if first else 1
    with pytest.raises(ValueError, match=f"line {line}, byte {len(first) + 6 + at}: .*{what}"):
        nx.data.read_jsonl(data, columns=None if asked else ["b"])


def test_numbers_within_json_grammar_read_as_python_does():
    texts = ["0", "-0", "-0.0", "7", "1.5", "-0.0e-0", "1E+2", "2e-3", "123456789012345678901234", "1e400", "0.1e1"]
    t = nx.data.read_jsonl("".join('{"a": %s}\n' % x for x in texts).encode())
    assert t["a"].tolist() == [float(x) for x in texts]
    # the same numbers in a column columns= leaves out: skipped without an error
    extra = ["NaN", "Infinity", "-Infinity", "[1.5, -0, 2e3]"]
    lines = "".join('{"a": %s, "b": %d}\n' % (x, i) for i, x in enumerate(texts + extra))
    assert nx.data.read_jsonl(lines.encode(), columns=["b"])["b"].tolist() == list(range(len(texts + extra)))


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
    with pytest.raises(ValueError, match="is not a regular file"):
        nx.data.read_jsonl(tmp_path)
    with pytest.raises(ValueError, match="on_error"):
        nx.data.read_jsonl(b"", on_error="ignore")
    with pytest.raises(ValueError, match="chunk_rows"):
        next(nx.data.iter_jsonl(tmp_path / "x", chunk_rows=0))
    assert nx.data.read_jsonl(b"") == {}


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_dtypes_raise_for_values_they_cannot_hold(tmp_path, dtype):
    info = np.iinfo(dtype)
    lines = [json.dumps({"a": v, "l": [v, 0]}) for v in (info.min, info.max)]
    t = nx.data.read_jsonl("\n".join(lines).encode(), dtypes={"a": dtype, "l": dtype})
    assert t["a"].dtype == np.dtype(dtype) and t["a"].tolist() == [info.min, info.max]
    assert t["l"].dtype == np.dtype(dtype) and t["l"][:, 0].tolist() == [info.min, info.max]
    for bad in (info.max + 1, info.min - 1, 10 ** 30):
        for key in ("a", "l"):
            first = '{"a": 1, "l": [1, 2]}\n'
            row = json.dumps({"a": 1, "l": [1, 2], key: bad if key == "a" else [1, bad]})
            byte = len(first) + row.index(str(bad))
            data = (first + row + "\n").encode()
            p = tmp_path / "big.jsonl"
            p.write_bytes(data)
            want = rf"line 2, byte {byte}: column '{key}': {bad} does not fit in {dtype}"
            for on_error in ("raise", "skip"):  # the dtype asked for, not the line: never skipped
                with pytest.raises(ValueError, match=want):
                    nx.data.read_jsonl(data, dtypes={key: dtype}, on_error=on_error)
            with pytest.raises(ValueError, match=want):
                list(nx.data.iter_jsonl(p, chunk_rows=1, dtypes={key: dtype}))
    for bad in ("1.5", "1e3", "NaN"):
        with pytest.raises(ValueError, match=rf"line 1, byte 6: column 'a': {bad} is not an "
                                             rf"integer \(dtypes= asks for {dtype}\)"):
            nx.data.read_jsonl(f'{{"a": {bad}}}\n'.encode(), dtypes={"a": dtype})
    # without dtypes=, an integer beyond int64 is read as float64 (documented)
    assert nx.data.read_jsonl(f'{{"a": {10 ** 30}}}'.encode())["a"].tolist() == [float(10 ** 30)]


def test_dtypes_naming_an_unknown_column_raise(tmp_path):
    with pytest.raises(ValueError, match="dtypes= names column 'c', which no line has; columns: a"):
        nx.data.read_jsonl(b'{"a": 1}\n', dtypes={"c": "int32"})
    with pytest.raises(ValueError, match="dtypes= names column 'b', which columns= does not ask"):
        nx.data.read_jsonl(b'{"a": 1, "b": 2}\n', columns=["a"], dtypes={"b": "int32"})
    p = _write(tmp_path, ['{"a": 1}', '{"a": 2, "b": 3}', '{"a": 4}'])
    chunks = list(nx.data.iter_jsonl(p, chunk_rows=1, dtypes={"b": "float32"}))  # b: in one chunk
    assert [len(c["a"]) for c in chunks] == [1, 1, 1] and chunks[1]["b"].dtype == np.float32
    with pytest.raises(ValueError, match="dtypes= names column 'c', which no line has"):
        list(nx.data.iter_jsonl(p, chunk_rows=1, dtypes={"c": "int32"}))  # known at the end


def test_a_byte_order_mark_is_skipped(tmp_path):
    rows = [{"a": 1, "s": "é"}, {"a": 2, "s": "x"}]
    p = tmp_path / "bom.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8-sig")
    with open(p, encoding="utf-8-sig") as f:
        want = [json.loads(line) for line in f]
    for t in (nx.data.read_jsonl(p), nx.data.read_jsonl(p.read_bytes()),
              next(nx.data.iter_jsonl(p))):
        assert list(t) == list(want[0])
        assert t["a"].tolist() == [r["a"] for r in want] and t["s"].tolist() == [r["s"] for r in want]
    chunks = list(nx.data.iter_jsonl(p, chunk_rows=1))
    assert [c["a"].tolist() for c in chunks] == [[r["a"]] for r in want]
    with pytest.raises(ValueError, match="line 1, byte 3: expected '{'"):  # offsets count the mark
        nx.data.read_jsonl("x\n".encode("utf-8-sig"))


def test_chunks_hold_chunk_rows_rows_and_blank_lines_do_not_count(tmp_path):
    lines = ["", '{"a": 0}', "  ", "", '{"a": 1}', '{"a": 2}', "\t", '{"a": 3}', '{"a": 4}', "", ""]
    p = _write(tmp_path, lines)
    want = [json.loads(line)["a"] for line in lines if line.strip()]
    for n in (1, 2, 3, 10):
        chunks = list(nx.data.iter_jsonl(p, chunk_rows=n))
        assert [len(c["a"]) for c in chunks] == [min(n, len(want) - k)
                                                for k in range(0, len(want), n)]
        assert np.concatenate([c["a"] for c in chunks]).tolist() == want
    byte = sum(len(line) + 1 for line in lines[:5])
    with pytest.raises(ValueError, match=f"line 6, byte {byte}: expected"):  # lines still count
        list(nx.data.iter_jsonl(_write(tmp_path, lines[:5] + ["oops"]), chunk_rows=1))
    assert list(nx.data.iter_jsonl(_write(tmp_path, ["", " "]), chunk_rows=1)) == []
