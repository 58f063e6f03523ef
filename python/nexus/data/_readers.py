"""Readers: JSONL, CSV and IDX files (or bytes) to numpy columns, parsed by native threads."""

from __future__ import annotations

import gzip
import os
import zlib
from typing import Iterator, Mapping, Sequence

import numpy as np

from .. import _C

_BYTES = (bytes, bytearray, memoryview)


class Table(dict):
    """Column name -> numpy array, in file order. ``stats`` holds what the read found:
    ``rows``, ``lines`` (physical lines, blank and skipped ones included), ``skipped`` (malformed
    lines skipped under ``on_error="skip"``), ``skipped_lines`` (their 1-based numbers, the first
    100) and ``bytes``."""

    stats: dict

    def __init__(self, columns, stats):
        super().__init__(columns)
        self.stats = stats


def _dtype_name(d) -> str:
    if d in (str, "str", "string", "object", object):
        return "str"
    return np.dtype(d).name


def _options(columns, dtypes, on_error, threads) -> _C.ReadOptions:
    o = _C.ReadOptions()
    if columns is not None:
        if isinstance(columns, str):
            raise TypeError("columns= takes a list of names, not a single string")
        o.columns = [str(c) for c in columns]
    if dtypes:
        if not isinstance(dtypes, Mapping):
            raise TypeError("dtypes= takes a dict {column: dtype}")
        o.dtypes = {str(k): _dtype_name(v) for k, v in dtypes.items()}
        if columns is not None:
            extra = [k for k in o.dtypes if k not in o.columns]
            if extra:
                raise ValueError(f"dtypes= names column {extra[0]!r}, which columns= does not ask "
                                 f"for; columns: {', '.join(o.columns)}")
    if on_error not in ("raise", "skip"):
        raise ValueError(f"on_error must be 'raise' or 'skip', got {on_error!r}")
    o.skip_errors = on_error == "skip"
    if threads is not None:
        if not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
        o.threads = threads
    return o


def _table(result) -> Table:
    columns, stats = result
    return Table(columns, stats)


def read_jsonl(source, columns: Sequence[str] | None = None, dtypes: Mapping | None = None,
               threads: int | None = None, on_error: str = "raise") -> Table:
    """Reads JSON Lines (a path, or bytes) into a :class:`Table` of numpy columns.

    Integers -> int64, other numbers -> float64, true/false -> bool, strings -> object arrays of
    str, lists of numbers of one length -> 2-D arrays. A row without a key (or with null) is
    missing: NaN in float columns; int and bool columns with a missing row become float64 with NaN
    (as in pandas); None in string columns. ``dtypes={"x": "float32"}`` overrides a column's
    dtype; a value an int32/int64 dtype cannot hold raises ValueError naming its line and column
    (even under ``on_error="skip"``), and so does a ``dtypes=`` key that is not a column read. A
    UTF-8 byte order mark at the start is skipped.

    Errors: a malformed line raises ValueError naming its line and byte offset; with
    ``on_error="skip"`` it is left out and counted in ``table.stats``. A missing file raises
    FileNotFoundError.

    Example: ``t = read_jsonl("train.jsonl", dtypes={"label": "int32"}); t["label"]``
    """
    o = _options(columns, dtypes, on_error, threads)
    if isinstance(source, _BYTES):
        return _table(_C.parse_jsonl(source, o))
    return _table(_C.read_jsonl(os.fspath(source), o))


def iter_jsonl(path, chunk_rows: int = 65536, columns: Sequence[str] | None = None,
               dtypes: Mapping | None = None, threads: int | None = None,
               on_error: str = "raise") -> Iterator[Table]:
    """Streams a JSONL file as Tables of ``chunk_rows`` rows each (the last may hold fewer; blank
    lines do not count, lines skipped under ``on_error="skip"`` do), reading the file in blocks
    (never the whole of it). Dtypes are inferred per chunk: pin them with ``dtypes=`` when chunks
    must agree. Line numbers in errors count from the file's start. Errors as
    :func:`read_jsonl`; a ``dtypes=`` key that no line has raises once the file is exhausted.

    Example: ``for chunk in iter_jsonl("huge.jsonl", chunk_rows=100_000): ...``
    """
    if not isinstance(chunk_rows, int) or chunk_rows < 1:
        raise ValueError(f"chunk_rows must be an integer >= 1, got {chunk_rows!r}")
    reader = _C.JsonlReader(os.fspath(path), _options(columns, dtypes, on_error, threads),
                            chunk_rows)
    while (chunk := reader.next()) is not None:
        yield _table(chunk)


def read_csv(source, columns: Sequence[str] | None = None, dtypes: Mapping | None = None,
             delimiter: str = ",", quotechar: str = '"', header: bool = True,
             names: Sequence[str] | None = None, threads: int | None = None,
             on_error: str = "raise") -> Table:
    """Reads CSV (a path, or bytes) into a :class:`Table`. Each column is bool, int64, float64
    or str, inferred from its values; a column mixing numbers and text is str (the original
    text). Empty fields and NA, N/A, NULL, null, NaN, nan, None, <NA>, #N/A are missing (same
    fills as :func:`read_jsonl`). ``header=False`` names columns ``column_0, ...`` unless
    ``names=`` is given. Quoted fields may hold the delimiter, newlines and doubled quotes. Lines
    end in ``\n``, ``\r\n`` or a lone ``\r`` (as pandas reads them); a UTF-8 byte order mark
    at the start is skipped. ``dtypes=`` and the errors are as in :func:`read_jsonl`.

    Example: ``t = read_csv("t.csv", dtypes={"zip": "str"}); t["zip"]``
    """
    o = _options(columns, dtypes, on_error, threads)
    c = _C.CsvOptions()
    for name, ch in (("delimiter", delimiter), ("quotechar", quotechar)):
        if not isinstance(ch, str) or len(ch) != 1 or ord(ch) > 127:
            raise ValueError(f"{name} must be one ASCII character, got {ch!r}")
    c.delimiter, c.quote, c.header = delimiter, quotechar, bool(header)
    if names is not None:
        c.names = [str(n) for n in names]
    if isinstance(source, _BYTES):
        return _table(_C.parse_csv(source, o, c))
    return _table(_C.read_csv(os.fspath(source), o, c))


def read_idx(source) -> np.ndarray:
    """Reads an IDX file (MNIST's format; raw or gzip-compressed, by content) or IDX bytes into
    a numpy array of its shape and dtype (uint8, int8, int16, int32, float32 or float64).
    Malformed data raises ValueError, a missing file FileNotFoundError.

    Example: ``images = read_idx("train-images-idx3-ubyte.gz")``
    """
    if not isinstance(source, _BYTES):
        path = os.fspath(source)
        with open(path, "rb") as f:
            gz = f.read(2) == b"\x1f\x8b"
        if not gz:
            flat, shape = _C.read_idx(path)
            return flat.reshape(shape)
        with open(path, "rb") as f:
            source = f.read()
    if bytes(source[:2]) == b"\x1f\x8b":
        try:
            source = gzip.decompress(source)
        except (OSError, EOFError, zlib.error) as e:
            raise ValueError(f"read_idx: the gzip stream is damaged: {e}") from e
    flat, shape = _C.parse_idx(source)
    return flat.reshape(shape)
