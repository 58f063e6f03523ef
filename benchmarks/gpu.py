"""Nexus on a CUDA device, side by side with PyTorch CUDA in the same run.

    python benchmarks/gpu.py [--quick]

GEMM TFLOP/s (float32, TF32, bfloat16 storage) vs torch.matmul; an elementwise chain's
effective GB/s vs the card's device-to-device copy bandwidth (measured here), torch eager and
torch.compile; the compiled training step (forward, backward, Adam update) of MLP
784-1024-1024-10 at batch 256 and LeNet at batch 64 vs torch eager and torch.compile; an epoch
of that MLP fed from host arrays, with and without the DataLoader's prefetch to the device, vs
torch's DataLoader (pinned memory, non_blocking copies). Each
result is checked against PyTorch before it is timed; times are medians over repeated runs,
each ended by a device synchronize. ratio = torch time / Nexus
time (> 1: Nexus is faster). Absolute times are given: this runs on a GPU.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
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
    fused = nx.jit(chain_nx)
    np.testing.assert_allclose(fused(x)[:4096].cpu().numpy(), chain_torch(tx)[:4096].cpu().numpy(),
                               rtol=1e-4, atol=1e-5)
    nx_s = timed(lambda: chain_nx(x), nx_sync, 20)
    jit_s = timed(lambda: fused(x), nx_sync, 20)
    torch_s = timed(lambda: chain_torch(tx), torch_sync, 20)
    row("Nexus eager vs torch eager", nx_s, torch_s, gbs, "GB/s")
    row("Nexus nx.jit vs torch eager", jit_s, torch_s, gbs, "GB/s")
    try:
        compiled = torch.compile(chain_torch)
        compiled(tx)
        compiled_s = timed(lambda: compiled(tx), torch_sync, 20)
        row("Nexus eager vs torch.compile", nx_s, compiled_s, gbs, "GB/s")
        row("Nexus nx.jit vs torch.compile", jit_s, compiled_s, gbs, "GB/s")
    except Exception as e:  # noqa: BLE001 - torch.compile needs a working Triton; report, go on
        print(f"| torch.compile | failed: {type(e).__name__}: {str(e)[:80]} | | |")
    print(f"\nNexus eager chain: {gbs(nx_s) / copy_gbs:.0%} of the copy bandwidth; nx.jit (one fused "
          f"kernel): {gbs(jit_s) / copy_gbs:.0%} (bar: 70 %)")


def cycle(step, xs, ys):
    """step() on batch 0, 1, ..., 0, ...: a fresh batch per call, no data preparation timed."""
    state = {"i": 0}

    def fn():
        state["i"] = (state["i"] + 1) % len(xs)
        return step(xs[state["i"]], ys[state["i"]])
    return fn


def train_step_case(ts, key, reps):
    """One case of train_step.py on the GPU: Nexus's compiled model vs the same torch model
    (eager, then torch.compile), from the same initial parameters; losses checked first."""
    case = ts.CASES[key]
    xs, ys = ts.batches(case)
    ours = ts.build_nexus(case)
    model, opt, _ = ts.torch_like_nexus(case, ours.params)
    ours.to("cuda")
    model.cuda()
    opt = type(opt)(model.parameters(), **opt.defaults)  # the optimizer over the moved parameters
    gx, gy = [nx.tensor(x, device="cuda") for x in xs], [nx.tensor(y, device="cuda") for y in ys]
    tx, ty = torch.from_numpy(xs).cuda(), torch.from_numpy(ys).cuda()
    step = ts.torch_step_fn(model, opt)
    np.testing.assert_allclose([ours.train_step(gx[i], gy[i]) for i in range(3)],
                               [step(tx[i], ty[i]) for i in range(3)], rtol=1e-3)
    nx_s = timed(cycle(ours.train_step, gx, gy), nx_sync, reps)
    label = f"{case.model} b{case.batch}, {case.optimizer_label}"
    steps = lambda s: 1e-3 / s  # noqa: E731
    row(f"{label} vs torch eager", nx_s, timed(cycle(step, tx, ty), torch_sync, reps), steps, "k steps/s")
    try:
        compiled = ts.torch_step_fn(torch.compile(model), opt)
        compiled(tx[0], ty[0])
        row(f"{label} vs torch.compile", nx_s, timed(cycle(compiled, tx, ty), torch_sync, reps), steps, "k steps/s")
    except Exception as e:  # noqa: BLE001 - torch.compile needs a working Triton; report, go on
        print(f"| {label} vs torch.compile | failed: {type(e).__name__}: {str(e)[:80]} | | |")


def train_steps(quick: bool):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_step as ts  # noqa: PLC0415 - the CPU benchmark's models, parameters and batches

    print("\n| train step (forward, backward, update) | Nexus | torch | ratio |\n| --- | --- | --- | --- |")
    for key in ("mlp-large-adam", "lenet-adam"):
        train_step_case(ts, key, 10 if quick else 50)


def feeding(quick: bool):
    """An epoch of the MLP step fed from host arrays, against torch's DataLoader with pinned
    memory and non_blocking copies: Nexus with batches copied as each step takes them
    (device=None) and with the DataLoader's prefetch to the GPU (device="cuda")."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import train_step as ts  # noqa: PLC0415

    case = ts.CASES["mlp-large-adam"]
    n = case.batch * (20 if quick else 100)
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((n, 784)).astype(np.float32), rng.integers(0, 10, n)
    ours = ts.build_nexus(case)
    model, opt, _ = ts.torch_like_nexus(case, ours.params)
    ours.to("cuda")
    model.cuda()
    step = ts.torch_step_fn(model, type(opt)(model.parameters(), **opt.defaults))
    data = torch.utils.data.TensorDataset(torch.from_numpy(x), torch.from_numpy(y))

    def nexus_epoch(device):
        return lambda: [ours.train_step(xb, yb) for xb, yb in
                        nx.data.DataLoader((x, y), case.batch, drop_last=True, device=device)]

    def torch_epoch():
        for xb, yb in torch.utils.data.DataLoader(data, case.batch, shuffle=True, drop_last=True, pin_memory=True):
            step(xb.cuda(non_blocking=True), yb.cuda(non_blocking=True))

    reps = 3 if quick else 5
    torch_s = timed(torch_epoch, torch_sync, reps, warmup=1)
    per_s = lambda s: n / s / 1e3  # noqa: E731
    print(f"\n| epoch of {n} samples from host arrays, {case.model} b{case.batch} | Nexus | torch DataLoader "
          "(pinned, non_blocking) | ratio |\n| --- | --- | --- | --- |")
    row("batches copied per step", timed(nexus_epoch(None), nx_sync, reps, warmup=1), torch_s, per_s, "k samples/s")
    row("DataLoader(device='cuda')", timed(nexus_epoch("cuda"), nx_sync, reps, warmup=1), torch_s, per_s,
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
    train_steps(args.quick)
    feeding(args.quick)


if __name__ == "__main__":
    main()
