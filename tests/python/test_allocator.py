"""The tensor allocator's block cache: a freed block is reused by the next allocation of its size
class (seen in _C.alloc_stats()), reused memory never leaks old contents, and the
NEXUS_ALLOC_CACHE_MB knob is honoured and checked."""

import os
import subprocess
import sys

import numpy as np
import pytest

import nexus as nx
from nexus import _C

# Small and large blocks (malloc serves fresh ones from mmap from 128 KiB), and past the huge-page
# alignment (4 MiB).
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


N = 100_000  # float32: 400 KB


@pytest.fixture
def empty_cache():
    """Starts the test with no cached block, so every hit comes from a block the test freed."""
    _C.alloc_empty_cache()
    yield
    _C.alloc_empty_cache()


def delta(before):
    after = _C.alloc_stats()
    return {k: after[k] - before[k] for k in ("hits", "misses")}


def test_a_freed_block_is_reused_by_the_next_allocation_of_its_size_class(empty_cache):
    before = _C.alloc_stats()
    x = nx.zeros(N)
    assert delta(before) == {"hits": 0, "misses": 1}  # nothing cached: from the system
    del x
    cached = _C.alloc_stats()
    assert cached["cached_blocks"] == 1
    assert 4 * N <= cached["cached_bytes"] <= 4 * N * 5 // 4  # its size class: <= 25% slack
    before = _C.alloc_stats()
    y = nx.zeros(N)
    assert delta(before) == {"hits": 1, "misses": 0}
    assert _C.alloc_stats()["cached_bytes"] == 0 and _C.alloc_stats()["cached_blocks"] == 0
    assert float(y.sum().item()) == 0.0
    del y


@pytest.mark.parametrize("n", [4 * N, N // 4], ids=["larger class", "much smaller class"])
def test_a_block_of_another_size_class_is_not_reused(empty_cache, n):
    x = nx.zeros(N)
    del x
    cached = _C.alloc_stats()["cached_bytes"]
    before = _C.alloc_stats()
    y = nx.zeros(n)
    assert delta(before) == {"hits": 0, "misses": 1}
    assert _C.alloc_stats()["cached_bytes"] == cached  # the freed block is still there
    del y


def test_small_blocks_are_reused_too(empty_cache):
    x = nx.zeros(1000)  # 4 KB, in a class of its own
    del x
    assert _C.alloc_stats()["cached_bytes"] == 4096
    before = _C.alloc_stats()
    y = nx.zeros(1000)
    assert delta(before) == {"hits": 1, "misses": 0}
    assert _C.alloc_stats()["cached_bytes"] == 0
    del y


def test_live_tensors_never_share_a_block():
    ts = [nx.full((50_000,), float(i)) for i in range(8)]
    del ts[::2]  # half go back to the cache
    fresh = [nx.full((50_000,), -1.0) for _ in range(4)]
    for i, t in zip(range(1, 8, 2), ts):
        assert np.all(t.numpy() == i)
    for t in fresh:
        assert np.all(t.numpy() == -1.0)


def test_a_file_read_again_takes_its_columns_from_the_cache(empty_cache, tmp_path):
    # The text readers' column buffers (the per-range builders and the finished columns handed to
    # numpy) come from this cache: reading the same file again faults in (almost) no fresh memory.
    # Which builders a read holds at once depends on how its ranges interleave on the threads, so
    # a read may need a block or two more of a size than any read before it; the cache keeps
    # those, and the reads after it take none fresh.
    path = tmp_path / "t.csv"
    rows = 20_000
    path.write_text("a,b,c\n" + "".join(f"{i},{i * 0.5},x{i % 7}\n" for i in range(rows)))
    first = nx.data.read_csv(str(path))
    expected = {k: v.copy() for k, v in first.items()}
    del first
    hits, misses = [], []
    for _ in range(4):
        before = _C.alloc_stats()
        again = nx.data.read_csv(str(path))
        d = delta(before)
        hits.append(d["hits"])
        misses.append(d["misses"])
        for k, v in expected.items():
            assert np.array_equal(again[k], v)
        del again
    assert min(hits) > 0
    assert sum(misses) * 10 <= sum(hits), (hits, misses)  # nearly all from the cache
    assert min(misses) == 0, (hits, misses)  # and some read took nothing fresh
    assert _C.alloc_stats()["cached_bytes"] >= 2 * rows * 8  # the two numeric columns came back


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


def test_cache_off_never_keeps_or_reuses_a_block():
    code = ("import nexus as nx\n"
            "from nexus import _C\n"
            "x = nx.zeros(100_000)\n"
            "del x\n"
            "y = nx.zeros(100_000)\n"
            "s = _C.alloc_stats()\n"
            "print(s['hits'], s['cached_bytes'], s['limit_bytes'])")
    off = _run(code, NEXUS_ALLOC_CACHE_MB="0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["0", "0", "0"]
    on = _run(code, NEXUS_ALLOC_CACHE_MB="3")
    assert on.returncode == 0, on.stderr
    hits, _, limit = on.stdout.split()
    assert int(hits) >= 1 and int(limit) == 3 << 20


def test_bad_cache_size_is_a_clear_error():
    proc = _run("import nexus as nx; nx.zeros(100_000)", NEXUS_ALLOC_CACHE_MB="lots")
    assert proc.returncode != 0
    assert "NEXUS_ALLOC_CACHE_MB='lots' is not valid; expected an integer in [0, " in proc.stderr
    assert "Segmentation" not in proc.stderr
