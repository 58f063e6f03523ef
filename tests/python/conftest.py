"""Fixtures for the tensor runtime tests (helpers live in nx_reference.py and gradcheck.py)."""

import numpy as np
import pytest
from fuzz_child import Worker


@pytest.fixture
def rng():
    """A fixed-seed generator, so every test sees the same data on every run."""
    return np.random.default_rng(20260)


@pytest.fixture(autouse=True)
def private_kernel_cache(tmp_path, monkeypatch):
    """Every test compiles fused kernels into its own NEXUS_CACHE_DIR (kernels a test process
    already loaded stay shared in memory, so this costs no extra compiles)."""
    cache = tmp_path / "nexus-cache"
    monkeypatch.setenv("NEXUS_CACHE_DIR", str(cache))
    return cache


@pytest.fixture
def torch():
    """PyTorch, for the tests that compare with it. It is in the `test` extra, so a missing torch
    fails those tests instead of skipping them unseen. (It also runs under tools/sanitize-test.sh's
    preloaded libasan: its comparisons pass there too.)"""
    try:
        import torch
    except ImportError as e:
        pytest.fail(f"torch is not installed ({e}); it is in the test extra: pip install -e '.[test]'")
    return torch


@pytest.fixture(scope="module")
def fuzz_child():
    """The fuzzers' child process (fuzz_child.Worker), one per test module."""
    w = Worker()
    yield w
    w.close()
