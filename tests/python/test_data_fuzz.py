"""Fuzzing the text parsers: any bytes either parse or raise ValueError, never crash; valid
lines parse to what json.loads gives."""

import json

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import nexus as nx

VALID = (b'{"id": 1, "x": 0.5, "l": [1.5, -2e-3], "s": "a\\u00e9\\ud83d\\ude00", "b": true}\n'
         b'{"id": 2, "x": -1, "l": [3, 4], "s": "q\\"\\n", "b": false, "n": null}\n')
CSV = b'a,b,c\n1,2.5,"x,""y"""\n3,,z\n'


def _parse_or_value_error(fn, data, **kw):
    try:
        fn(bytes(data), **kw)
    except ValueError:
        pass


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200))
def test_random_bytes_parse_or_raise(data):
    for on_error in ("raise", "skip"):
        _parse_or_value_error(nx.data.read_jsonl, data, on_error=on_error)
        _parse_or_value_error(nx.data.read_csv, data, on_error=on_error)
        _parse_or_value_error(nx.data.read_idx, data)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_valid_lines_parse_or_raise(draw):
    for base, fn in ((VALID, nx.data.read_jsonl), (CSV, nx.data.read_csv)):
        data = bytearray(base)
        for _ in range(draw.draw(st.integers(1, 4))):
            i = draw.draw(st.integers(0, len(data)))
            op = draw.draw(st.sampled_from(["flip", "insert", "delete"]))
            byte = draw.draw(st.sampled_from(b'{}[]",:\\ntfn0-.eE\x00\xff\xc3 '))
            if op == "insert" or not data:
                data.insert(i, byte)
            elif op == "delete":
                del data[min(i, len(data) - 1)]
            else:
                data[min(i, len(data) - 1)] = byte
        _parse_or_value_error(fn, data)
        _parse_or_value_error(fn, data, on_error="skip")


json_scalar = st.one_of(st.integers(-2**63, 2**63 - 1), st.booleans(), st.text(max_size=8),
                        st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.fixed_dictionaries({"k": json_scalar}), min_size=1, max_size=10))
def test_valid_lines_match_json_loads(rows):
    data = "".join(json.dumps(r) + "\n" for r in rows).encode()
    kinds = {type(r["k"]) for r in rows}
    if len(kinds - {int, float}) > 0 and len(kinds) > 1:
        return  # a type conflict, which raises by design
    if kinds == {bool}.union(kinds) and len(kinds) > 1:
        return
    got = nx.data.read_jsonl(data)["k"].tolist()
    want = [json.loads(line)["k"] for line in data.decode().splitlines()]
    assert got == [float(w) if isinstance(w, (int, float)) and float in kinds else w
                   for w in want]
    assert np.asarray(got).shape == (len(rows),)


IDX = bytes([0, 0, 0x08, 3]) + b"".join(d.to_bytes(4, "big") for d in (2, 3, 4)) + bytes(range(24))


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mutated_idx_files_parse_or_raise(draw):
    # Headers that declare huge sizes (each dim up to 2^32 - 1), other types and ranks, data cut
    # short or too long: a ValueError (or MemoryError for a size no allocation holds), never a
    # read past the data.
    data = bytearray(IDX)
    for _ in range(draw.draw(st.integers(1, 3))):
        where = draw.draw(st.sampled_from(["type", "rank", "dim"]))
        if where == "type":
            data[2] = draw.draw(st.sampled_from([0x08, 0x09, 0x0B, 0x0C, 0x0D, 0x0E, 0x00, 0xFF]))
        elif where == "rank":
            data[3] = draw.draw(st.integers(0, 255))
        else:
            at = 4 + 4 * draw.draw(st.integers(0, 2))
            data[at:at + 4] = draw.draw(st.sampled_from([0, 1, 7, 2**31, 2**32 - 1])).to_bytes(4, "big")
    end = draw.draw(st.sampled_from(["keep", "cut", "extend"]))
    if end == "cut":
        del data[draw.draw(st.integers(0, len(data))):]
    elif end == "extend":
        data += bytes(draw.draw(st.integers(1, 64)))
    try:
        out = nx.data.read_idx(bytes(data))
    except (ValueError, MemoryError):
        return
    assert out.size * out.itemsize + 4 + 4 * out.ndim == len(data)
