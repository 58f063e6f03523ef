"""nx.data.read_csv: inference, quoting, missing values, errors, parallel ranges."""

import csv
import io
import random

import numpy as np
import pytest

import nexus as nx


def test_types_and_header():
    t = nx.data.read_csv(b"i,f,b,s\n1,2.5,true,x\n-3,1e3,False,y\n")
    assert list(t) == ["i", "f", "b", "s"]
    assert t["i"].dtype == np.int64 and t["i"].tolist() == [1, -3]
    assert t["f"].tolist() == [2.5, 1000.0]
    assert t["b"].dtype == np.bool_ and t["b"].tolist() == [True, False]
    assert t["s"].tolist() == ["x", "y"]


def test_floats_round_trip_exactly():
    rng = random.Random(2)
    vals = [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(2000)]
    t = nx.data.read_csv(("x\n" + "".join(f"{v!r}\n" for v in vals)).encode())
    assert t["x"].tolist() == vals


def test_quoting_with_delimiters_newlines_and_doubled_quotes():
    rows = [["a,b", 'say "hi"', "line1\nline2"], ["", "x", "3"], ["é", "", "\r\n"]]
    buf = io.StringIO()
    csv.writer(buf).writerows([["p", "q", "r"]] + rows)
    t = nx.data.read_csv(buf.getvalue().encode())
    assert t["p"].tolist() == ["a,b", None, "é"]
    assert t["q"].tolist() == ['say "hi"', "x", None]
    assert t["r"].tolist() == ["line1\nline2", "3", "\r\n"]


def test_missing_values():
    t = nx.data.read_csv(b"i,f,s\n1,1.5,x\n,NaN,NA\nnull,,\n")
    assert t["i"].dtype == np.float64 and t["i"][0] == 1 and np.isnan(t["i"][1:]).all()
    assert np.isnan(t["f"][1:]).all()
    assert t["s"].tolist() == ["x", None, None]


def test_mixed_column_is_text_verbatim(tmp_path):
    lines = ["a,b"] + [f"{i},{i}" for i in range(50000)] + ["007,x"]
    p = tmp_path / "m.csv"
    p.write_text("\n".join(lines) + "\n")
    t = nx.data.read_csv(p)
    assert t["a"].dtype == np.int64 and t["a"][-1] == 7
    assert t["b"].dtype == object and t["b"][0] == "0" and t["b"][-1] == "x"


def test_options_delimiter_names_columns_dtypes():
    t = nx.data.read_csv(b"1;2;3\n4;5;6\n", delimiter=";", header=False)
    assert list(t) == ["column_0", "column_1", "column_2"] and t["column_2"].tolist() == [3, 6]
    t = nx.data.read_csv(b"1;2;3\n", delimiter=";", header=False, names=["a", "b", "c"],
                         columns=["c", "a"], dtypes={"a": "float32", "c": "str"})
    assert list(t) == ["c", "a"] and t["a"].dtype == np.float32 and t["c"].tolist() == ["3"]
    with pytest.raises(ValueError, match="not in the header"):
        nx.data.read_csv(b"a\n1\n", columns=["b"])


def test_crlf_and_blank_lines():
    t = nx.data.read_csv(b"a,b\r\n1,x\r\n\r\n2,y\r\n")
    assert t["a"].tolist() == [1, 2] and t["b"].tolist() == ["x", "y"]


def test_errors_name_line_and_byte_and_skip_counts():
    data = b"a,b\n1,2\n3\n4,5\n\"6,7\n"
    with pytest.raises(ValueError, match="line 3, byte 8: expected 2 fields, got 1"):
        nx.data.read_csv(data)
    t = nx.data.read_csv(data, on_error="skip")
    assert t["a"].tolist() == [1, 4] and t.stats["skipped"] == 2
    assert t.stats["skipped_lines"] == [3, 5]


def test_parallel_ranges_equal_one_thread(tmp_path):
    rng = random.Random(3)
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["id", "x", "s"])
    for i in range(30000):
        w.writerow([i, rng.random() if i % 9 else "", f'q"{i}\n,' if i % 4 == 0 else f"s{i}"])
    p = tmp_path / "p.csv"
    p.write_text(buf.getvalue())
    one, many = nx.data.read_csv(p, threads=1), nx.data.read_csv(p)
    for k in one:
        np.testing.assert_array_equal(one[k], many[k])
    assert many["id"].tolist() == list(range(30000))
    assert many["s"][4] == 'q"4\n,'


def _csv_rows(text):
    """What Python's csv module reads from text (it takes "\n", "\r\n" and a lone "\r" as line
    ends, as pandas does)."""
    return [row for row in csv.reader(io.StringIO(text, newline="")) if row]


@pytest.mark.parametrize("end", ["\r", "\r\n", "\n"])
def test_every_line_ending_reads_as_the_csv_module_reads_it(end):
    rows = [["a", "b"], ["1", "x"], ["2", "line1\nline2"], ["3", "cr\rinside"]]
    buf = io.StringIO()
    csv.writer(buf, lineterminator=end, quoting=csv.QUOTE_ALL).writerows(rows)
    text = buf.getvalue()
    want = _csv_rows(text)
    t = nx.data.read_csv(text.encode())
    assert list(t) == want[0]
    assert t["a"].tolist() == [int(r[0]) for r in want[1:]]
    assert t["b"].tolist() == [r[1] for r in want[1:]]
    assert t.stats["rows"] == len(want) - 1
    # a bad record is reported at its line, counted with the same line ends
    bad = end.join(["a,b", "1,2", "3", "4,5"]) + end
    byte = len("a,b" + end + "1,2" + end)
    with pytest.raises(ValueError, match=f"line 3, byte {byte}: expected 2 fields, got 1"):
        nx.data.read_csv(bad.encode())
    with pytest.raises(ValueError, match="neither '.n' nor '.r' .which end lines."):
        nx.data.read_csv(text.encode(), delimiter="\r")
    mixed = nx.data.read_csv(b"a,b\r1,2\n3,4\r\n5,6")
    assert mixed["a"].tolist() == [int(r[0]) for r in _csv_rows("a,b\r1,2\n3,4\r\n5,6")[1:]]


def test_a_byte_order_mark_is_not_part_of_the_first_name(tmp_path):
    text = "id,name\n1,é\n"
    p = tmp_path / "bom.csv"
    p.write_text(text, encoding="utf-8-sig")
    with open(p, encoding="utf-8-sig", newline="") as f:
        want = _csv_rows(f.read())
    for source in (p, p.read_bytes()):
        t = nx.data.read_csv(source)
        assert list(t) == want[0]
        assert t["id"].tolist() == [int(want[1][0])] and t["name"].tolist() == [want[1][1]]
    t = nx.data.read_csv("1,2\n".encode("utf-8-sig"), header=False)
    assert t["column_0"].tolist() == [1] and t.stats["lines"] == 1
    with pytest.raises(ValueError, match="line 2, byte 7: expected 2 fields"):
        nx.data.read_csv("a,b\n1\n".encode("utf-8-sig"))  # offsets count the mark's 3 bytes


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_dtypes_raise_for_values_they_cannot_hold(dtype):
    info = np.iinfo(dtype)
    t = nx.data.read_csv(f"a\n{info.min}\n{info.max}\n".encode(), dtypes={"a": dtype})
    assert t["a"].dtype == np.dtype(dtype) and t["a"].tolist() == [info.min, info.max]
    for bad in (info.max + 1, info.min - 1, 10 ** 30):
        data = f"a,b\n1,x\n{bad},y\n".encode()
        for on_error in ("raise", "skip"):  # the dtype asked for, not the line: never skipped
            with pytest.raises(ValueError, match=rf"line 3, byte 8: column 'a': {bad} does not "
                                                 rf"fit in {dtype}"):
                nx.data.read_csv(data, dtypes={"a": dtype}, on_error=on_error)
    for bad in ("1.5", "abc", "1e3"):
        with pytest.raises(ValueError, match=rf"line 2, byte 2: column 'a': {bad} is not an "
                                             rf"integer \(dtypes= asks for {dtype}\)"):
            nx.data.read_csv(f"a\n{bad}\n".encode(), dtypes={"a": dtype})


def test_dtypes_naming_an_unknown_column_raise():
    with pytest.raises(ValueError, match="dtypes= names column 'c', which is not a column of the "
                                         "file; columns: a, b"):
        nx.data.read_csv(b"a,b\n1,2\n", dtypes={"c": "int32"})
    with pytest.raises(ValueError, match="dtypes= names column 'b', which columns= does not ask "
                                         "for; columns: a"):
        nx.data.read_csv(b"a,b\n1,2\n", columns=["a"], dtypes={"b": "int32"})


def test_numbers_read_in_place_hand_every_other_field_to_the_general_path():
    # Once a column is int or float its numbers are read where they stand; quotes, missing
    # values, a sign, an exponent or a value past int64 still take the general path.
    text = ("i,f,s\n1,0.5,a\n2,1.5,b\n\"3\",\"2.5\",c\n,NaN,d\n+4,+3.5,e\n5e0,-0.0,f\n"
            "99999999999999999999,1e400,g\n7,.25,h\n")
    t = nx.data.read_csv(text.encode())
    want_i = [1, 2, 3, None, 4, 5, 99999999999999999999, 7]
    assert t["i"].dtype == np.float64
    assert [None if np.isnan(v) else v for v in t["i"].tolist()] == [
        None if v is None else float(v) for v in want_i]
    f = t["f"].tolist()
    assert f[:3] == [0.5, 1.5, 2.5] and np.isnan(f[3]) and f[4:6] == [3.5, -0.0]
    assert str(f[5]) == "-0.0" and f[6] == float("inf") and f[7] == 0.25
    t = nx.data.read_csv(b"n\n1\n2\nx\n")  # text after numbers: the column is str, as written
    assert t["n"].tolist() == ["1", "2", "x"]


def test_repeated_strings_share_one_str_and_distinct_ones_stay_exact():
    # A column of a few labels over many rows: equal texts become one str object (as pyarrow's
    # to_pandas does); a column of distinct texts (past the table of shared values) is read as is.
    labels = ["red", "green", "blué", "", "say \"hi\""]
    n = 20_000
    rows = [[labels[i % len(labels)], f"id-{i}"] for i in range(n)]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([["label", "key"], *rows])
    t = nx.data.read_csv(buf.getvalue().encode())
    got = t["label"]
    assert got.tolist() == [r[0] if r[0] else None for r in rows]  # "" reads as missing
    assert got[0] is got[5] and got[2] is got[len(labels) * 100 + 2]
    assert len({id(v) for v in got if v is not None}) == len(labels) - 1
    assert t["key"].tolist() == [r[1] for r in rows]


@pytest.mark.parametrize("delimiter", [",", ";", "\t", "|"])
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_text_fields_of_every_length_end_where_the_csv_module_ends_them(delimiter, end):
    # Text without quotes is looked through for its end eight bytes at a time: fields of 0 to 20
    # characters put the delimiter and the line end at every offset of a word, and a column not
    # asked for is only looked through.
    rng = random.Random(len(delimiter + end))
    alphabet = "abcxyz019 -_.é"
    rows = [[f"r{i}"] + ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 20))) for _ in range(3)]
            for i in range(400)]
    text = delimiter.join(["key", "a", "b", "c"]) + end + "".join(delimiter.join(r) + end for r in rows)
    want = [r for r in csv.reader(io.StringIO(text, newline=""), delimiter=delimiter) if r]
    t = nx.data.read_csv(text.encode(), delimiter=delimiter, dtypes={k: "str" for k in "abc"})
    for k, name in enumerate(want[0]):
        assert t[name].tolist() == [r[k] for r in want[1:]], name
    only = nx.data.read_csv(text.encode(), delimiter=delimiter, columns=["c"], dtypes={"c": "str"})
    assert only["c"].tolist() == [r[3] for r in want[1:]]
