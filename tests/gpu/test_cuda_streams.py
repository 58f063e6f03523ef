"""Streams, events, pinned host memory and the DataLoader's prefetch to the GPU: work queued on a
side stream gives the same values, events order streams, pinned copies may return early but
never show stale or torn values, and the allocator never hands a block to one stream while
another still uses it."""

import numpy as np
import pytest

import nexus as nx

DEV = "cuda:0"


def test_pin_memory_copies_into_pinned_memory_and_back():
    x = nx.tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    p = x.pin_memory()
    assert p.is_pinned() and not x.is_pinned()
    assert p.pin_memory() is p
    np.testing.assert_array_equal(p.numpy(), x.numpy())
    t = x.T.pin_memory()  # a strided view is copied contiguous
    np.testing.assert_array_equal(t.numpy(), x.numpy().T)
    with pytest.raises(ValueError, match="only host tensors"):
        x.to(DEV).pin_memory()


def test_a_non_blocking_copy_from_pinned_memory_arrives_before_later_work():
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = rng.standard_normal((256, 257)).astype(np.float32)
        d = nx.tensor(a).pin_memory().to(DEV, non_blocking=True)  # the pinned source is dropped at once
        np.testing.assert_array_equal((d * 2).cpu().numpy(), a * 2)


def test_work_on_a_side_stream_gives_the_same_values_once_waited_for():
    a = nx.randn(512, 512).to(DEV)
    expect = (a @ a).cpu().numpy()
    s = nx.cuda.Stream()
    assert s != nx.cuda.default_stream() and s.device == nx.device(DEV)
    s.wait_stream(nx.cuda.current_stream())
    with nx.cuda.stream(s):
        assert nx.cuda.current_stream() == s
        b = a @ a
    assert nx.cuda.current_stream() == nx.cuda.default_stream()
    nx.cuda.current_stream().wait_stream(s)
    b.record_stream(nx.cuda.current_stream())
    np.testing.assert_allclose(b.cpu().numpy(), expect, rtol=1e-5, atol=1e-4)
    s.synchronize()
    assert s.query()


def test_events_time_and_order_work():
    start, end = nx.cuda.Event(enable_timing=True), nx.cuda.Event(enable_timing=True)
    x = nx.randn(1024, 1024).to(DEV)
    start.record()
    for _ in range(5):
        x = x @ x / 1024.0
    end.record()
    end.synchronize()
    assert end.query() and start.elapsed_time(end) > 0
    with pytest.raises(ValueError, match="recorded first"):
        nx.cuda.Event().elapsed_time(nx.cuda.Event())


def test_memory_of_one_stream_is_not_reused_by_another_before_it_is_done():
    s = nx.cuda.Stream()
    nx.cuda.synchronize()
    nx.cuda.empty_cache()  # no block of this size cached for the default stream by earlier tests
    before = nx.cuda.memory_stats()
    with nx.cuda.stream(s):
        t = nx.zeros(1 << 20, device=DEV)  # a block of s
    del t
    u = nx.zeros(1 << 20, device=DEV)  # the default stream may not take s's cached block
    after = nx.cuda.memory_stats()
    assert after["misses"] == before["misses"] + 2
    del u
    with nx.cuda.stream(s):
        v = nx.zeros(1 << 20, device=DEV)  # but s itself reuses it
    assert nx.cuda.memory_stats()["hits"] == after["hits"] + 1
    v.record_stream(nx.cuda.current_stream())  # used on the default stream too
    del v
    nx.cuda.synchronize()
    with nx.cuda.stream(s):
        w = nx.zeros(1 << 20, device=DEV)  # back in s's cache once the default stream's work is done
    assert nx.cuda.memory_stats()["hits"] == after["hits"] + 2
    del w


def test_the_loader_prefetches_to_the_gpu_with_the_numpy_batches_values():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1000, 33)).astype(np.float32)
    y = rng.integers(0, 10, 1000)
    s = np.array([str(i) for i in range(1000)], dtype=object)
    host_loader = nx.data.DataLoader((x, y, s), 64, seed=5)
    dl = nx.data.DataLoader((x, y, s), 64, seed=5, device=DEV)
    for _ in range(2):  # the second epoch's order differs: it follows the host loader's
        host = list(host_loader)
        n = 0
        for (hx, hy, hs), (dx, dy, ds) in zip(host, dl):
            assert dx.device == nx.device(DEV) and dy.dtype == nx.int64
            y_pred = dx * 3.0 + 1.0  # the step's work, queued on the default stream
            np.testing.assert_array_equal(y_pred.cpu().numpy(), hx * 3.0 + 1.0)
            np.testing.assert_array_equal(dy.cpu().numpy(), hy)
            assert ds.tolist() == hs.tolist()
            n += 1
        assert n == len(host) == 16


def test_the_loader_trains_a_model_on_the_gpu():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((512, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    g = nx.GraphBuilder(seed=0).input("x", nx.Shape(64, 8)).dense(16, "relu").dense(2, "softmax")
    model = g.compile(optimizer=nx.optim.Adam(lr=0.05), device=DEV)
    losses = []
    for _ in range(5):
        for bx, by in nx.data.DataLoader((x, y), 64, device=DEV):
            losses.append(float(model.train_step(bx, by)))
    assert losses[-1] < 0.5 * losses[0]
