"""Gradient codecs: encode + decode speed against the machine's memory-copy bandwidth.

    python benchmarks/codecs.py [--mb 16] [--threads 1]

For each codec, a buffer of --mb MB of float32 (normal values, as gradients are) is encoded into a
preallocated wire buffer and decoded back into a preallocated float32 buffer (the ring's own
path: Codec.encode(x, out=...) / Codec.decode(..., out=...), the GIL released). Reported:
encode and decode medians, the encode+decode rate in float32 GB/s (buffer bytes / (encode +
decode)), and that rate as a share of this machine's memory-copy bandwidth, measured in the same
run as numpy's copy of the same buffer (one thread: np.copyto is a single memcpy).

The peer, side by side: the same round trip written with numpy (astype float16, a per-block
int8 quantiser, packbits for signs, argpartition for top-k) and, when torch imports, torch's
bf16 cast. Nexus results are checked against the codec's definition first (codec.h).

Bars (issue 21), one thread, 16 MB: fp16, bf16, int8 and sign encode+decode >= 50 % of the copy
bandwidth; topk:0.01 >= 25 %.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import bench_interleaved, fmt_ms, print_run_notes, table, threads  # noqa: E402

CODECS = ("fp16", "bf16", "int8", "sign", "topk:0.01")
BARS = {"fp16": 0.5, "bf16": 0.5, "int8": 0.5, "sign": 0.5, "topk:0.01": 0.25}
BLOCK = 256  # kInt8Block


def numpy_round_trip(spec: str, x: np.ndarray, out: np.ndarray):
    """The codec's round trip written with numpy; returns a callable that runs it into `out`."""
    if spec == "fp16":
        return lambda: np.copyto(out, x.astype(np.float16))
    if spec == "bf16":
        def bf16():
            u = x.view(np.uint32)
            rounded = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
            np.copyto(out, rounded.astype(np.uint32).view(np.float32))
        return bf16
    if spec == "int8":
        blocks = x.reshape(-1, BLOCK)

        def int8():
            scale = np.abs(blocks).max(axis=1, keepdims=True) / 127
            q = np.rint(blocks / scale).astype(np.int8)
            np.multiply(q, scale, out=out.reshape(-1, BLOCK))
        return int8
    if spec == "sign":
        def sign():
            scale = np.float32(np.abs(x).mean())
            bits = np.packbits(np.signbit(x), bitorder="little")
            neg = np.unpackbits(bits, count=x.size, bitorder="little").astype(bool)
            np.copyto(out, np.where(neg, -scale, scale))
        return sign
    k = int(np.ceil(float(spec.split(":")[1]) * x.size))

    def topk():
        idx = np.sort(np.argpartition(-np.abs(x), k)[:k])
        vals = x[idx]
        out.fill(0)
        out[idx] = vals
    return topk


def check_codec(spec: str, x: np.ndarray, decoded: np.ndarray) -> None:
    """Stop the run when a codec's round trip is not what codec.h defines."""
    if spec == "fp16":
        ok = np.array_equal(decoded, x.astype(np.float16).astype(np.float32))
    elif spec == "bf16":
        ok = np.allclose(decoded, x, rtol=2 ** -8, atol=0)
    elif spec == "int8":
        scale = np.abs(x.reshape(-1, BLOCK)).max(axis=1, keepdims=True) / 127
        ok = bool((np.abs(decoded.reshape(-1, BLOCK) - x.reshape(-1, BLOCK)) <= scale * 0.5001).all())
    elif spec == "sign":
        scale = np.float32(np.abs(x.astype(np.float64)).mean())
        ok = np.allclose(decoded, np.where(x < 0, -scale, scale), rtol=1e-6)
    else:
        k = int(np.ceil(float(spec.split(":")[1]) * x.size))
        keep = np.zeros(x.size, bool)
        keep[np.argsort(-np.abs(x), kind="stable")[:k]] = True
        ok = np.array_equal(decoded, np.where(keep, x, 0))
    if not ok:
        raise SystemExit(f"check failed for {spec}: the round trip differs from the codec's definition")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=16, help="buffer size in MB of float32 (default 16)")
    ap.add_argument("--threads", type=int, default=1, help="Nexus threads (the bar is for 1)")
    ap.add_argument("--time", type=float, default=1.0, help="seconds of samples per codec")
    args = ap.parse_args()

    notes = threads(args.threads)
    from nexus import _C

    n = int(args.mb * (1 << 20) / 4) // BLOCK * BLOCK
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    copy_dst = np.empty_like(x)
    (copy,) = bench_interleaved([lambda: np.copyto(copy_dst, x)], rounds=3, min_time=args.time)
    copy_rate = x.nbytes / copy["median"]

    rows = []
    for spec in CODECS:
        codec = _C.comm.Codec(spec)
        wire = np.empty(codec.max_encoded_bytes(n), np.uint8)
        ours, peer_out = np.empty_like(x), np.empty_like(x)
        codec.decode(wire[: codec.encode(x, out=wire)], n, out=ours)
        check_codec(spec, x, ours)
        peer = numpy_round_trip(spec, x, peer_out)
        enc, dec, trip, theirs = bench_interleaved(
            [lambda: codec.encode(x, out=wire),  # noqa: B023
             lambda: codec.decode(wire, n, out=ours),  # noqa: B023
             lambda: codec.decode(wire[: codec.encode(x, out=wire)], n, out=ours),  # noqa: B023
             peer], rounds=5, min_time=args.time)
        rate = x.nbytes / (enc["median"] + dec["median"])
        bar = BARS[spec]
        rows.append([spec, fmt_ms(enc["median"]), fmt_ms(dec["median"]), f"{rate / 1e9:.2f}",
                     f"{rate / copy_rate:.0%}", f">= {bar:.0%}", "met" if rate >= bar * copy_rate else "NOT met",
                     fmt_ms(theirs["median"]), f"{theirs['median'] / trip['median']:.1f}x"])

    print(f"\n{args.mb:g} MB float32, memory copy (np.copyto): {copy_rate / 1e9:.2f} GB/s "
          f"({fmt_ms(copy['median'])})\n")
    table(rows, ["codec", "encode ms", "decode ms", "GB/s", "of copy", "bar", "", "numpy ms",
                 "nexus vs numpy"])
    print_run_notes(notes)


if __name__ == "__main__":
    main()
