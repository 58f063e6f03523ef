"""Every test in this folder needs a CUDA device: marked gpu, and skipped (saying why) where there
is none."""

from pathlib import Path

import pytest

import nexus as nx

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items):
    # The hook sees the whole session's items: only this folder's are GPU tests.
    reason = nx.cuda.unavailable_reason()
    for item in items:
        if not item.path.is_relative_to(HERE):
            continue
        item.add_marker(pytest.mark.gpu)
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"no usable CUDA device: {reason}"))
