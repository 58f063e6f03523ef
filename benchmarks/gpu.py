"""Nexus on a CUDA device, side by side with PyTorch CUDA in the same run.

    python benchmarks/gpu.py [--quick]

GEMM TFLOP/s (float32, TF32, bfloat16 storage) vs torch.matmul; an elementwise chain's
effective GB/s vs the card's device-to-device copy bandwidth (measured here), torch eager and
torch.compile; an eager training step (forward, backward, SGD update) of MLP 784-1024-1024-10
at batch 256 vs torch eager. Each result is checked against PyTorch before it is timed; times
are medians over repeated runs, each ended by a device synchronize. ratio = torch time / Nexus
time (> 1: Nexus is faster). Absolute times are given: this runs on a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np

import nexus as nx

try:
    import torch
except ImportError:  # the GPU machine's PyTorch is the peer: without it there is nothing to compare
    torch = None


def timed(fn, sync, reps: int, warmup: int = 3) -> float:
    """Median seconds of fn() over reps runs, each followed by sync()."""
    for _ in range(warmup):
        fn()
    sync()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def nx_sync():
    nx.cuda.synchronize()


def torch_sync():
    torch.cuda.synchronize()


def row(name, nx_s, torch_s, unit_fn, unit):
    ratio = torch_s / nx_s
    print(f"| {name} | {nx_s * 1e3:.3f} ms ({unit_fn(nx_s):.1f} {unit}) | "
          f"{torch_s * 1e3:.3f} ms ({unit_fn(torch_s):.1f} {unit}) | {ratio:.2f}x |")
    return ratio


def gemm_row(name, a_np, b_np, dtype, tdtype, reps):
    n = a_np.shape[0]
    a, b = nx.tensor(a_np, dtype=dtype, device="cuda"), nx.tensor(b_np, dtype=dtype, device="cuda")
    ta, tb = torch.tensor(a_np, device="cuda", dtype=tdtype), torch.tensor(b_np, device="cuda", dtype=tdtype)
    got = nx.matmul(a, b)[:64, :64].astype(nx.float32).cpu().numpy()
    np.testing.assert_allclose(got, (ta @ tb)[:64, :64].float().cpu().numpy(), rtol=0.05, atol=0.05 * np.sqrt(n))
    row(name, timed(lambda: nx.matmul(a, b), nx_sync, reps), timed(lambda: ta @ tb, torch_sync, reps),
        lambda s: 2 * n ** 3 / s / 1e12, "TFLOP/s")


def gemm(quick: bool):
    print("\n| GEMM | Nexus | torch | ratio |\n| --- | --- | --- | --- |")
    n = 4096 if quick else 8192
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((n, n), dtype=np.float32), rng.standard_normal((n, n), dtype=np.float32)
    for label, dtype, tdtype, tf32 in [("float32", nx.float32, torch.float32, False),
                                       ("tf32", nx.float32, torch.float32, True),
                                       ("bfloat16", nx.bfloat16, torch.bfloat16, False)]:
        nx.cuda.set_allow_tf32(tf32)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        gemm_row(f"{label} {n}x{n}x{n}", a_np, b_np, dtype, tdtype, 5 if quick else 10)
    nx.cuda.set_allow_tf32(False)
    torch.backends.cuda.matmul.allow_tf32 = False


def chain_nx(t):
    return nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(t) - 0.5 * t


def chain_torch(t):
    return torch.nn.functional.gelu(t * 1.7 + 0.3, approximate="tanh") * torch.sigmoid(t) - 0.5 * t


def elementwise(quick: bool):
    n = (1 << 26) if not quick else (1 << 24)
    x_np = np.random.default_rng(1).standard_normal(n, dtype=np.float32)
    x, tx = nx.tensor(x_np, device="cuda"), torch.tensor(x_np, device="cuda")
    np.testing.assert_allclose(chain_nx(x)[:4096].cpu().numpy(), chain_torch(tx)[:4096].cpu().numpy(),
                               rtol=1e-4, atol=1e-5)
    copy_s = timed(lambda: tx.clone(), torch_sync, 20)
    copy_gbs = 8 * n / copy_s / 1e9
    gbs = lambda s: 8 * n / s / 1e9  # noqa: E731 - read t once, write once
    print(f"\nElementwise chain gelu(1.7t + 0.3) * sigmoid(t) - 0.5t over {n} float32; "
          f"device copy bandwidth {copy_gbs:.0f} GB/s (torch clone)\n")
    print("| chain | Nexus | torch | ratio |\n| --- | --- | --- | --- |")
    nx_s = timed(lambda: chain_nx(x), nx_sync, 20)
    row("Nexus eager vs torch eager", nx_s, timed(lambda: chain_torch(tx), torch_sync, 20), gbs, "GB/s")
    try:
        compiled = torch.compile(chain_torch)
        compiled(tx)
        row("Nexus eager vs torch.compile", nx_s, timed(lambda: compiled(tx), torch_sync, 20), gbs, "GB/s")
    except Exception as e:  # noqa: BLE001 - torch.compile needs a working Triton; report, go on
        print(f"| torch.compile | failed: {type(e).__name__}: {str(e)[:80]} | | |")
    print(f"\nNexus eager chain: {gbs(nx_s) / copy_gbs:.0%} of the copy bandwidth")


def train_step(quick: bool):
    batch, sizes, lr = 256, [784, 1024, 1024, 10], 0.01
    rng = np.random.default_rng(2)
    ws = [rng.standard_normal((a, b), dtype=np.float32) * np.float32(1 / np.sqrt(a)) for a, b in zip(sizes, sizes[1:])]
    x_np = rng.standard_normal((batch, 784), dtype=np.float32)
    y_np = rng.integers(0, 10, batch)

    def nx_params():
        return [nx.tensor(w, device="cuda", requires_grad=True) for w in ws]

    def nx_step(params, x, y):
        h = x
        for i, w in enumerate(params):
            h = h @ w
            if i < len(params) - 1:
                h = nx.relu(h)
        loss = nx.cross_entropy(h, y)
        loss.backward()
        with nx.no_grad():
            new = [(w - lr * w.grad).requires_grad_() for w in params]
        return loss, new

    def torch_step(params, x, y):
        h = x
        for i, w in enumerate(params):
            h = h @ w
            if i < len(params) - 1:
                h = torch.relu(h)
        loss = torch.nn.functional.cross_entropy(h, y)
        loss.backward()
        with torch.no_grad():
            for w in params:
                w -= lr * w.grad
                w.grad = None
        return loss

    x, y = nx.tensor(x_np, device="cuda"), nx.tensor(y_np, device="cuda")
    tx, ty = torch.tensor(x_np, device="cuda"), torch.tensor(y_np, device="cuda")
    p = nx_params()
    tp = [torch.tensor(w, device="cuda", requires_grad=True) for w in ws]
    loss_nx, _ = nx_step(p, x, y)
    loss_t = torch_step([torch.tensor(w, device="cuda", requires_grad=True) for w in ws], tx, ty)
    assert abs(loss_nx.item() - loss_t.item()) < 1e-4, (loss_nx.item(), loss_t.item())
    state = {"p": p}

    def run_nx():
        _, state["p"] = nx_step(state["p"], x, y)

    print("\n| train step (eager: forward, backward, SGD) | Nexus | torch eager | ratio |\n| --- | --- | --- | --- |")
    reps = 10 if quick else 30
    torch_s = timed(lambda: torch_step(tp, tx, ty), torch_sync, reps)
    row(f"MLP 784-1024-1024-10 b{batch}", timed(run_nx, nx_sync, reps), torch_s, lambda s: batch / s / 1e3,
        "k samples/s")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer repetitions")
    args = parser.parse_args()
    if not nx.cuda.is_available():
        raise SystemExit(f"no usable CUDA device: {nx.cuda.unavailable_reason()}")
    if torch is None or not torch.cuda.is_available():
        raise SystemExit("PyTorch with CUDA is the peer of this benchmark: install it (the GPU image has it)")
    print(f"{nx.cuda.get_device_name()} (compute capability {'.'.join(map(str, nx.cuda.get_device_capability()))}), "
          f"torch {torch.__version__}, nexus {nx.__version__}, {time.strftime('%Y-%m-%d')}")
    os.environ.setdefault("NEXUS_CUDA_TF32", "0")
    gemm(args.quick)
    elementwise(args.quick)
    train_step(args.quick)


if __name__ == "__main__":
    main()
