"""The tensor allocator's block cache: reused memory never leaks old contents, and the
NEXUS_ALLOC_CACHE_MB knob is honoured and checked."""

import os
import subprocess
import sys

import numpy as np
import pytest

import nexus as nx

# Below, at and above the cached range (32 KiB) and the huge-page alignment (4 MiB).
SIZES = [100, 8192, 10_000, 1 << 20, 1_500_000]


@pytest.mark.parametrize("n", SIZES)
def test_reused_blocks_start_clean(n):
    for _ in range(3):
        garbage = nx.full((n,), 7.0)  # freed at the next iteration: its block is cached
        del garbage
        z = nx.zeros(n)
        assert float(z.sum().item()) == 0.0
        o = nx.ones(n) + z
        assert float(o.sum().item()) == n


def test_live_tensors_never_share_a_block():
    ts = [nx.full((50_000,), float(i)) for i in range(8)]
    del ts[::2]  # half go back to the cache
    fresh = [nx.full((50_000,), -1.0) for _ in range(4)]
    for i, t in zip(range(1, 8, 2), ts):
        assert np.all(t.numpy() == i)
    for t in fresh:
        assert np.all(t.numpy() == -1.0)


def _run(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_cache_can_be_turned_off():
    code = ("import nexus as nx\n"
            "x = nx.arange(0, 100_000, 1, dtype='float64')\n"
            "for _ in range(5):\n"
            "    x = x * 2 - x\n"
            "print(x.sum().item())")
    on, off = _run(code), _run(code, NEXUS_ALLOC_CACHE_MB="0")
    assert on.returncode == 0 and off.returncode == 0, on.stderr + off.stderr
    assert on.stdout == off.stdout == f"{sum(range(100_000))}.0\n"


def test_bad_cache_size_is_a_clear_error():
    proc = _run("import nexus as nx; nx.zeros(100_000)", NEXUS_ALLOC_CACHE_MB="lots")
    assert proc.returncode != 0
    assert "NEXUS_ALLOC_CACHE_MB='lots' is not valid; expected an integer in [0, " in proc.stderr
    assert "Segmentation" not in proc.stderr
