"""NCCL as DataParallel uses it (device::Collective), on the one GPU a test machine has: a
communicator of one rank, whose weighted sum is the rank's own gradient times its weight. (Two
ranks need two GPUs: NCCL refuses two ranks on one device.)"""

import numpy as np
import pytest

import nexus as nx

_C_cuda = pytest.importorskip("nexus._C_cuda", reason="this build has no CUDA backend")

DEV = "cuda:0"


@pytest.fixture(scope="module")
def comm():
    why = _C_cuda.nccl_unavailable()
    if why:
        pytest.skip(f"NCCL is not installed here: {why.splitlines()[0]}")
    return _C_cuda.Collective(_C_cuda.nccl_unique_id(), 1, 0, 0)


@pytest.mark.parametrize("dtype", [nx.float32, nx.float64, nx.bfloat16])
def test_a_weighted_sum_over_one_rank_scales_the_gradients_in_place(comm, dtype):
    rng = np.random.default_rng(0)
    grads = [nx.tensor(rng.standard_normal(shape), dtype=dtype).to(DEV) for shape in [(1000,), (3, 4), (1,)]]
    before = [g.cpu().astype(nx.float64).numpy() for g in grads]
    comm.weighted_sum(grads, 0.25)  # a power of two: exact in every dtype
    for g, b in zip(grads, before):
        np.testing.assert_array_equal(g.cpu().astype(nx.float64).numpy(), b * 0.25)


def test_a_strided_or_host_gradient_is_refused(comm):
    with pytest.raises(ValueError, match="contiguous on cuda:0"):
        comm.weighted_sum([nx.ones(3, 4).to(DEV).T], 1.0)
    with pytest.raises(ValueError, match="contiguous on cuda:0"):
        comm.weighted_sum([nx.ones(3)], 1.0)
