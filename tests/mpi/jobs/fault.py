"""mpiexec job for tests/mpi/test_mpi_faults.py. Usage: fault.py raise|timeout|step_timeout.

raise:   the last rank raises while the others wait in an all-reduce for it; the job must end
         non-zero with a message naming that rank.
timeout: the last rank never joins the all-reduce (it sleeps); rank 0's wait must time out with
         CommError naming itself and its peer, and the job must end non-zero.
step_timeout: the same in a data-parallel step through shared memory (csrc/comm/shared_step.h):
         rank 0's wait must name the rank that did not arrive.
"""

import sys
import time

import numpy as np

import nexus as nx
import nexus.distributed as dist

RANK, N = dist.rank(), dist.world_size()
dist.barrier()
print(f"rank {RANK} ready", flush=True)
if sys.argv[1] == "step_timeout":
    g = nx.GraphBuilder(seed=0)
    g.input("x", nx.Shape(8, 4)).dense(3, "softmax")
    dp = dist.DataParallel(g.compile(loss="cross_entropy"))
    assert dp.shared_memory
    if RANK == N - 1:
        time.sleep(120)  # never joins the step
    dp.train_step(np.ones((8, 4), np.float32), np.zeros(8, np.int64))
    print(f"rank {RANK} finished the step (it should not)", flush=True)
if RANK == N - 1:
    if sys.argv[1] == "raise":
        raise ValueError(f"deliberate failure on rank {RANK}")
    time.sleep(120)  # never joins; mpiexec ends this process once another rank aborts
dist.all_reduce(np.ones(1000, np.float32))
print(f"rank {RANK} finished the all-reduce (it should not)", flush=True)
