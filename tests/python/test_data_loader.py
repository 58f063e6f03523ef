"""nx.data.DataLoader: batches, shuffling, determinism, shards across ranks, prefetch."""

import numpy as np
import pytest

import nexus as nx


def _data(n=103):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64)
    s = np.array([f"r{i}" for i in range(n)], dtype=object)
    return x, y, s


@pytest.mark.parametrize("prefetch", [0, 1, 2, 5])
def test_batches_cover_every_row_once_and_keep_rows_together(prefetch):
    x, y, s = _data()
    dl = nx.data.DataLoader({"x": x, "y": y, "s": s}, batch_size=10, prefetch=prefetch)
    batches = list(dl)
    assert len(batches) == len(dl) == 11
    assert [len(b["y"]) for b in batches] == [10] * 10 + [3]
    seen = np.concatenate([b["y"] for b in batches])
    assert sorted(seen.tolist()) == list(range(103)) and seen.tolist() != list(range(103))
    for b in batches:
        np.testing.assert_array_equal(b["x"], x[b["y"]])
        assert b["s"].tolist() == [f"r{i}" for i in b["y"]]
        assert b["x"].dtype == np.float32 and b["x"].shape[1:] == (3,)


def test_no_shuffle_is_in_order_and_structures_follow_input():
    x, y, _ = _data(7)
    assert [b.tolist() for b in nx.data.DataLoader(y, 3, shuffle=False)] == [[0, 1, 2], [3, 4, 5], [6]]
    b = next(iter(nx.data.DataLoader((x, y), 4, shuffle=False)))
    assert isinstance(b, tuple) and b[1].tolist() == [0, 1, 2, 3]


def test_drop_last():
    _, y, _ = _data(103)
    dl = nx.data.DataLoader(y, 10, drop_last=True)
    assert len(dl) == 10 and all(len(b) == 10 for b in dl)


def test_seed_determinism_and_epochs():
    _, y, _ = _data()
    a = nx.data.DataLoader(y, 8, seed=5)
    b = nx.data.DataLoader(y, 8, seed=5, prefetch=0)
    ea1, eb1 = [t.tolist() for t in a], [t.tolist() for t in b]
    assert ea1 == eb1
    ea2 = [t.tolist() for t in a]
    assert ea2 != ea1  # a new epoch, a new order
    b.set_epoch(1)
    assert [t.tolist() for t in b] == ea2
    assert [t.tolist() for t in nx.data.DataLoader(y, 8, seed=6)] != ea1


@pytest.mark.parametrize("world,shares", [(2, None), (3, None), (4, None), (3, [5, 2, 9]),
                                          (2, [0, 16])])
def test_rank_shards_are_disjoint_and_cover_each_global_batch(world, shares):
    _, y, _ = _data(101)
    per_rank = [list(nx.data.DataLoader(y, 16, seed=3, rank=r, world_size=world, shares=shares))
                for r in range(world)]
    full = list(nx.data.DataLoader(y, 16, seed=3))
    assert all(len(p) == len(full) for p in per_rank)
    for i, batch in enumerate(full):
        parts = [p[i].tolist() for p in per_rank]
        assert sum(parts, []) == batch.tolist()  # disjoint, covering, in order
        if shares and i < len(full) - 1:
            assert [len(q) for q in parts] == shares


def test_batches_stay_valid_after_later_batches():
    _, y, _ = _data(1000)
    batches = list(nx.data.DataLoader(y, 7, prefetch=3))
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))


def test_abandoned_iteration_stops_cleanly():
    _, y, _ = _data(10000)
    for _ in range(20):
        it = iter(nx.data.DataLoader(y, 3, prefetch=4))
        next(it)
        del it


def test_bad_arguments():
    _, y, _ = _data(10)
    with pytest.raises(ValueError, match="same number of rows"):
        nx.data.DataLoader((y, y[:5]), 2)
    with pytest.raises(ValueError, match="shares sum to 5"):
        nx.data.DataLoader(y, 4, shares=[2, 3], rank=0)
    with pytest.raises(ValueError, match="needs rank"):
        nx.data.DataLoader(y, 4, world_size=2)
    with pytest.raises(IndexError, match="rank 2 out of range"):
        nx.data.DataLoader(y, 4, world_size=2, rank=2)
    with pytest.raises(ValueError, match="batch_size"):
        nx.data.DataLoader(y, 0)


def test_a_path_instead_of_arrays_says_to_read_the_file_first(tmp_path):
    for source in (str(tmp_path / "x.csv"), tmp_path / "x.csv"):
        with pytest.raises(TypeError, match="read it first with nx.data.read_csv"):
            nx.data.DataLoader(source, batch_size=2)


def test_a_device_yields_tensors_with_the_numpy_batches_values():
    x, y, s = _data(23)
    for structure in ("dict", "tuple", "single"):
        arrays = {"x": x, "y": y, "s": s} if structure == "dict" else (x, y, s) if structure == "tuple" else x
        host = list(nx.data.DataLoader(arrays, 5, seed=3))
        dev = list(nx.data.DataLoader(arrays, 5, seed=3, device="cpu"))
        assert len(dev) == len(host) == 5
        for h, d in zip(host, dev):
            if structure == "single":
                h, d = {"x": h}, {"x": d}
            elif structure == "tuple":
                h, d = dict(zip("xys", h)), dict(zip("xys", d))
            assert isinstance(d["x"], nx.Tensor) and d["x"].device == nx.device("cpu")
            np.testing.assert_array_equal(d["x"].numpy(), h["x"])
            if "y" in d:
                assert d["y"].dtype == nx.int64
                np.testing.assert_array_equal(d["y"].numpy(), h["y"])
                assert isinstance(d["s"], np.ndarray) and d["s"].tolist() == h["s"].tolist()


def test_a_device_batch_keeps_its_values_while_later_batches_are_gathered():
    x = np.arange(40, dtype=np.float32).reshape(20, 2)
    batches = list(nx.data.DataLoader(x, 4, shuffle=False, prefetch=1, device="cpu"))
    for i, b in enumerate(batches):  # the native buffers are reused only once a batch is dropped
        np.testing.assert_array_equal(b.numpy(), x[4 * i:4 * i + 4])


def test_a_device_refuses_a_dtype_tensors_cannot_hold_when_made():
    with pytest.raises(TypeError, match=r"DataLoader\(device='cpu'\).*uint8.*astype"):
        nx.data.DataLoader(np.zeros((4, 2), np.uint8), 2, device="cpu")
    with pytest.raises(ValueError):
        nx.data.DataLoader(np.zeros((4, 2), np.float32), 2, device="tpu")


@pytest.mark.skipif(nx.cuda.is_available(), reason="checks the no-GPU path; this machine has a CUDA device")
def test_a_gpu_device_without_cuda_raises_when_made_saying_why():
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        nx.data.DataLoader(np.zeros((4, 2), np.float32), 2, device="cuda")
