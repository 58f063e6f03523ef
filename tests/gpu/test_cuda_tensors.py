"""CUDA tensors give the host's results: every op of the tensor API that has a device kernel,
autograd through them, transfers of every dtype, and the errors of mixing devices."""

import numpy as np
import pytest

import nexus as nx

DEV = "cuda:0"
FLOAT_DTYPES = [nx.float32, nx.float64]
ALL_DTYPES = [nx.float32, nx.float64, nx.float16, nx.bfloat16, nx.int32, nx.int64, nx.bool]


def host(t):
    return t.cpu().astype(nx.float64).numpy() if t.dtype in (nx.float16, nx.bfloat16) else t.cpu().numpy()


def both(array, dtype=None):
    """The same values on the host and on the GPU."""
    c = nx.tensor(array, dtype=dtype)
    return c, c.to(DEV)


def close(gpu, cpu, dtype=nx.float32):
    assert gpu.device == nx.device(DEV)
    assert gpu.shape == cpu.shape and gpu.dtype == cpu.dtype
    tol = {nx.float32: 2e-6, nx.float64: 1e-13}.get(dtype, 0)
    np.testing.assert_allclose(host(gpu), host(cpu), rtol=tol * 8, atol=tol)


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=str)
def test_a_round_trip_through_the_device_keeps_every_bit(dtype):
    rng = np.random.default_rng(0)
    c = nx.tensor(rng.standard_normal((37, 5)) * 100, dtype=dtype)
    g = c.cuda()
    assert g.device == nx.device("cuda:0") and g.is_cuda and g.dtype == dtype
    assert np.array_equal(host(g), host(c))
    assert np.array_equal(host(c.to(DEV)[3:20:2, 1:]), host(c[3:20:2, 1:]))  # a strided view moves too


@pytest.mark.parametrize("make", [
    lambda d: nx.zeros(3, 4, device=d), lambda d: nx.ones(5, dtype=nx.int64, device=d),
    lambda d: nx.full((2, 3), 7.5, device=d), lambda d: nx.arange(10, device=d)])
def test_creation_on_the_device_matches_the_host(make):
    g, c = make(DEV), make("cpu")
    assert g.device == nx.device(DEV) and np.array_equal(host(g), host(c))


def test_a_seed_draws_the_same_numbers_on_either_device():
    nx.manual_seed(3)
    a = nx.randn(100, device=DEV)
    nx.manual_seed(3)
    assert np.array_equal(host(a), nx.randn(100).numpy())


@pytest.mark.parametrize("dtype", [nx.float32, nx.float64, nx.float16, nx.bfloat16], ids=str)
@pytest.mark.parametrize("op", ["neg", "exp", "log", "sqrt", "tanh", "sigmoid", "relu", "gelu", "sin", "cos", "abs"])
def test_every_unary_op_matches_the_host(op, dtype):
    rng = np.random.default_rng(1)
    x = rng.uniform(0.1, 4, (33, 17)) if op in ("log", "sqrt") else rng.standard_normal((33, 17)) * 3
    c, g = both(x, dtype)
    fn = getattr(nx, op)
    out_g, out_c = fn(g), fn(c)
    tol = {nx.float32: 4e-6, nx.float64: 1e-13, nx.float16: 1e-3, nx.bfloat16: 8e-3}[dtype]
    assert out_g.dtype == out_c.dtype and out_g.device == nx.device(DEV)
    np.testing.assert_allclose(host(out_g), host(out_c), rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [nx.int32, nx.int64], ids=str)
@pytest.mark.parametrize("op", ["neg", "relu", "abs"])
def test_integer_unary_ops_are_exact(op, dtype):
    c, g = both(np.arange(-20, 20).reshape(4, 10), dtype)
    assert np.array_equal(host(getattr(nx, op)(g)), host(getattr(nx, op)(c)))


SHAPES = [((7, 5), (7, 5)), ((7, 5), (5,)), ((3, 1, 4), (1, 6, 1)), ((), (4, 3)), ((2, 3, 4, 5), (3, 1, 5))]


@pytest.mark.parametrize("sa, sb", SHAPES)
@pytest.mark.parametrize("op", ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "floor_divide",
                                "remainder", "eq", "ne", "lt", "le", "gt", "ge"])
def test_every_binary_op_broadcasts_as_on_the_host(op, sa, sb):
    rng = np.random.default_rng(2)
    a = rng.uniform(0.5, 3, sa) if op == "pow" else rng.standard_normal(sa) * 4
    b = rng.uniform(0.5, 2, sb) * rng.choice([-1, 1], sb) if op != "pow" else rng.uniform(-2, 2, sb)
    (ac, ag), (bc, bg) = both(a), both(b)
    fn = getattr(nx, op)
    out_g, out_c = fn(ag, bg), fn(ac, bc)
    assert out_g.dtype == out_c.dtype and out_g.shape == out_c.shape
    np.testing.assert_allclose(host(out_g), host(out_c), rtol=2e-6, atol=2e-6)


@pytest.mark.parametrize("dtype", [nx.int32, nx.int64, nx.bool], ids=str)
def test_integer_and_bool_binary_ops_are_exact(dtype):
    rng = np.random.default_rng(4)
    (ac, ag), (bc, bg) = both(rng.integers(-50, 50, (6, 9)), dtype), both(rng.integers(1, 9, (9,)), dtype)
    ops = ["add", "mul", "maximum", "minimum", "eq", "lt"]
    if dtype != nx.bool:
        ops += ["sub", "floor_divide", "remainder"]
    for op in ops:
        assert np.array_equal(host(getattr(nx, op)(ag, bg)), host(getattr(nx, op)(ac, bc))), op


def test_python_scalars_and_host_scalars_go_with_a_device_tensor():
    c, g = both(np.arange(6.0).reshape(2, 3))
    close(g * 2 + 1, c * 2 + 1)
    close(g / nx.tensor(4.0), c / nx.tensor(4.0))
    close(3 - g, 3 - c)


def test_where_and_comparisons_on_the_device():
    rng = np.random.default_rng(5)
    (ac, ag), (bc, bg) = both(rng.standard_normal((5, 6))), both(rng.standard_normal((6,)))
    close(nx.where(ag > bg, ag, bg), nx.where(ac > bc, ac, bc))


@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [nx.int32, nx.int64], ids=str)
@pytest.mark.parametrize("axis", [None, 0, 1, 2, (0, 2), (1, 2), -1])
@pytest.mark.parametrize("fn", ["sum", "max", "min", "mean"])
def test_reductions_match_the_host_and_repeat_bit_for_bit(fn, axis, dtype):
    if fn == "mean" and dtype in (nx.int32, nx.int64):
        pytest.skip("mean of integers is float32: covered by the float rows")
    rng = np.random.default_rng(6)
    c, g = both(rng.standard_normal((13, 257, 9)) * 10, dtype)
    f = getattr(nx, fn)
    out_g, out_c = f(g, axis=axis), f(c, axis=axis)
    assert out_g.dtype == out_c.dtype
    # A sum's rounding scales with its terms, not with the result (which may be near zero).
    rtol = 1e-5 if dtype == nx.float32 else 1e-12
    terms = np.abs(host(c)).astype(np.float64)
    scale = terms.mean(axis=axis) if fn == "mean" else terms.sum(axis=axis)
    np.testing.assert_allclose(host(out_g), host(out_c), rtol=rtol, atol=rtol * float(np.max(scale)))
    assert np.array_equal(host(f(g, axis=axis)), host(out_g))  # deterministic run to run


def test_nan_propagates_through_max_and_argmax_as_on_the_host():
    x = np.arange(12.0).reshape(3, 4)
    x[1, 2] = np.nan
    c, g = both(x)
    assert np.array_equal(host(nx.max(g, axis=1)), host(nx.max(c, axis=1)), equal_nan=True)
    assert host(nx.argmax(g, axis=1)).tolist() == host(nx.argmax(c, axis=1)).tolist() == [3, 2, 3]
    assert int(nx.argmax(g).item()) == int(nx.argmax(c).item()) == 6


@pytest.mark.parametrize("fn", ["softmax", "log_softmax", "logsumexp", "var"])
def test_composite_reductions_match_the_host(fn):
    rng = np.random.default_rng(7)
    c, g = both(rng.standard_normal((31, 10)) * 5)
    close(getattr(nx, fn)(g, axis=1), getattr(nx, fn)(c, axis=1))


@pytest.mark.parametrize("sa, sb", [((64, 32), (32, 48)), ((5, 3, 7), (7, 2)), ((4, 1, 6, 8), (3, 8, 5)),
                                    ((9,), (9, 4)), ((4, 9), (9,)), ((300, 257), (257, 129))])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES + [nx.float16, nx.bfloat16], ids=str)
def test_matmul_matches_the_host(sa, sb, dtype):
    rng = np.random.default_rng(8)
    (ac, ag), (bc, bg) = both(rng.standard_normal(sa), dtype), both(rng.standard_normal(sb), dtype)
    out_g, out_c = nx.matmul(ag, bg), nx.matmul(ac, bc)
    tol = {nx.float32: 1e-4, nx.float64: 1e-11, nx.float16: 2e-2, nx.bfloat16: 5e-2}[dtype]
    assert out_g.dtype == out_c.dtype
    np.testing.assert_allclose(host(out_g), host(out_c), rtol=tol, atol=tol)


def test_matmul_reads_transposed_views_in_place():
    rng = np.random.default_rng(9)
    (ac, ag), (bc, bg) = both(rng.standard_normal((40, 30))), both(rng.standard_normal((50, 40)))
    close(nx.matmul(ag.T, bg.T), nx.matmul(ac.T, bc.T))


def mlp_grads(device):
    nx.manual_seed(0)
    w1 = nx.randn(20, 32, device=device, requires_grad=True)
    w2 = nx.randn(32, 5, device=device, requires_grad=True)
    x = nx.tensor(np.random.default_rng(10).standard_normal((16, 20)), device=device)
    y = nx.tensor(np.arange(16) % 5, device=device)
    loss = nx.cross_entropy(nx.relu(x @ w1 * 0.3) @ w2, y)
    loss.backward()
    return loss, w1.grad, w2.grad


def test_autograd_through_device_ops_gives_the_host_gradients():
    for g, c in zip(mlp_grads(DEV), mlp_grads("cpu")):
        assert g.device == nx.device(DEV)
        np.testing.assert_allclose(host(g), host(c), rtol=1e-4, atol=1e-5)


def test_the_gradient_of_a_copy_returns_to_the_source_device():
    x = nx.ones(3, requires_grad=True)
    (x.cuda() * 2).sum().backward()
    assert x.grad.device == nx.device("cpu") and x.grad.tolist() == [2.0, 2.0, 2.0]


CONV_CASES = [  # (n, c, h, w), (k, kh, kw), stride, padding
    ((2, 3, 9, 11), (4, 3, 3), 1, 1), ((3, 16, 8, 8), (16, 1, 1), 1, 0), ((1, 1, 12, 10), (6, 5, 5), 2, 2),
    ((3, 2, 7, 7), (5, 3, 5), (2, 1), (0, 2)), ((0, 3, 6, 6), (2, 3, 3), 1, 1)]


def conv_grads(device, dtype, xs, ws, stride, padding):
    rng = np.random.default_rng(13)
    x = nx.tensor(rng.standard_normal(xs), dtype=dtype, device=device, requires_grad=True)
    w = nx.tensor(rng.standard_normal(ws) * 0.3, dtype=dtype, device=device, requires_grad=True)
    b = nx.tensor(rng.standard_normal(ws[0]), dtype=dtype, device=device, requires_grad=True)
    y = nx.conv2d(x, w, b, stride=stride, padding=padding)
    (y * nx.tensor(rng.standard_normal(y.shape), dtype=dtype, device=device)).sum().backward()
    return y, x.grad, w.grad, b.grad


@pytest.mark.parametrize("xs, kernel, stride, padding", CONV_CASES)
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_conv2d_and_its_gradients_match_the_host(xs, kernel, stride, padding, dtype):
    ws = (kernel[0], xs[1], kernel[1], kernel[2])
    tol = {nx.float32: 1e-4, nx.float64: 1e-11}[dtype]
    for g, c in zip(conv_grads(DEV, dtype, xs, ws, stride, padding), conv_grads("cpu", dtype, xs, ws, stride, padding)):
        assert g.device == nx.device(DEV) and g.shape == c.shape and g.dtype == c.dtype
        np.testing.assert_allclose(host(g), host(c), rtol=tol, atol=tol)


def test_conv2d_gradients_repeat_bit_for_bit():
    first, again = (conv_grads(DEV, nx.float32, (5, 3, 10, 10), (8, 3, 3, 3), 1, 1) for _ in range(2))
    for a, b in zip(first, again):
        assert np.array_equal(host(a), host(b))


def pool_grads(device, fn, x, kernel, stride, dtype):
    t = nx.tensor(x, dtype=dtype, device=device, requires_grad=True)
    y = getattr(nx, fn)(t, kernel, stride)
    dy = np.random.default_rng(16).standard_normal(y.shape)
    (y * nx.tensor(dy, dtype=dtype, device=device)).sum().backward()
    return host(y), host(t.grad)


@pytest.mark.parametrize("fn", ["max_pool2d", "avg_pool2d"])
@pytest.mark.parametrize("kernel, stride", [(2, None), (3, 1), (3, 2), ((2, 3), (1, 2)), (1, 1)])
@pytest.mark.parametrize("dtype", FLOAT_DTYPES, ids=str)
def test_pooling_and_its_gradient_match_the_host_bit_for_bit(fn, kernel, stride, dtype):
    x = np.random.default_rng(14).standard_normal((3, 4, 9, 8))
    x[1, 2, 3, 3] = np.nan  # a NaN wins every window holding it
    x[2, 0, :2, :2] = 1.5  # a tie: the first maximum wins
    for g, c in zip(pool_grads(DEV, fn, x, kernel, stride, dtype), pool_grads("cpu", fn, x, kernel, stride, dtype)):
        np.testing.assert_array_equal(g, c)


def lenet_grads(device):
    nx.manual_seed(0)
    rng = np.random.default_rng(15)
    params = [nx.tensor(rng.standard_normal(s) * 0.2, device=device, requires_grad=True)
              for s in [(6, 1, 5, 5), (6,), (16, 6, 5, 5), (16,), (16 * 5 * 5, 10)]]
    w1, b1, w2, b2, fc = params
    x = nx.tensor(rng.standard_normal((4, 1, 28, 28)), device=device)
    h = nx.max_pool2d(nx.relu(nx.conv2d(x, w1, b1, padding=2)), 2)
    h = nx.avg_pool2d(nx.relu(nx.conv2d(h, w2, b2)), 2)
    loss = nx.cross_entropy(nx.reshape(h, 4, 16 * 5 * 5) @ fc, nx.tensor(np.arange(4) % 10, device=device))
    loss.backward()
    return [loss] + [p.grad for p in params]


def test_a_lenet_forward_and_backward_matches_the_host():
    # float64: a pre-ReLU value near 0 cannot change sign between the two GEMMs' roundings
    # (which would send a max-pool gradient to another pixel).
    for g, c in zip(lenet_grads(DEV), lenet_grads("cpu")):
        assert g.device == nx.device(DEV) and g.dtype == nx.float64
        np.testing.assert_allclose(host(g), host(c), rtol=1e-9, atol=1e-11)


def test_layer_norm_batch_norm_and_dropout_match_the_host():
    rng = np.random.default_rng(11)
    c, g = both(rng.standard_normal((8, 4, 5, 5)))
    close(nx.layer_norm(g, (5, 5)), nx.layer_norm(c, (5, 5)))
    close(nx.batch_norm(g, None, None, training=True), nx.batch_norm(c, None, None, training=True))
    nx.manual_seed(1)
    dg = nx.dropout(g, 0.3)
    nx.manual_seed(1)
    close(dg, nx.dropout(c, 0.3))  # the mask is drawn on the host: the same elements drop


def test_mixing_devices_names_the_op_and_both_devices():
    with pytest.raises(ValueError, match=r"add: .*cuda:0 and cpu|add: .*cpu and cuda:0"):
        nx.ones(3, device=DEV) + nx.ones(3)
    with pytest.raises(ValueError, match="matmul: .*cuda:0.*cpu|matmul: .*cpu.*cuda:0"):
        nx.matmul(nx.ones((2, 2), device=DEV), nx.ones((2, 2)))


def test_reading_device_memory_on_the_host_is_refused_not_a_crash():
    g = nx.ones(3, device=DEV)
    with pytest.raises(TypeError, match="cuda:0 tensor to numpy.*cpu"):
        g.numpy()
    with pytest.raises(TypeError, match="cuda:0"):
        np.asarray(g)
    assert g.tolist() == [1.0, 1.0, 1.0] and "device='cuda:0'" in repr(g)


def test_the_caching_allocator_reuses_a_freed_block():
    nx.cuda.synchronize()
    before = nx.cuda.memory_stats()
    for _ in range(5):
        t = nx.zeros(1 << 20, device=DEV)
        del t
    after = nx.cuda.memory_stats()
    assert after["hits"] - before["hits"] >= 4
    nx.cuda.empty_cache()
    assert nx.cuda.memory_stats()["cached_bytes"] == 0


def test_cuda_info_names_the_device():
    info = nx.info()
    assert info["cuda_available"] and "compute capability" in info["cuda:0"]
    assert nx.cuda.get_device_capability() >= (7, 0) and nx.cuda.get_device_name()


@pytest.mark.parametrize("make", [
    lambda ps: nx.optim.SGD(ps, lr=0.1), lambda ps: nx.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True),
    lambda ps: nx.optim.SGD(ps, lr=0.1, momentum=0.9, dampening=0.1, weight_decay=0.01),
    lambda ps: nx.optim.Adam(ps, lr=0.01, weight_decay=0.01), lambda ps: nx.optim.AdamW(ps, lr=0.01, clip_norm=0.5)])
def test_optimizers_update_device_parameters_as_on_the_host(make):
    """The device kernels apply the host loops' formulas with the same coefficients: the same bits,
    except where clipping scales by a norm summed in another order."""
    rng = np.random.default_rng(12)
    w0, grads = rng.standard_normal((6, 4)), [rng.standard_normal((6, 4)) for _ in range(3)]
    results = []
    for device in ("cpu", DEV):
        w = nx.tensor(w0, device=device, requires_grad=True)
        opt = make([w])
        for g in grads:
            w.grad = nx.tensor(g, device=device)
            opt.step()
        results.append(host(w))
        clipped = opt.get_config()["kwargs"]["clip_norm"]
    if clipped:
        np.testing.assert_allclose(results[1], results[0], rtol=1e-6, atol=1e-7)
    else:
        np.testing.assert_array_equal(results[1], results[0])


def compiled(device, optimizer):
    g = (nx.GraphBuilder(seed=0).input("x", nx.Shape(32, 20)).dense(64, "relu").dropout(0.2)
         .dense(32, "tanh").dense(5, "softmax"))
    return g.compile(optimizer=optimizer, device=device, fusion=False)


@pytest.mark.parametrize("make_opt", [lambda: nx.optim.SGD(lr=0.1, momentum=0.9), lambda: nx.optim.Adam(lr=1e-2)])
def test_a_compiled_model_trains_on_the_device_as_on_the_host(make_opt):
    rng = np.random.default_rng(13)
    x, y = rng.standard_normal((32, 20)).astype(np.float32), rng.integers(0, 5, 32)
    losses = {}
    for device in ("cpu", DEV):
        model = compiled(device, make_opt())
        assert model.device == nx.device(device)
        nx.manual_seed(4)  # the dropout masks: drawn on the host for either device
        losses[device] = [model.train_step(x, y) for _ in range(5)]
        losses[device + " predict"] = model.predict(x)
        assert all(p.device == nx.device(device) for p in model.params.values())
    np.testing.assert_allclose(losses[DEV], losses["cpu"], rtol=1e-4)
    np.testing.assert_allclose(losses[DEV + " predict"], losses["cpu predict"], rtol=1e-4, atol=1e-6)


def test_a_checkpoint_written_on_the_device_loads_on_either(tmp_path):
    rng = np.random.default_rng(14)
    x, y = rng.standard_normal((32, 20)).astype(np.float32), rng.integers(0, 5, 32)
    model = compiled(DEV, nx.optim.Adam(lr=1e-2))
    model.train_step(x, y)
    model.save(tmp_path / "m.nexus")
    on_host, on_gpu = nx.load(tmp_path / "m.nexus"), nx.load(tmp_path / "m.nexus", device=DEV)
    assert on_gpu.device == nx.device(DEV) and on_host.device == nx.device("cpu")
    np.testing.assert_allclose(on_gpu.predict(x), on_host.predict(x), rtol=1e-5, atol=1e-6)
    # the optimizer state went along: the next steps agree too
    np.testing.assert_allclose(on_gpu.train_step(x, y), on_host.train_step(x, y), rtol=1e-4)


def test_a_model_moves_between_devices_with_its_optimizer_state():
    rng = np.random.default_rng(15)
    x, y = rng.standard_normal((32, 20)).astype(np.float32), rng.integers(0, 5, 32)
    a, b = compiled("cpu", nx.optim.Adam(lr=1e-2)), compiled("cpu", nx.optim.Adam(lr=1e-2))
    for _ in range(2):
        a.train_step(x, y), b.train_step(x, y)
    b.to(DEV)
    np.testing.assert_allclose(b.train_step(x, y), a.train_step(x, y), rtol=1e-4)
    b.to("cpu")
    np.testing.assert_allclose(b.train_step(x, y), a.train_step(x, y), rtol=1e-4)


@pytest.mark.parametrize("shape, axis", [((1 << 22,), None), ((64, 16, 32, 32), (0, 2, 3)), ((3, 1 << 18), 1)])
@pytest.mark.parametrize("fn", ["sum", "max", "min"])
def test_split_reductions_of_many_elements_match_the_host_and_repeat_bit_for_bit(shape, axis, fn):
    rng = np.random.default_rng(16)
    c, g = both(rng.standard_normal(shape).astype(np.float32))
    f = getattr(nx, fn)
    out_g = f(g, axis=axis)
    np.testing.assert_allclose(host(out_g), host(f(c, axis=axis)), rtol=1e-5, atol=1e-3)
    assert np.array_equal(host(f(g, axis=axis)), host(out_g))


def test_indexing_with_a_tensor_and_integer_matmul_give_the_host_results_with_gradients():
    rng = np.random.default_rng(17)
    xs = rng.standard_normal((10, 4))
    idx = nx.tensor([3, -1, 3, 0])
    results = {}
    for device in ("cpu", DEV):
        x = nx.tensor(xs, device=device, requires_grad=True)
        picked = x[idx.to(device)]
        (picked * picked).sum().backward()
        y = nx.zeros(10, 4, device=device)
        y[idx] = nx.ones(4, device=device)
        m = nx.matmul(nx.arange(6, device=device).reshape(2, 3), nx.arange(6, device=device).reshape(3, 2))
        assert picked.device == x.grad.device == y.device == m.device == nx.device(device)
        results[device] = [host(picked), host(x.grad), host(y), host(m)]
    for g, c in zip(results[DEV], results["cpu"]):
        np.testing.assert_array_equal(g, c)


def test_nx_jit_runs_on_the_inputs_device_with_the_hosts_results():
    def chain(t, u):
        return nx.gelu(t * 1.7 + 0.3) * nx.sigmoid(u) - 0.5 * t, (t * u).sum(axis=1)

    f = nx.jit(chain)
    rng = np.random.default_rng(3)
    a, b = (rng.standard_normal((64, 300)).astype(np.float32) for _ in range(2))
    launches = nx.cuda._backend.generated_stats()["launches"]
    got = f(nx.tensor(a, device=DEV), nx.tensor(b, device=DEV))
    assert nx.cuda._backend.generated_stats()["launches"] > launches  # the chain ran as a generated kernel
    want = f(nx.tensor(a), nx.tensor(b))  # the same trace class, on the host
    for g, w in zip(got, want):
        assert g.device == nx.device(DEV)
        np.testing.assert_allclose(host(g), host(w), rtol=1e-5, atol=1e-5)
    with pytest.raises(nx.TraceError, match="cpu and cuda:0"):
        f(nx.tensor(a), nx.tensor(b, device=DEV))
