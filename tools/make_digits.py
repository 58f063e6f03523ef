"""Regenerates python/nexus/data/digits.npz from scikit-learn's bundled copy of the digits.

    pip install scikit-learn && python tools/make_digits.py

Run once; the output is checked in, so nexus itself never needs scikit-learn. The file holds the
1,797 rows of ``sklearn/datasets/data/digits.csv.gz`` in their original order: ``pixels`` (uint8,
1797 x 64, values 0..16) and ``labels`` (uint8, 0..9). ``nx.data.load("digits")`` applies the
scaling and the fixed split (python/nexus/data/_datasets.py).
"""

from pathlib import Path

import numpy as np
from sklearn.datasets import load_digits

OUT = Path(__file__).resolve().parent.parent / "python" / "nexus" / "data" / "digits.npz"


def main() -> None:
    d = load_digits()
    pixels = d.data.astype(np.uint8)
    labels = d.target.astype(np.uint8)
    if not (np.array_equal(pixels, d.data) and np.array_equal(labels, d.target)):
        raise SystemExit("scikit-learn's digits are not small integers; the format changed")
    np.savez_compressed(OUT, pixels=pixels, labels=labels)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(labels)} rows)")


if __name__ == "__main__":
    main()
