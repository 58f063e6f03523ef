"""mpiexec job for tests/gpu/test_cuda_data_parallel.py: two ranks train one model with
DataParallel, rank 0 on cuda:0 and rank 1 on the device argv[1] names; each rank prints one JSON
line: whether NCCL reduced the gradients, the losses, and its parameters after the steps."""

import json
import sys

import numpy as np

import nexus as nx
import nexus.distributed as dist

RANK = dist.rank()
rng = np.random.default_rng(0)
x = rng.standard_normal((32, 8)).astype(np.float32)
y = rng.integers(0, 4, 32)
g = nx.GraphBuilder(seed=0).input("x", nx.Shape(16, 8)).dense(16, "relu").dense(4, "softmax")
model = g.compile(optimizer=nx.optim.SGD(lr=0.1), device="cuda:0" if RANK == 0 else sys.argv[1])
dp = dist.DataParallel(model)
rows = slice(16 * RANK, 16 * RANK + 16)
losses = [dp.train_step(x[rows], y[rows]) for _ in range(3)]
params = np.concatenate([p.cpu().numpy().ravel() for p in model.params.values()])
print(json.dumps({"rank": RANK, "nccl": dp.nccl, "losses": losses, "params": params.tolist()}), flush=True)
