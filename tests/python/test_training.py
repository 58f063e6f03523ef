"""Compiled training: steps against a numpy reference, determinism, fit/evaluate/predict,
checkpoints (round trip, corruption, atomic writes) and the digits main job."""

from __future__ import annotations

import errno
import json
import os

import numpy as np
import pytest

import nexus as nx
from fs_faults import run_with_file_size_limit
from nexus import GraphBuilder, Shape


def mlp(seed=0, dtype="float64", optimizer=None, dropout=0.0):
    g = GraphBuilder(seed=seed, dtype=dtype)
    g.input("x", Shape(16, 6)).dense(8, "tanh")
    if dropout:
        g.dropout(dropout)
    g.dense(4, "softmax")
    return g.compile(loss="cross_entropy", optimizer=optimizer or nx.optim.SGD(lr=0.1))


def numpy_sgd_reference(params, batches, lr):
    """Forward, hand-written backward and plain SGD for dense(tanh) -> dense -> softmax CE."""
    w1, b1, w2, b2 = (params[k].copy() for k in ("dense_1.weight", "dense_1.bias", "dense_2.weight", "dense_2.bias"))
    losses = []
    for x, y in batches:
        h = np.tanh(x @ w1 + b1)
        z = h @ w2 + b2
        z = z - z.max(1, keepdims=True)
        p = np.exp(z) / np.exp(z).sum(1, keepdims=True)
        n = len(y)
        losses.append(-np.log(p[np.arange(n), y]).mean())
        dz = p.copy()
        dz[np.arange(n), y] -= 1
        dz /= n
        dw2, db2 = h.T @ dz, dz.sum(0)
        dh = dz @ w2.T * (1 - h * h)
        dw1, db1 = x.T @ dh, dh.sum(0)
        w1, b1, w2, b2 = w1 - lr * dw1, b1 - lr * db1, w2 - lr * dw2, b2 - lr * db2
    return losses, {"dense_1.weight": w1, "dense_1.bias": b1, "dense_2.weight": w2, "dense_2.bias": b2}


def batches(n=4, size=16, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((size - i, 6)), rng.integers(0, 4, size - i)) for i in range(n)]


def test_sgd_training_curve_equals_a_numpy_reference():
    model = mlp()
    start = {k: v.numpy().copy() for k, v in model.params.items()}
    data = batches()
    losses = [model.train_step(x, y) for x, y in data]
    ref_losses, ref_params = numpy_sgd_reference(start, data, lr=0.1)
    np.testing.assert_allclose(losses, ref_losses, rtol=1e-12)
    for k, v in model.params.items():
        np.testing.assert_allclose(v.numpy(), ref_params[k], rtol=1e-10, atol=1e-12, err_msg=k)


def test_same_seed_data_and_threads_give_bitwise_identical_weights():
    x = np.random.default_rng(1).standard_normal((50, 6)).astype(np.float32)
    y = np.arange(50) % 4
    runs = []
    for _ in range(2):
        nx.manual_seed(7)  # dropout masks
        model = mlp(dtype="float32", optimizer=nx.optim.Adam(lr=1e-2), dropout=0.3)
        model.fit(x, y, epochs=3, batch_size=16, progress=False)
        runs.append({k: v.numpy().copy() for k, v in model.params.items()})
    for k in runs[0]:
        np.testing.assert_array_equal(runs[0][k], runs[1][k], err_msg=k)


def test_fit_runs_the_partial_last_batch_and_logs_json_lines(tmp_path, capsys):
    x = np.random.default_rng(2).standard_normal((37, 6))
    y = np.arange(37) % 4
    model = mlp()
    log = tmp_path / "metrics.jsonl"
    history = model.fit(x, y, epochs=2, batch_size=16, validation_data=(x, y), progress=False, log_file=log)
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    assert [r["epoch"] for r in lines] == [1, 2]
    assert history["loss"] == [r["loss"] for r in lines]
    assert set(history.history) >= {"loss", "val_loss", "val_accuracy", "samples_per_second"}
    assert model.optimizer.step_count == 2 * 3  # 16 + 16 + 5 samples per epoch
    assert capsys.readouterr().err == ""  # progress=False: no bar


def test_evaluate_and_predict_agree():
    x = np.random.default_rng(3).standard_normal((40, 6))
    y = np.arange(40) % 4
    model = mlp()
    probs = model.predict(x, batch_size=7)
    assert probs.shape == (40, 4)
    result = model.evaluate(x, y, batch_size=9)
    assert result["accuracy"] == pytest.approx(float((probs.argmax(1) == y).mean()))
    ref = -np.log(probs[np.arange(40), y]).mean()
    assert result["loss"] == pytest.approx(ref, rel=1e-9)


def test_bad_training_input_raises():
    model = mlp()
    with pytest.raises(ValueError, match="3 samples but 2 labels"):
        model.fit(np.zeros((3, 6)), np.zeros(2, np.int64), progress=False)
    with pytest.raises(TypeError, match="labels must be integer"):
        model.train_step(np.zeros((2, 6)), np.zeros(2))
    with pytest.raises(ValueError, match="unknown loss"):
        GraphBuilder().input("x", Shape(2, 3)).dense(2).compile(loss="hinge")


def test_save_and_load_round_trip_continues_training_identically(tmp_path):
    data = batches(n=6, seed=4)
    model = mlp(optimizer=nx.optim.Adam(lr=1e-2))
    for x, y in data[:3]:
        model.train_step(x, y)
    path = tmp_path / "mlp.nexus"
    model.save(path)
    restored = nx.load(path)
    np.testing.assert_array_equal(restored.predict(data[0][0]), model.predict(data[0][0]))
    for x, y in data[3:]:
        assert restored.train_step(x, y) == model.train_step(x, y)
    for k, v in model.params.items():
        np.testing.assert_array_equal(restored.params[k].numpy(), v.numpy(), err_msg=k)


def test_truncated_or_corrupt_checkpoint_raises_a_clear_error(tmp_path):
    path = tmp_path / "m.nexus"
    mlp().save(path)
    raw = path.read_bytes()
    for broken in (raw[: len(raw) // 2], b"\x00" * 16, b"not a checkpoint at all"):
        path.write_bytes(broken)
        with pytest.raises(ValueError, match="not a valid Nexus checkpoint"):
            nx.load(path)
    with pytest.raises(FileNotFoundError):
        nx.load(tmp_path / "missing.nexus")


def test_a_failed_save_leaves_the_previous_file_intact(tmp_path):
    """A save that fails half way (a file-size limit stands in for a full disk) leaves the
    previous checkpoint and no temporary file, and the error names the checkpoint."""
    path = tmp_path / "m.nexus"
    mlp().save(path)
    before = path.read_bytes()
    proc = run_with_file_size_limit(
        f"import numpy as np, nexus as nx\nmodel = nx.load({str(path)!r})\n"
        "model.train_step(np.ones((16, 6)), np.zeros(16, np.int64))",
        f"model.save({str(path)!r})", limit=64)
    assert proc.returncode != 0
    assert f"OSError: [Errno {errno.EFBIG}]" in proc.stderr and str(path) in proc.stderr
    assert path.read_bytes() == before
    assert [f for f in os.listdir(tmp_path) if f.startswith("m.")] == ["m.nexus"]  # no temp file left


def test_saving_into_a_missing_folder_names_the_checkpoint_and_the_folder(tmp_path):
    target = tmp_path / "runs" / "m.nexus"
    with pytest.raises(FileNotFoundError, match="does not exist") as info:
        mlp().save(target)
    assert info.value.filename == str(target)
    assert str(target.parent) in str(info.value) and ".tmp" not in str(info.value)
    assert not tmp_path.joinpath("runs").exists()


def test_readme_main_job_reaches_97_percent_on_digits():
    x_train, y_train, x_test, y_test = nx.data.load("digits")
    assert x_train.shape == (1437, 64) and x_test.shape == (360, 64)
    g = GraphBuilder(seed=0)
    g.input("pixels", Shape(32, 64)).dense(256, "relu").dropout(0.2).dense(10, "softmax")
    model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
    model.fit(x_train, y_train, epochs=30, batch_size=32, progress=False)
    assert model.evaluate(x_test, y_test)["accuracy"] >= 0.97


def test_summary_lists_layers_shapes_and_parameter_counts(capsys):
    text = mlp().summary()
    assert "dense_1" in text and "(None, 8)" in text and "56" in text  # 6*8 + 8
    assert "total parameters: 92" in text  # 56 + 8*4 + 4
    assert capsys.readouterr().out.strip() == text.strip()


def write_idx(path, arr):
    header = bytes([0, 0, 0x08, arr.ndim]) + b"".join(int(d).to_bytes(4, "big") for d in arr.shape)
    path.write_bytes(header + arr.astype(np.uint8).tobytes())


def test_mnist_loads_from_a_folder_of_idx_files(tmp_path):
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (5, 28, 28)), rng.integers(0, 10, 5)
    for prefix in ("train", "t10k"):
        write_idx(tmp_path / f"{prefix}-images-idx3-ubyte", images)
        write_idx(tmp_path / f"{prefix}-labels-idx1-ubyte", labels)
    x_train, y_train, x_test, y_test = nx.data.load("mnist", path=tmp_path)
    assert x_train.shape == (5, 784) and x_train.dtype == np.float32
    np.testing.assert_allclose(x_train, images.reshape(5, -1) / 255.0, rtol=1e-6)
    np.testing.assert_array_equal(y_test, labels)


def test_missing_mnist_files_say_where_to_put_them(tmp_path):
    with pytest.raises(FileNotFoundError, match="put the four standard IDX files"):
        nx.data.load("mnist", path=tmp_path)
    with pytest.raises(ValueError, match="unknown dataset"):
        nx.data.load("cifar")


def test_progress_bar_shows_samples_and_loss_when_asked(capsys):
    x = np.random.default_rng(5).standard_normal((20, 6))
    mlp().fit(x, np.arange(20) % 4, epochs=1, batch_size=8, progress=True)
    err = capsys.readouterr().err
    assert "epoch 1/1" in err and "loss=" in err and "sample/s" in err
