"""The child process of the fuzzers (fuzz_child.py): reads one call per line (JSON) on stdin,
runs it on nexus, and writes one JSON line back with the outcome. A tensor call (test_fuzz_api.py)
also runs on numpy where numpy has the same op, and the results must agree; a model call
(test_fuzz_models.py) builds, trains, saves and reloads a model, then loads mutated copies of its
checkpoint. A crash of nexus ends this process; the parent sees the closed pipe and reports the
call that did it."""

import json
import math
import os
import sys
import tempfile

import numpy as np
from fuzz_child import DOCUMENTED

import nexus as nx

NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int32": np.int32, "int64": np.int64,
             "bool": np.bool_}
# Ops whose result numpy computes the same way, compared exactly (NaN equal to NaN).
EXACT = {"add", "sub", "mul", "maximum", "minimum", "neg", "abs", "max", "min", "reshape",
         "transpose", "permute", "expand", "getitem", "concat", "stack", "full", "zeros"}


def make(spec, rng):
    """(nexus tensor, numpy array) for {"shape", "dtype", "view"}: random values, then a view."""
    shape, dtype = spec["shape"], spec["dtype"]
    count = int(np.prod(shape))
    values = rng.standard_normal(count) * 10
    values[rng.random(count) < 0.1] = rng.choice([0.0, -0.0, np.inf, -np.inf, np.nan, 1e38, 5e-324])
    arr = np.asarray(values if dtype.startswith("float") else np.nan_to_num(values, posinf=99, neginf=-99))
    arr = arr.astype(NP_DTYPES[dtype]).reshape(shape)
    view = spec.get("view")
    if view == "transpose" and arr.ndim >= 2:
        arr = arr.swapaxes(0, -1)
    elif view == "reverse" and arr.ndim >= 1:
        arr = arr[::-1]
    elif view == "step" and arr.ndim >= 1:
        arr = arr[::2]
    return nx.tensor(arr), arr


# Results between this many elements and what no allocation can hold are real allocations of
# gigabytes: the fuzzer skips them (they test the machine's memory, not Nexus's checks).
LARGE, IMPOSSIBLE = 1 << 24, 1 << 61


def result_size(op, a):
    """The element count a creation call asks for, as Python ints (None for other ops)."""
    if op in ("full", "zeros"):
        dims = a["shape"]
        return 0 if any(d <= 0 for d in dims) else int(np.prod([int(d) for d in dims], dtype=object))
    if op == "arange" and a["step"]:
        q = (a["stop"] - a["start"]) / a["step"]  # inf for a tiny float step: past any allocation
        return max(0, math.ceil(q)) if math.isfinite(q) else (0 if q < 0 else IMPOSSIBLE)
    return None


def run(call, rng):
    op, a = call["op"], call["args"]
    size = result_size(op, a)
    if size is not None and LARGE < size < IMPOSSIBLE:
        return {"outcome": "skipped"}
    xs = [make(s, rng) for s in call["tensors"]]
    t = [x[0] for x in xs]
    n = [x[1] for x in xs]
    table = {
        "add": (lambda: t[0] + t[1], lambda: n[0] + n[1]),
        "sub": (lambda: t[0] - t[1], lambda: n[0] - n[1]),
        "mul": (lambda: t[0] * t[1], lambda: n[0] * n[1]),
        "div": (lambda: t[0] / t[1], None),
        "pow": (lambda: t[0] ** t[1], None),
        "floor_divide": (lambda: t[0] // t[1], None),
        "remainder": (lambda: t[0] % t[1], None),
        "maximum": (lambda: nx.maximum(t[0], t[1]), lambda: np.maximum(n[0], n[1])),
        "minimum": (lambda: nx.minimum(t[0], t[1]), lambda: np.minimum(n[0], n[1])),
        "neg": (lambda: -t[0], lambda: -n[0]),
        "abs": (lambda: abs(t[0]), lambda: np.abs(n[0])),
        "relu": (lambda: nx.relu(t[0]), None),
        "exp": (lambda: nx.exp(t[0]), None),
        "sum": (lambda: nx.sum(t[0], axis=a["axis"], keepdims=a["keepdims"]), None),
        "max": (lambda: nx.max(t[0], axis=a["axis"]), lambda: np.max(n[0], axis=a["axis"])),
        "min": (lambda: nx.min(t[0], axis=a["axis"]), lambda: np.min(n[0], axis=a["axis"])),
        "mean": (lambda: nx.mean(t[0], axis=a["axis"]), None),
        "var": (lambda: nx.var(t[0], axis=a["axis"], ddof=a["ddof"]), None),
        "argmax": (lambda: nx.argmax(t[0], axis=a["axis"]), None),
        "softmax": (lambda: nx.softmax(t[0], axis=a["axis"]), None),
        "logsumexp": (lambda: nx.logsumexp(t[0], axis=a["axis"]), None),
        "reshape": (lambda: t[0].reshape(*a["shape"]), lambda: n[0].reshape(*a["shape"])),
        "transpose": (lambda: t[0].transpose(a["i"], a["j"]), lambda: np.swapaxes(n[0], a["i"], a["j"])),
        "permute": (lambda: t[0].permute(*a["dims"]), lambda: np.transpose(n[0], a["dims"])),
        "expand": (lambda: t[0].expand(*a["shape"]), lambda: np.broadcast_to(n[0], a["shape"])),
        "getitem": (lambda: t[0][slice(*a["slice"])], lambda: n[0][slice(*a["slice"])]),
        "concat": (lambda: nx.concat(t, axis=a["axis"]), lambda: np.concatenate(n, axis=a["axis"])),
        "stack": (lambda: nx.stack(t, axis=a["axis"]), lambda: np.stack(n, axis=a["axis"])),
        "matmul": (lambda: t[0] @ t[1], None),
        "full": (lambda: nx.full(a["shape"], a["value"]), lambda: np.full(a["shape"], a["value"])),
        "zeros": (lambda: nx.zeros(*a["shape"]), lambda: np.zeros(a["shape"], np.float32)),
        "arange": (lambda: nx.arange(a["start"], a["stop"], a["step"]), None),
        "conv2d": (lambda: nx.conv2d(t[0], t[1], stride=a["stride"], padding=a["padding"]), None),
        "max_pool2d": (lambda: nx.max_pool2d(t[0], a["kernel"], a["stride"]), None),
        "avg_pool2d": (lambda: nx.avg_pool2d(t[0], a["kernel"], a["stride"]), None),
        "cross_entropy": (lambda: nx.cross_entropy(t[0], t[1]), None),
        "dropout": (lambda: nx.dropout(t[0], a["p"]), None),
        "astype": (lambda: t[0].astype(a["dtype"]), None),
    }
    ours, ref = table[op]
    try:
        out = ours()
        got = out.numpy() if out.dtype.name != "bfloat16" else None
    except DOCUMENTED as e:
        return {"outcome": type(e).__name__, "message": str(e)[:200]}
    if ref is None or op not in EXACT or got.size > 1 << 20:  # a huge broadcast view: not compared
        return {"outcome": "ok"}
    try:
        want = np.asarray(ref())
    except Exception:  # noqa: BLE001 - numpy refuses what nexus accepts: nothing to compare
        return {"outcome": "ok"}
    if got.shape != want.shape:
        return {"outcome": "mismatch", "message": f"shape {got.shape} vs numpy {want.shape}"}
    if not np.array_equal(got, want.astype(got.dtype, copy=False), equal_nan=got.dtype.kind == "f"):
        return {"outcome": "mismatch", "message": f"values differ from numpy's: {got!r} vs {want!r}"[:300]}
    return {"outcome": "ok"}


def build(c):
    """The call's GraphBuilder model, compiled (each layer's arguments as drawn)."""
    g = nx.GraphBuilder(seed=c["seed"]).input("x", nx.Shape(1, *c["sample"]))
    for spec in c["layers"]:
        getattr(g, spec["layer"])(**spec["args"])
    o = c["optimizer"]
    if o["kind"] == "sgd":
        opt = nx.optim.SGD(lr=o["lr"], momentum=o["momentum"], weight_decay=o["weight_decay"],
                           clip_norm=o["clip_norm"])
    else:
        cls = nx.optim.Adam if o["kind"] == "adam" else nx.optim.AdamW
        opt = cls(lr=o["lr"], weight_decay=o["weight_decay"], clip_norm=o["clip_norm"])
    return g.compile(optimizer=opt, fusion=c["fusion"])


def batch(c, rng):
    """Features of the model's sample shape (or a wrong one, as drawn) and labels."""
    shape = [c["batch"], *c["sample"]]
    if c["shape_error"] == "extra":
        shape.append(2)
    elif c["shape_error"] == "short" and len(shape) > 1:
        shape.pop()
    elif c["shape_error"] == "transposed":
        shape = shape[:1] + shape[1:][::-1]
    if any(d < 0 for d in shape) or int(np.prod(shape, dtype=object)) > LARGE:
        shape = [c["batch"], 3]  # a sample no allocation holds: the builder refused it already
    x = rng.standard_normal(shape).astype(np.float32)
    classes = max(1, min(4, c["classes"]))
    y = {"valid": rng.integers(0, classes, c["batch"]), "negative": -rng.integers(1, 5, c["batch"]),
         "too_large": rng.integers(10**6, 10**7, c["batch"]),
         "float": rng.random(c["batch"])}[c["labels"]]
    return x, y


def mutate(data: bytes, how: str, where: float) -> bytes:
    """A damaged copy of a checkpoint file: truncated, one bit flipped, the safetensors header
    length overwritten, or a byte of the JSON metadata changed."""
    at = min(len(data) - 1, int(where * len(data)))
    if how == "truncate":
        return data[:at]
    if how == "flip":
        return data[:at] + bytes([data[at] ^ (1 << (at % 8))]) + data[at + 1:]
    if how == "header":  # the first 8 bytes: the header's length, little-endian
        return min(2**64 - 1, int(where * 2**64)).to_bytes(8, "little") + data[8:]
    header_end = 8 + int.from_bytes(data[:8], "little")
    at = 8 + int(where * (header_end - 9))
    return data[:at] + b"}" + data[at + 1:]


def run_model(c, rng):
    """Builds, trains two steps, predicts, saves and reloads the model, then loads a damaged copy
    of its checkpoint. The first documented exception ends the call (its name is the outcome)."""
    stage = "build"
    try:
        model = build(c)
        stage = "train"
        x, y = batch(c, rng)
        for _ in range(2):
            model.train_step(x, y)
        before = model.predict(x)
        with tempfile.TemporaryDirectory() as d:
            stage = "checkpoint"
            path = os.path.join(d, "m.nexus")
            model.save(path)
            after = nx.load(path).predict(x)
            if not np.array_equal(before, after, equal_nan=True):
                return {"outcome": "mismatch", "message": "the reloaded model predicts differently"}
            with open(path, "rb") as f:
                data = f.read()
            with open(path, "wb") as f:
                f.write(mutate(data, c["mutation"], c["where"]))
            stage = "damaged checkpoint"
            nx.load(path).predict(x)
    except DOCUMENTED as e:
        return {"outcome": type(e).__name__, "message": str(e)[:200], "stage": stage}
    return {"outcome": "ok", "stage": stage}


def main():
    rng = np.random.default_rng(0)
    for line in sys.stdin:
        call = json.loads(line)
        try:
            result = run_model(call, rng) if call.get("kind") == "model" else run(call, rng)
        except Exception as e:  # noqa: BLE001 - any other exception is a finding: report it
            result = {"outcome": "unexpected", "message": f"{type(e).__name__}: {e}"[:300]}
        sys.stdout.write(json.dumps(result) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
