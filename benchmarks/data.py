"""JSONL and CSV reading, side by side: nx.data.read_jsonl against pandas, polars, pyarrow and an
orjson loop on a generated file (ids, labels, 32-float feature lists, short strings), and
nx.data.read_csv against pandas, polars and pyarrow on a generated CSV file of 1M rows (2 integer
columns, 12 float columns, 1 quoted string column).

    python benchmarks/data.py            # ~200 MB JSONL, ~250 MB CSV
    python benchmarks/data.py --quick    # a tenth of each

Checks Nexus's columns against a json-module / csv-module reference first, then times every reader
(medians) on the same thread count, and prints MB/s and ratios against pandas and polars.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import string
import sys
import tempfile
import time

BARS = {"pandas": 10.0, "polars": 2.0}  # JSONL: >= 10x pandas (issue 6), >= 2x polars (issue 21)
CSV_BARS = {"pandas": 3.0, "polars": 1.5}  # CSV (issue 21)
CSV_FLOATS = 12


def generate(path: str, target_bytes: int, seed: int = 0) -> int:
    rng = random.Random(seed)
    letters = string.ascii_letters + "é中 _-"
    rows = 0
    with open(path, "w", encoding="utf-8") as f:
        while f.tell() < target_bytes:
            row = {"id": rows, "label": rng.randrange(10),
                   "features": [rng.gauss(0, 1) for _ in range(32)],
                   "name": "".join(rng.choice(letters) for _ in range(rng.randint(3, 12)))}
            f.write(json.dumps(row, ensure_ascii=rows % 2 == 0) + "\n")
            rows += 1
    return rows


def generate_csv(path: str, rows: int, seed: int = 0) -> None:
    """``rows`` rows of: id, count (integers), f0..f11 (Python's repr of floats of several
    magnitudes) and a quoted string that may hold the delimiter or a doubled quote."""
    rng = random.Random(seed)
    words = ["alpha", "beta", "gamma, delta", 'say ""hi""', "epsilon", "zeta eta"]
    with open(path, "w", encoding="utf-8", newline="") as f:
        f.write("id,count," + ",".join(f"f{k}" for k in range(CSV_FLOATS)) + ",name\n")
        for i in range(rows):
            floats = ",".join(repr(rng.gauss(0, 10 ** (k % 4 - 1))) for k in range(CSV_FLOATS))
            f.write(f'{i},{rng.randrange(1000)},{floats},"{rng.choice(words)} {i % 97}"\n')


def check_csv(nx, path: str, rows: int = 20000) -> None:
    import csv
    import itertools

    import numpy as np
    t = nx.data.read_csv(path)
    with open(path, encoding="utf-8", newline="") as f:
        reader = csv.reader(f)
        header = next(reader)
        ref = list(itertools.islice(reader, rows))
    assert list(t) == header and t["id"].dtype == np.int64
    assert t["id"][:rows].tolist() == [int(r[0]) for r in ref]
    for k in range(CSV_FLOATS):
        assert t[f"f{k}"][:rows].tolist() == [float(r[2 + k]) for r in ref], f"f{k} differs"
    assert t["name"][:rows].tolist() == [r[-1] for r in ref]
    print(f"check: the first {rows} rows equal to the csv module's (floats bit for bit)")


def peer(module: str, reader: str, **kwargs):
    """``module.reader(path, **kwargs)`` as a function of the path, or None where the module is
    not installed."""
    import importlib
    try:
        fn = getattr(importlib.import_module(module), reader)
    except ImportError:
        return None
    return lambda p: fn(p, **kwargs)


def csv_readers():
    """name -> function reading the CSV path; None where the peer is not installed."""
    import nexus as nx
    return {"nexus": lambda p: nx.data.read_csv(p), "polars": peer("polars", "read_csv"),
            "pyarrow": peer("pyarrow.csv", "read_csv"), "pandas": peer("pandas", "read_csv")}


def check(nx, path: str) -> None:
    import numpy as np
    t = nx.data.read_jsonl(path)
    with open(path, encoding="utf-8") as f:
        ref = [json.loads(line) for line in f]
    assert t["id"].dtype == np.int64 and t["id"].tolist() == [r["id"] for r in ref]
    assert t["label"].tolist() == [r["label"] for r in ref]
    assert t["features"].shape == (len(ref), 32)
    assert t["features"].tolist() == [r["features"] for r in ref], "features differ"
    assert t["name"].tolist() == [r["name"] for r in ref]
    print(f"check: {len(ref)} rows equal to the json module's (floats bit for bit)")


def readers(threads: int):
    """name -> (function reading the path, note); None where the peer is not installed."""
    out = {}
    import nexus as nx
    nx.set_num_threads(threads)
    out["nexus"] = lambda p: nx.data.read_jsonl(p)
    out["polars"] = peer("polars", "read_ndjson")
    try:
        import pyarrow
        import pyarrow.json as pj
        pyarrow.set_cpu_count(threads)
        pyarrow.set_io_thread_count(threads)
        out["pyarrow"] = lambda p: pj.read_json(p)
    except ImportError:
        out["pyarrow"] = None
    out["pandas"] = peer("pandas", "read_json", lines=True)
    try:
        import numpy as np
        import orjson

        def orjson_loop(p):
            ids, labels, feats, names = [], [], [], []
            with open(p, "rb") as f:
                for line in f:
                    r = orjson.loads(line)
                    ids.append(r["id"]), labels.append(r["label"])
                    feats.append(r["features"]), names.append(r["name"])
            return (np.array(ids), np.array(labels), np.array(feats),
                    np.array(names, dtype=object))
        out["orjson loop"] = orjson_loop
    except ImportError:
        out["orjson loop"] = None
    return out


def median_time(fn, path: str, runs: int) -> float:
    fn(path)  # warm-up (page cache, imports)
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn(path)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench(fns: dict, path: str, mb: float, runs: int, bars: dict, slow: tuple) -> None:
    """Times every reader on ``path`` and prints the table and the bars."""
    results = {}
    for name, fn in fns.items():
        if fn is None:
            print(f"{name}: not installed")
            continue
        results[name] = median_time(fn, path, max(3, runs // 2) if name in slow else runs)
        print(f"{name}: {results[name]:.3f} s", file=sys.stderr)
    print()
    print("| reader | median s | MB/s | vs pandas | vs polars |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for name, t in results.items():
        vp = f"{results['pandas'] / t:.1f}x" if "pandas" in results else "-"
        vl = f"{results['polars'] / t:.2f}x" if "polars" in results else "-"
        print(f"| {name} | {t:.3f} | {mb / t:.0f} | {vp} | {vl} |")
    print()
    for peer, bar in bars.items():
        if peer not in results:
            print(f"bar vs {peer} (>= {bar}x): {peer} not installed")
            continue
        ratio = results[peer] / results["nexus"]
        print(f"bar vs {peer}: {ratio:.2f}x (>= {bar}x) {'PASS' if ratio >= bar else 'MISS'}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a ~20 MB file instead of ~200 MB")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=5, help="timed runs per reader (3 for the slow)")
    args = ap.parse_args()
    os.environ.setdefault("POLARS_MAX_THREADS", str(args.threads))  # before polars is imported
    os.environ.setdefault("NEXUS_NUM_THREADS", str(args.threads))
    import nexus as nx

    tmp = tempfile.mkdtemp(prefix="nexus-bench-data-")
    try:
        path = os.path.join(tmp, "data.jsonl")
        rows = generate(path, (20 if args.quick else 200) << 20)
        mb = os.path.getsize(path) / 1e6
        print(f"file: {mb:.0f} MB, {rows} rows (id, label, 32 floats, a short string); "
              f"{args.threads} threads")
        check(nx, path)
        bench(readers(args.threads), path, mb, args.runs, BARS, ("pandas", "orjson loop"))
        path = os.path.join(tmp, "data.csv")
        generate_csv(path, 100_000 if args.quick else 1_000_000)
        mb = os.path.getsize(path) / 1e6
        print(f"\nfile: {mb:.0f} MB CSV, {100_000 if args.quick else 1_000_000} rows (2 int, "
              f"{CSV_FLOATS} float, 1 quoted string column); {args.threads} threads")
        check_csv(nx, path)
        bench(csv_readers(), path, mb, args.runs, CSV_BARS, ("pandas",))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
