"""Distributed training over MPI: ``import nexus.distributed as dist``.

Launch the same script on every rank with ``mpiexec -n 4 python train.py``; a plain ``python``
process is a world of one. ``init()`` joins MPI's COMM_WORLD through mpi4py (every function here
calls it). Collectives work in place on numpy arrays and nexus Tensors:

    dist.all_reduce(x, op="sum"|"mean"|"max"|"min", compression=None)  # the C++ ring
    dist.broadcast(x, root=0); parts = dist.all_gather(x); dist.barrier()  # parts[r]: rank r's x
    dist.last_stats()        # bytes_sent, bytes_uncompressed, seconds of the last all-reduce
    dist.ring_shift(send, recv)  # send to rank + 1, receive from rank - 1 (a link measurement)
    dist.codec_spec("int8")  # a compression argument's canonical codec spec
    dp = dist.DataParallel(model, compression="int8"); dp.train_step(xb, yb)

``model.fit(..., distributed=True, compression=...)`` does the same inside ``fit``.
"""

from ._world import (CommError, Stats, all_gather, all_reduce, barrier, broadcast, codec_spec,
                     init, is_initialized, last_stats, rank, ring_shift, world_size)
from .data_parallel import DataParallel

__all__ = ["init", "is_initialized", "rank", "world_size", "barrier", "broadcast", "all_gather",
           "all_reduce", "ring_shift", "codec_spec", "last_stats", "Stats", "CommError",
           "DataParallel"]
