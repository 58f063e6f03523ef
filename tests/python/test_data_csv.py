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
