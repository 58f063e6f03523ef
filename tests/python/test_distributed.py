"""nexus.distributed in a plain python process: a world of one (the mpiexec jobs are in
tests/mpi). Every call works and leaves data as it is; argument errors are the same as with
more ranks."""

import numpy as np
import pytest

import nexus as nx
import nexus.distributed as dist
from nexus import GraphBuilder, Shape, config


def test_a_plain_process_is_a_world_of_one():
    dist.init()
    assert dist.is_initialized()
    assert dist.rank() == 0 and dist.world_size() == 1
    dist.barrier()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_all_reduce_of_one_rank_returns_its_input_in_place(dtype, op):
    t = nx.tensor(np.arange(5, dtype=np.float32)).astype(dtype)
    assert dist.all_reduce(t, op=op, compression=None) is t
    np.testing.assert_array_equal(t.astype("float32").numpy(), np.arange(5))
    if dtype != "bfloat16":
        a = np.arange(7, dtype=dtype)
        assert dist.all_reduce(a, op=op) is a
        np.testing.assert_array_equal(a, np.arange(7))
    s = dist.last_stats()
    assert (s.bytes_sent, s.bytes_uncompressed) == (0, 0) and s.seconds >= 0


@pytest.mark.parametrize("op", ["max", "min"])
def test_all_reduce_max_and_min_of_one_rank_return_the_input(op):
    for x in (np.array([3.0, -1.0], np.float32), np.array([2, 7]), np.array([True, False]),
              nx.tensor([1.5, 2.5]).astype("bfloat16")):
        want = (x.astype("float32").numpy() if isinstance(x, nx.Tensor) else x).copy()
        assert dist.all_reduce(x, op=op) is x
        got = x.astype("float32").numpy() if isinstance(x, nx.Tensor) else x
        np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match=f'op="{op}" takes compression=None'):
        dist.all_reduce(np.ones(3, np.float32), op=op, compression="fp16")


def test_integer_arrays_sum_and_reject_mean():
    a = np.arange(4, dtype=np.int64)
    assert dist.all_reduce(a) is a
    with pytest.raises(TypeError, match="mean"):
        dist.all_reduce(a, op="mean")


def test_broadcast_and_all_gather_of_one_rank():
    # all_gather gives a list, one array per rank (mpi4py's allgather, torch's all_gather)
    a = np.ones((2, 3))
    assert dist.broadcast(a, root=0) is a
    g = dist.all_gather(a)
    assert isinstance(g, list) and len(g) == 1 and g[0] is not a and g[0].shape == (2, 3)
    assert dist.all_gather(np.array(2.5, np.float32))[0].shape == ()
    t = dist.all_gather(nx.tensor(np.arange(3, dtype=np.float32)))
    assert isinstance(t[0], nx.Tensor) and t[0].shape == (3,)
    b = dist.all_gather(nx.tensor([1.0, 2.0]).astype("bfloat16"))
    assert b[0].dtype == nx.bfloat16 and b[0].astype("float32").tolist() == [1.0, 2.0]


@pytest.mark.parametrize("call, error, words", [
    (lambda: dist.all_reduce(np.ones(3, np.float32), op="prod"), ValueError, "'max', 'min'"),
    (lambda: dist.all_reduce(np.ones(3, np.int32), op="none"), ValueError,
     "op 'none' is not one of 'sum', 'mean', 'max', 'min'$"),
    (lambda: dist.all_reduce(np.ones(3, np.float32), compression="zip"), ValueError, "topk:RATIO"),
    (lambda: dist.all_reduce(np.ones(3, np.float32), compression=3), TypeError, "codec spec"),
    (lambda: dist.all_reduce(np.ones(3), compression="int8"), ValueError, "float64"),
    (lambda: dist.all_reduce([1.0, 2.0]), TypeError, "numpy array or a nexus Tensor"),
    (lambda: dist.all_reduce(np.ones((3, 4), np.float32)[:, ::2]), ValueError, "contiguous"),
    (lambda: dist.all_reduce(np.ones(3, np.complex64)), TypeError, "float32"),
    (lambda: dist.all_reduce(nx.tensor(np.arange(3))), TypeError, "int64"),
    (lambda: dist.broadcast(np.ones(3), root=1), ValueError, "0..0"),
    (lambda: dist.broadcast([1.0]), TypeError, "numpy array"),
])
def test_bad_arguments_name_what_is_valid(call, error, words):
    with pytest.raises(error, match=words):
        call()


def test_comm_timeout_knob_is_declared_and_validated(monkeypatch):
    assert "NEXUS_COMM_TIMEOUT" in [name for name, _, _ in config.KNOBS]
    monkeypatch.setenv("NEXUS_COMM_TIMEOUT", "2.5")
    assert config.comm_timeout() == 2.5
    for bad in ("0", "-1", "soon", "inf"):
        monkeypatch.setenv("NEXUS_COMM_TIMEOUT", bad)
        with pytest.raises(ValueError, match="NEXUS_COMM_TIMEOUT"):
            config.comm_timeout()


def test_info_names_the_mpi_library_when_compiled_in():
    info = nx.info()
    if info["mpi_compiled"]:
        assert "MPI" in info["mpi"] or "MPICH" in info["mpi"]
    else:
        assert info["mpi"] is None


def _model(seed=0):
    g = GraphBuilder(seed=seed)
    g.input("x", Shape(16, 64)).dense(16, "relu").dense(10, "softmax")
    return g.compile(loss="cross_entropy", optimizer=nx.optim.SGD(lr=0.1, momentum=0.9))


def test_distributed_fit_in_a_world_of_one_equals_fit():
    x, y, _, _ = nx.data.load("digits")
    x, y = x[:200], y[:200]
    a, b = _model(), _model()
    a.fit(x, y, epochs=2, batch_size=32, progress=False)
    b.fit(x, y, epochs=2, batch_size=32, progress=False, distributed=True, compression="int8")
    for p, q in zip(a._native.params, b._native.params):
        np.testing.assert_array_equal(p.numpy(), q.numpy())
    assert a.history["loss"] == b.history["loss"]


def test_fit_options_for_distributed_training_need_distributed():
    with pytest.raises(ValueError, match="distributed=True"):
        _model().fit(np.zeros((4, 64)), np.zeros(4, np.int64), compression="int8")


def test_data_parallel_checks_its_arguments():
    with pytest.raises(ValueError, match="bucket_bytes"):
        dist.DataParallel(_model(), bucket_bytes=0)
    with pytest.raises(ValueError, match="unknown codec"):
        dist.DataParallel(_model(), compression="zip")
