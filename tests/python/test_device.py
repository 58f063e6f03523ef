"""Devices on a machine with or without a GPU: nx.device, device= on creation, .to/.cuda/.cpu,
and the errors a CUDA request gets where CUDA cannot be used (tests/gpu has the GPU side)."""

import numpy as np
import pytest

import nexus as nx

no_cuda = pytest.mark.skipif(nx.cuda.is_available(), reason="this machine can use CUDA: tests/gpu covers it")


@pytest.mark.parametrize("text, kind, index, shown", [
    ("cpu", "cpu", None, "cpu"), ("cuda", "cuda", 0, "cuda:0"), ("cuda:3", "cuda", 3, "cuda:3")])
def test_a_device_parses_and_prints_as_in_pytorch(text, kind, index, shown):
    d = nx.device(text)
    assert (d.type, d.index, str(d)) == (kind, index, shown)
    assert d == nx.device(shown) and hash(d) == hash(nx.device(shown))
    assert nx.device("cuda", 2) == nx.device("cuda:2")
    assert repr(nx.device("cuda:1")) == "device(type='cuda', index=1)"


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:-1", "cuda:1x", "CPU", "cuda:0:1", ""])
def test_a_malformed_device_names_what_is_valid(text):
    with pytest.raises(ValueError, match="valid: 'cpu', 'cuda', 'cuda:N'"):
        nx.device(text)


def test_a_tensor_reports_its_device_and_moves_to_where_it_is_as_itself():
    t = nx.ones(2, 3)
    assert t.device == nx.device("cpu") and str(t.device) == "cpu" and not t.is_cuda
    assert t.to("cpu").data_ptr() == t.data_ptr() and t.cpu().data_ptr() == t.data_ptr()
    assert t.to("cpu", copy=True).data_ptr() != t.data_ptr()


def test_to_changes_the_dtype_by_name_object_or_like_another_tensor():
    t = nx.tensor([1.5, -2.0])
    assert t.to(nx.float16).dtype == nx.float16
    assert t.to("float64").dtype == nx.float64
    assert t.to(dtype=nx.int64).tolist() == [1, -2]
    assert t.to(nx.tensor([1], dtype=nx.int32)).dtype == nx.int32
    assert t.to("cpu", nx.bfloat16).dtype == nx.bfloat16


@pytest.mark.parametrize("make", [
    lambda d: nx.zeros(2, device=d), lambda d: nx.ones((2, 2), device=d), lambda d: nx.full((2,), 3, device=d),
    lambda d: nx.arange(4, device=d), lambda d: nx.rand(3, device=d), lambda d: nx.randn(3, device=d),
    lambda d: nx.tensor([1, 2], device=d)])
def test_every_creation_function_takes_device(make):
    assert make("cpu").device == nx.device("cpu")
    assert make(nx.device("cpu")).device == nx.device("cpu")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        make("gpu")
    with pytest.raises(TypeError, match="device must be"):
        make(3.5)


@no_cuda
def test_without_cuda_the_reason_is_given_and_nothing_pretends():
    assert nx.cuda.is_available() is False and nx.cuda.device_count() == 0
    reason = nx.cuda.unavailable_reason()
    assert reason and ("driver" in reason or "built without" in reason or "device" in reason)
    assert nx.info()["cuda_available"] is False


@no_cuda
@pytest.mark.parametrize("request_cuda", [
    lambda: nx.zeros(2, device="cuda"), lambda: nx.ones(2).cuda(), lambda: nx.ones(2).to("cuda:1"),
    lambda: nx.tensor(np.ones(3), device="cuda"), lambda: nx.randn(2, device="cuda:0"),
    lambda: nx.cuda.synchronize(), lambda: nx.cuda.memory_stats(), lambda: nx.cuda.get_device_name()])
def test_without_cuda_every_cuda_request_is_a_runtime_error_saying_why(request_cuda):
    with pytest.raises(RuntimeError, match="cuda|CUDA"):
        request_cuda()


def test_nx_jit_refuses_to_trace_a_copy_between_devices():
    @nx.jit
    def f(x):
        return x.to("cpu", copy=False) + nx.zeros(2, device="cpu")

    assert f(nx.ones(2)).tolist() == [1.0, 1.0]  # staying on the host records nothing to refuse


def _small_model(**kw):
    g = nx.GraphBuilder(seed=0).input("x", nx.Shape(16, 4)).dense(8, "relu").dense(3, "softmax")
    return g.compile(optimizer=nx.optim.SGD(lr=0.1), **kw)


def test_a_compiled_model_reports_its_device_and_moves_to_the_host_as_a_no_op(tmp_path):
    model = _small_model(device="cpu")
    assert model.device == nx.device("cpu") and model.to("cpu") is model
    x, y = np.random.default_rng(0).standard_normal((16, 4)).astype(np.float32), np.arange(16) % 3
    loss = model.train_step(x, y)
    model.save(tmp_path / "m.nexus")
    again = nx.load(tmp_path / "m.nexus", device="cpu")
    assert again.device == nx.device("cpu")
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    assert np.isfinite(loss)


@no_cuda
@pytest.mark.parametrize("make", [lambda: _small_model(device="cuda"), lambda: _small_model().to("cuda:0")])
def test_without_cuda_a_model_on_cuda_is_a_runtime_error(make):
    with pytest.raises(RuntimeError, match="cuda"):
        make()
