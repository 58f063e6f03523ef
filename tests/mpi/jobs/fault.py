"""mpiexec job for tests/mpi/test_mpi_faults.py. Usage: fault.py raise|timeout.

raise:   the last rank raises while the others wait in an all-reduce for it; the job must end
         non-zero with a message naming that rank.
timeout: the last rank never joins the all-reduce (it sleeps); rank 0's wait must time out with
         CommError naming itself and its peer, and the job must end non-zero.
"""

import sys
import time

import numpy as np

import nexus.distributed as dist

RANK, N = dist.rank(), dist.world_size()
dist.barrier()
print(f"rank {RANK} ready", flush=True)
if RANK == N - 1:
    if sys.argv[1] == "raise":
        raise ValueError(f"deliberate failure on rank {RANK}")
    time.sleep(120)  # never joins; mpiexec ends this process once another rank aborts
dist.all_reduce(np.ones(1000, np.float32))
print(f"rank {RANK} finished the all-reduce (it should not)", flush=True)
