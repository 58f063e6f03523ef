"""Fixtures for the tensor runtime tests (helpers live in nx_reference.py and gradcheck.py)."""

import numpy as np
import pytest


@pytest.fixture
def rng():
    """A fixed-seed generator, so every test sees the same data on every run."""
    return np.random.default_rng(20260)
