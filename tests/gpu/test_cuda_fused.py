"""Fused kernels on a CUDA device: a compiled model's elementwise groups run as generated kernels
(NVRTC -> PTX, cached on disk per architecture) and give the losses of the unfused model."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import nexus as nx

_C_cuda = pytest.importorskip("nexus._C_cuda", reason="this build has no CUDA backend")

DEV = "cuda:0"


def mlp(device, fusion):
    g = (nx.GraphBuilder(seed=0).input("x", nx.Shape(32, 20)).dense(64, "relu").dense(32, "tanh")
         .dense(16, "gelu").dense(5, "softmax"))
    return g.compile(optimizer=nx.optim.SGD(lr=0.1, momentum=0.9), device=device, fusion=fusion)


def lenet(device, fusion):
    # batch norm broadcasts (C,) over (N, C, H, W): its kernels walk rows over two outer dims
    g = nx.GraphBuilder(seed=0).input("x", nx.Shape(8, 1, 16, 16))
    g.conv2d(4, 3, padding="same", activation="relu").batch_norm().max_pool2d(2)
    g.conv2d(8, 3, activation="relu").max_pool2d(2).flatten().dense(16, "relu")
    return g.dense(10, "softmax").compile(optimizer=nx.optim.Adam(lr=1e-2), device=device, fusion=fusion)


def data(make):
    rng = np.random.default_rng(21)
    shape = (32, 20) if make is mlp else (8, 1, 16, 16)
    return rng.standard_normal(shape).astype(np.float32), rng.integers(0, 5, shape[0])


@pytest.mark.parametrize("make", [mlp, lenet])
def test_fused_kernels_on_the_device_give_the_unfused_losses(make):
    x, y = data(make)
    losses = {}
    for device, fusion in ((DEV, True), (DEV, False), ("cpu", True)):
        model = make(device, fusion)
        before = _C_cuda.generated_stats()["launches"]
        losses[device, fusion] = [model.train_step(x, y) for _ in range(4)] + list(np.ravel(model.predict(x)))
        launched = _C_cuda.generated_stats()["launches"] - before
        if device == DEV and fusion:
            assert model.fusion_stats(x.shape[0])["kernels"] > 0
            assert launched > 0
        else:
            assert launched == 0
    # The same GEMMs and the same kern:: functions on the device: fused and unfused agree closely.
    np.testing.assert_allclose(losses[DEV, True], losses[DEV, False], rtol=1e-5, atol=1e-7)
    # The host's GEMMs add in another order (as in test_cuda_tensors' compiled-model test).
    np.testing.assert_allclose(losses[DEV, True], losses["cpu", True], rtol=1e-4, atol=1e-6)


def test_reductions_and_wide_groups_run_node_by_node_on_the_device():
    model = lenet(DEV, True)
    on_host = lenet("cpu", True)
    kernels = {g["kernel"] for g in model.fusion_stats(8)["groups"]}
    host_groups = on_host.fusion_stats(8)["groups"]
    assert kernels == {g["kernel"] for g in host_groups if g["program"].runs_on_device}
    assert len(kernels) < len(host_groups)


SCRIPT = """
import json, numpy as np, nexus as nx
from nexus import _C_cuda
g = nx.GraphBuilder(seed=0).input("x", nx.Shape(16, 8)).dense(16, "relu").dense(4, "softmax")
model = g.compile(device="cuda:0")
rng = np.random.default_rng(0)
loss = model.train_step(rng.standard_normal((16, 8)).astype(np.float32), rng.integers(0, 4, 16))
print(json.dumps(dict(_C_cuda.generated_stats(), loss=loss)))
"""


def test_a_second_process_loads_the_kernels_from_the_disk_cache(tmp_path):
    env = dict(os.environ, NEXUS_CACHE_DIR=str(tmp_path))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)
        assert out.returncode == 0, out.stderr
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["compiles"] > 0 and first["launches"] > 0
    assert second["compiles"] == 0 and second["disk_hits"] == first["compiles"]
    assert second["loss"] == first["loss"]
    assert list((tmp_path / "cuda").glob("*.ptx"))
