"""Built-in datasets for examples and the main job: ``nx.data.load(name, path=None)``.

- ``"digits"``: the 8x8 handwritten digits shipped with nexus (1,797 images, no download; the UCI
  optical-digits test set as scikit-learn bundles it, see ``DIGITS_LICENSE.txt``).
  Pixels are scaled to [0, 1] as float32 (64 features); labels are int64. The split is fixed:
  rows are permuted with ``numpy.random.default_rng(0)``, the first 1,437 (80 %) train and the
  remaining 360 test.
- ``"mnist"``: the standard IDX files (``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
  ``t10k-images-idx3-ubyte``, ``t10k-labels-idx1-ubyte``, raw or ``.gz``) from the folder
  ``path``; images flattened to 784 float32 features in [0, 1].
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ._readers import read_idx

_MNIST_FILES = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
DIGITS_TRAIN = 1437
DIGITS_FILE = Path(__file__).with_name("digits.npz")


def load(name: str, path=None):
    """``(x_train, y_train, x_test, y_test)`` as numpy arrays."""
    if name == "digits":
        return _digits()
    if name == "mnist":
        return _mnist(path)
    raise ValueError(f"unknown dataset {name!r}; valid: 'digits', 'mnist'")


def _digits():
    # pixels (uint8 0..16) and labels in scikit-learn's row order; made by tools/make_digits.py
    with np.load(DIGITS_FILE, allow_pickle=False) as f:
        pixels, labels = f["pixels"], f["labels"]
    order = np.random.default_rng(0).permutation(len(labels))
    x = (pixels[order].astype(np.float64) / 16.0).astype(np.float32)
    y = labels[order].astype(np.int64)
    return x[:DIGITS_TRAIN], y[:DIGITS_TRAIN], x[DIGITS_TRAIN:], y[DIGITS_TRAIN:]


def _find(folder: Path, stem: str) -> Path:
    for candidate in (folder / stem, folder / f"{stem}.gz"):
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"MNIST file {stem}[.gz] not found in {folder}; put the four standard IDX files "
        f"({', '.join(_MNIST_FILES)}, raw or .gz) there and pass path={str(folder)!r}")


def _mnist(path):
    if path is None:
        raise ValueError("load('mnist') needs path=<folder with the four MNIST IDX files>")
    folder = Path(path)
    xs = [read_idx(_find(folder, stem)) for stem in _MNIST_FILES]
    x_train = (xs[0].reshape(len(xs[0]), -1) / 255.0).astype(np.float32)
    x_test = (xs[2].reshape(len(xs[2]), -1) / 255.0).astype(np.float32)
    return x_train, xs[1].astype(np.int64), x_test, xs[3].astype(np.int64)
