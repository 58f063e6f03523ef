"""DataParallel with GPU ranks on a one-GPU machine: a GPU rank beside a CPU rank (the gradients
copied to the host while backward runs, then the MPI ring), and two ranks sharing the GPU (NCCL
refuses two ranks on one device, so they keep the ring too). Both equal single-process
full-batch training."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nexus as nx

JOB = Path(__file__).parent / "jobs" / "dp_devices.py"


def reference() -> np.ndarray:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 8)).astype(np.float32)
    y = rng.integers(0, 4, 32)
    g = nx.GraphBuilder(seed=0).input("x", nx.Shape(16, 8)).dense(16, "relu").dense(4, "softmax")
    model = g.compile(optimizer=nx.optim.SGD(lr=0.1))
    for _ in range(3):
        model.train_step(x, y)
    return np.concatenate([p.numpy().ravel() for p in model.params.values()])


@pytest.mark.parametrize("second", ["cpu", "cuda:0"])
def test_a_gpu_rank_trains_with_another_rank_as_one_full_batch_model(second):
    pytest.importorskip("nexus._C_mpi", reason="this build has no MPI extension")
    beside = Path(sys.executable).parent / "mpiexec"
    mpiexec = str(beside) if beside.exists() else shutil.which("mpiexec")
    assert mpiexec, "the MPI extension is built but no mpiexec was found: pip install mpich"
    proc = subprocess.run([mpiexec, "-n", "2", sys.executable, str(JOB), second], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "NEXUS_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = sorted((json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")),
                  key=lambda r: r["rank"])
    assert [r["rank"] for r in rows] == [0, 1]
    ref = reference()
    for r in rows:
        assert r["nccl"] is False  # a CPU rank, or one GPU for both: the host path
        assert r["losses"] == rows[0]["losses"]
        np.testing.assert_allclose(r["params"], ref, rtol=1e-5, atol=1e-6)
