"""The package's edges: what nexus needs at import and training time (numpy and the OpenBLAS wheel
alone; MPI, checkpoints, progress bars and benchmarks load theirs lazily), the digits data shipped
inside the package (the same arrays as scikit-learn's copy gave), and TOML on Python 3.10."""

import hashlib
import subprocess
import sys
import textwrap
from pathlib import Path

import nexus as nx
import numpy as np
import pytest

PACKAGE = Path(nx.__file__).resolve().parent

# Imported only by the features that need them; a bare training run must never touch them.
OPTIONAL = ("mpi4py", "mpich", "sklearn", "scipy", "safetensors", "tqdm", "torch", "onnx", "onnxruntime")

BLOCKER = """
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))
TRIED = []

class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            TRIED.append(name)
            raise ModuleNotFoundError(f"No module named {name!r} (blocked by the test)", name=name)
        return None

sys.meta_path.insert(0, Blocker())
for name in list(sys.modules):
    if name.partition(".")[0] in BLOCKED:
        del sys.modules[name]
"""


def _run_blocked(blocked, body):
    """Runs ``body`` in a fresh interpreter where importing any of ``blocked`` fails."""
    code = BLOCKER + textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", code, ",".join(blocked)], capture_output=True,
                          text=True, timeout=300, check=False)


def test_import_and_training_need_none_of_the_optional_packages():
    proc = _run_blocked(OPTIONAL, """
        import numpy as np
        import nexus as nx
        import nexus.distributed  # noqa: F401  (imports mpi4py only in init())

        x_train, y_train, x_test, y_test = nx.data.load("digits")
        g = nx.GraphBuilder(seed=0)
        g.input("pixels", nx.Shape(32, 64)).dense(16, "relu").dense(10, "softmax")
        model = g.compile(loss="cross_entropy", optimizer=nx.optim.Adam(lr=1e-3))
        first = model.train_step(x_train[:32], y_train[:32])
        model.fit(x_train[:64], y_train[:64], epochs=1, batch_size=32, progress=False)
        probs = model.predict(x_test)
        assert np.isfinite(first) and probs.shape == (len(x_test), 10), (first, probs.shape)
        assert np.allclose(probs.sum(axis=1), 1.0, atol=1e-5)
        assert nx.info()["version"] == nx.__version__
        print("TRIED", TRIED)
        print("LOADED", sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED))
    """)
    assert proc.returncode == 0, proc.stderr
    assert "TRIED []" in proc.stdout, f"an optional package was imported eagerly:\n{proc.stdout}"
    assert "LOADED []" in proc.stdout, proc.stdout


def test_blocked_optional_import_is_reported_by_the_feature_that_needs_it(tmp_path):
    # the blocker itself works: a checkpoint needs safetensors and says so
    proc = _run_blocked(("safetensors",), f"""
        import nexus as nx
        g = nx.GraphBuilder(seed=0)
        g.input("x", nx.Shape(4, 3)).dense(2, "softmax")
        model = g.compile(loss="cross_entropy", optimizer=nx.optim.SGD(lr=0.1))
        model.save({str(tmp_path / "m.safetensors")!r})
    """)
    assert proc.returncode != 0 and "safetensors" in proc.stderr, proc.stderr


# ---- the digits data ----------------------------------------------------------------------------

# sha256 of each array's little-endian bytes, recorded from scikit-learn's load_digits() through
# the original loader (rows permuted by default_rng(0), pixels / 16 as float32, labels int64).
DIGITS_FINGERPRINT = [
    ((1437, 64), np.float32, "6d786333644f57a23003df6f6b62421ec839881ae9abe190230a0c5fd269d573"),
    ((1437,), np.int64, "b62c5684e8251c8e20627b6f858d1d50425f76bc8df93d7d32a0a37610a341dc"),
    ((360, 64), np.float32, "01bd491a29bd9f7233205b7f121fe45c35a761b1bd2a2d2ac48079d8c277196c"),
    ((360,), np.int64, "5cdf6153e06c54789040e110205f7e1770aadd654b9a62373e10c0ca293008d2"),
]


def _sha256(a):
    return hashlib.sha256(a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()).hexdigest()


def test_digits_are_the_arrays_scikit_learn_gave():
    arrays = nx.data.load("digits")
    assert len(arrays) == 4
    for a, (shape, dtype, digest) in zip(arrays, DIGITS_FINGERPRINT):
        assert a.shape == shape and a.dtype == dtype
        assert _sha256(a) == digest
    x_train, y_train, _, y_test = arrays
    assert x_train.min() == 0.0 and x_train.max() == 1.0
    assert set(np.unique(np.concatenate([y_train, y_test]))) == set(range(10))


def test_digits_match_scikit_learn_when_installed():
    datasets = pytest.importorskip(
        "sklearn.datasets", reason="scikit-learn is not a dependency; the fingerprint test above "
                                   "covers the shipped data without it")
    d = datasets.load_digits()
    order = np.random.default_rng(0).permutation(len(d.target))
    x = (d.data[order] / 16.0).astype(np.float32)
    y = d.target[order].astype(np.int64)
    want = (x[:1437], y[:1437], x[1437:], y[1437:])
    for got, ref in zip(nx.data.load("digits"), want):
        assert got.dtype == ref.dtype and np.array_equal(got, ref)


def test_digits_file_and_its_licence_are_in_the_package():
    assert (PACKAGE / "data" / "digits.npz").is_file()
    assert "scikit-learn" in (PACKAGE / "data" / "DIGITS_LICENSE.txt").read_text(encoding="utf-8")


# ---- TOML on Python 3.10 ------------------------------------------------------------------------

def test_every_toml_read_goes_through_the_fallback_module():
    # tomllib is 3.11+; nexus._toml falls back to tomli (a dependency on 3.10 only)
    users = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
             if "tomllib" in p.read_text(encoding="utf-8") and p.name != "_toml.py"]
    assert users == []


def test_toml_reader_falls_back_to_tomli_without_tomllib(tmp_path):
    pytest.importorskip("tomli", reason="tomli is installed only on Python 3.10 (a dependency "
                                        "there); this Python has tomllib")
    run = tmp_path / "run.toml"
    run.write_text("[model]\ninput = [4]\nlayers = []\n", encoding="utf-8")
    proc = _run_blocked(("tomllib",), f"""
        import tomli
        from nexus import _toml
        from nexus.scheduler.run_config import load_run
        assert _toml.load is tomli.load
        assert load_run({str(run)!r})["model"]["input"] == [4]
    """)
    assert proc.returncode == 0, proc.stderr
