"""ONNX inference: nexus.onnx vs onnxruntime vs PyTorch eager, side by side in one run.

    python benchmarks/inference.py [--threads 2] [--quick] [--models mlp,lenet,resnet,encoder]

Each model is built in PyTorch, exported to ONNX (the TorchScript exporter for the MLP and CNNs,
torch.export for the encoder, whose sequence length stays symbolic), and run by nexus.onnx.load,
onnxruntime (CPUExecutionProvider, the same thread count, one inter-op thread) and PyTorch eager
(no_grad). Nexus's outputs are checked against onnxruntime's first. Then, alternating between the
engines in rounds so that machine noise hits each alike:
- latency at batch 1: p50 and p99 of single calls (numpy in, numpy out), 12 s of calls per
  engine in 15 rounds;
- throughput at batch 64: samples/s (median);
- cold start: load + first run, in this process (Nexus's kernel cache in a fresh directory).
ratio = peer / nexus (latency) or nexus / peer (throughput): > 1 means Nexus is faster.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import warnings

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import SETTLE_S, print_run_notes, table, threads  # noqa: E402

os.environ.setdefault("NEXUS_CACHE_DIR", tempfile.mkdtemp(prefix="nx-inference-cache-"))  # cold kernels

import onnxruntime as ort  # noqa: E402
import torch  # noqa: E402

import nexus as nx  # noqa: E402

BARS = ("p99 at batch 1 <= onnxruntime's on every model; throughput at batch 64 >= 1.0x onnxruntime "
        "on the MLP and the CNNs")


class ResidualBlock(torch.nn.Module):
    """conv-bn-relu, conv-bn, plus the input (a 1x1 conv when the shape changes), relu."""

    def __init__(self, c_in: int, c_out: int, stride: int):
        super().__init__()
        self.body = torch.nn.Sequential(
            torch.nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False), torch.nn.BatchNorm2d(c_out), torch.nn.ReLU(),
            torch.nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(c_out))
        self.skip = torch.nn.Identity() if stride == 1 and c_in == c_out else torch.nn.Sequential(
            torch.nn.Conv2d(c_in, c_out, 1, stride, bias=False), torch.nn.BatchNorm2d(c_out))

    def forward(self, x):
        return torch.relu(self.body(x) + self.skip(x))


class EncoderClassifier(torch.nn.Module):
    """BERT-style: token embeddings, a post-norm transformer encoder, mean pooling, a linear head."""

    def __init__(self, vocab: int = 1000, d: int = 128, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, d)
        layer = torch.nn.TransformerEncoderLayer(d, heads, 4 * d, dropout=0.0, activation="gelu", batch_first=True)
        self.encoder = torch.nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(d, 2)

    def forward(self, ids, mask):
        return self.head(self.encoder(self.embed(ids), src_key_padding_mask=mask == 0).mean(1))


def build(name: str):
    """(torch module, example-input maker by batch size, ONNX bytes)."""
    torch.manual_seed(0)
    if name == "mlp":
        m = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        shape = (784,)
    elif name == "lenet":
        m = torch.nn.Sequential(
            torch.nn.Conv2d(1, 6, 5, padding=2), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
            torch.nn.Linear(400, 120), torch.nn.ReLU(), torch.nn.Linear(120, 84), torch.nn.ReLU(),
            torch.nn.Linear(84, 10))
        shape = (1, 28, 28)
    elif name == "resnet":
        blocks = [ResidualBlock(16, 16, 1), ResidualBlock(16, 16, 1), ResidualBlock(16, 32, 2),
                  ResidualBlock(32, 32, 1), ResidualBlock(32, 64, 2), ResidualBlock(64, 64, 1)]
        m = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, 1, 1, bias=False), torch.nn.BatchNorm2d(16),
                                torch.nn.ReLU(), *blocks, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                torch.nn.Linear(64, 10))
        shape = (3, 32, 32)
    else:
        m = EncoderClassifier()
    m.eval()
    if name == "encoder":
        def inputs(batch, seq=128):
            rng = np.random.default_rng(batch)
            return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
                    "attention_mask": np.ones((batch, seq), np.int64)}
        ex = inputs(2, 16)
        b, s = torch.export.Dim("batch"), torch.export.Dim("seq")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            prog = torch.onnx.export(m, (torch.from_numpy(ex["input_ids"]), torch.from_numpy(ex["attention_mask"])),
                                     dynamo=True, input_names=["input_ids", "attention_mask"], output_names=["out"],
                                     dynamic_shapes={"ids": {0: b, 1: s}, "mask": {0: b, 1: s}}, opset_version=18,
                                     verbose=False)
        return m, inputs, prog.model_proto.SerializeToString()

    def inputs(batch):
        return {"x": np.random.default_rng(batch).standard_normal((batch, *shape)).astype(np.float32)}
    f = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(m, (torch.from_numpy(inputs(2)["x"]),), f, dynamo=False, input_names=["x"],
                          output_names=["out"], dynamic_axes={"x": {0: "batch"}}, opset_version=17)
    return m, inputs, f.getvalue()


def engines(module, model_bytes: bytes, n_threads: int):
    """name -> (cold-start seconds, callable(feeds) -> numpy output)."""
    t0 = time.perf_counter()
    nx_model = nx.onnx.load(model_bytes)
    nx_load = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads, opts.inter_op_num_threads = n_threads, 1
    t0 = time.perf_counter()
    session = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    ort_load = time.perf_counter() - t0

    def run_torch(feeds):
        with torch.no_grad():
            return module(*[torch.from_numpy(v) for v in feeds.values()]).numpy()
    return {"nexus": (nx_load, nx_model.run), "onnxruntime": (ort_load, lambda f: session.run(None, f)[0]),
            "torch eager": (0.0, run_torch)}


ENGINES, PEERS = ("nexus", "onnxruntime", "torch eager"), ("onnxruntime", "torch eager")


def calls(eng: dict, feeds: dict) -> dict:
    """name -> a call of that engine on ``feeds``."""
    return {k: (lambda fn=fn: fn(feeds)) for k, (_, fn) in eng.items()}


def interleaved_samples(fns: dict, min_time: float, rounds: int = 5) -> dict:
    """name -> sorted call times: each fn called for min_time/rounds per round, in turn, each
    slice after SETTLE_S of quiet (the engine before it leaves idle threads spinning)."""
    times = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            time.sleep(SETTLE_S)
            start = time.perf_counter()
            while True:
                t0 = time.perf_counter()
                fn()
                times[k].append(time.perf_counter() - t0)
                if time.perf_counter() - start >= min_time / rounds and len(times[k]) >= 3:
                    break
    return {k: sorted(v) for k, v in times.items()}


def quantile(sorted_times: list, q: float) -> float:
    return sorted_times[min(len(sorted_times) - 1, int(q * len(sorted_times)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="shorter timing (a smoke run)")
    ap.add_argument("--models", default="mlp,lenet,resnet,encoder")
    args = ap.parse_args()
    notes = threads(args.threads)
    torch.set_num_threads(args.threads)
    print(f"# ONNX inference: nexus.onnx vs onnxruntime {ort.__version__} vs PyTorch {torch.__version__} eager\n")
    print(f"- bars: {BARS}")
    print_run_notes(notes + [f"onnxruntime threads: {args.threads} intra-op, 1 inter-op"])
    min_time = 0.5 if args.quick else 4.0
    latency_rows, throughput_rows, cold_rows = [], [], []
    for name in args.models.split(","):
        module, inputs, model_bytes = build(name)
        eng = engines(module, model_bytes, args.threads)
        first = {}
        for k, (load, fn) in eng.items():
            t0 = time.perf_counter()
            fn(inputs(1))
            first[k] = load + time.perf_counter() - t0
        for batch in (1, 17, 64):
            feeds = inputs(batch)
            ours, ref = eng["nexus"][1](feeds), eng["onnxruntime"][1](feeds)
            err = float(np.max(np.abs(ours - ref)))
            if not err <= 1e-4 * max(1.0, float(np.max(np.abs(ref)))):
                raise SystemExit(f"{name} batch {batch}: nexus differs from onnxruntime by {err:g}")
        # A p99 is set by the machine's bursts as much as by the engine: three times the calls, in
        # three times the rounds, so that a burst of a few tens of ms in one engine's slice stays
        # under 1 % of its calls (4 s gave the encoder ~1400 calls, its p99 their 14th slowest).
        lat = interleaved_samples(calls(eng, inputs(1)), 3 * min_time, rounds=15)
        p = {k: (quantile(v, 0.5) * 1e3, quantile(v, 0.99) * 1e3) for k, v in lat.items()}
        latency_rows.append([name, *(f"{p[k][0]:.3f} / {p[k][1]:.3f}" for k in ENGINES),
                             *(f"{p[k][1] / p['nexus'][1]:.2f}x" for k in PEERS)])
        thr = interleaved_samples(calls(eng, inputs(64)), min_time)
        sps = {k: 64 / quantile(v, 0.5) for k, v in thr.items()}
        throughput_rows.append([name, *(f"{sps[k]:.0f}" for k in ENGINES),
                                *(f"{sps['nexus'] / sps[k]:.2f}x" for k in PEERS)])
        cold_rows.append([name, f"{first['nexus'] * 1e3:.0f}", f"{first['onnxruntime'] * 1e3:.0f}"])
    print("## Latency at batch 1 (ms, p50 / p99; ratio of p99: peer / nexus)\n")
    table(latency_rows, ["model", "nexus", "onnxruntime", "torch eager", "vs onnxruntime", "vs torch"])
    print("\n## Throughput at batch 64 (samples/s, median; ratio: nexus / peer)\n")
    table(throughput_rows, ["model", "nexus", "onnxruntime", "torch eager", "vs onnxruntime", "vs torch"])
    print("\n## Cold start: load + first run at batch 1 (ms; Nexus compiles its fused kernels here)\n")
    table(cold_rows, ["model", "nexus", "onnxruntime"])
    if "encoder" in args.models:
        print("\n(encoder: sequence length 128)")


if __name__ == "__main__":
    main()
