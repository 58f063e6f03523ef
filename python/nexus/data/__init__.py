"""nexus.data: native readers (JSONL, CSV, IDX) and a prefetching, rank-sharding DataLoader.

Re-exports only; the code lives in _readers.py, _loader.py and _datasets.py (``load``).
"""

from ._datasets import load
from ._loader import DataLoader
from ._readers import Table, iter_jsonl, read_csv, read_idx, read_jsonl

__all__ = ["DataLoader", "Table", "iter_jsonl", "load", "read_csv", "read_idx", "read_jsonl"]
