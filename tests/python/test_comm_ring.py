"""Ring all-reduce over the loopback transport (ranks as threads, STYLE habit 8).

Inputs are small integers (float32) or dyadic values (float64) so every partial sum is exact:
the ring and the naive sum then agree bit for bit whatever the order of additions. A tiny
segment size forces the multi-segment pipeline.
"""

import numpy as np
import pytest

from nexus._C import comm

RANKS = range(1, 9)
TINY_SEGMENT = 12  # bytes: 3 float32 per segment


def sizes_for(n_ranks):
    return sorted({0, 1, max(n_ranks - 1, 0), n_ranks + 1, 37 * n_ranks + 3, 10007})


def int_inputs(rng, n_ranks, n, dtype=np.float32):
    return [rng.integers(-8, 9, size=n).astype(dtype) for _ in range(n_ranks)]


def chunk_lengths(n, n_ranks):
    return [n // n_ranks + (1 if c < n % n_ranks else 0) for c in range(n_ranks)]


def expected_uncompressed_bytes(n, n_ranks, rank, itemsize):
    """Reduce-scatter sends every chunk but r+1, all-gather every chunk but r+2."""
    if n_ranks == 1:
        return 0
    lens = chunk_lengths(n, n_ranks)
    return itemsize * (2 * n - lens[(rank + 1) % n_ranks] - lens[(rank + 2) % n_ranks])


def allreduce(inputs, **kw):
    kw.setdefault("timeout_s", 30.0)
    out, stats = comm.loopback_allreduce([x.copy() for x in inputs], **kw)
    return out, stats


@pytest.mark.parametrize("n_ranks", RANKS)
def test_ring_matches_naive_sum_bit_for_bit_for_every_size(rng, n_ranks):
    for n in sizes_for(n_ranks):
        inputs = int_inputs(rng, n_ranks, n)
        naive = np.sum(inputs, axis=0, dtype=np.float32)
        out, stats = allreduce(inputs, segment_bytes=TINY_SEGMENT)
        for r, got in enumerate(out):
            assert got.dtype == np.float32 and got.shape == (n,)
            np.testing.assert_array_equal(got, naive, err_msg=f"rank {r} of {n_ranks}, n={n}")
            want = expected_uncompressed_bytes(n, n_ranks, r, 4)
            assert stats[r].bytes_uncompressed == want, (n_ranks, n, r)
            assert stats[r].bytes_sent == want


@pytest.mark.parametrize("n_ranks", [2, 3, 5, 8])
@pytest.mark.parametrize("segment_bytes", [4, 20, 1 << 10, comm.MAX_SEGMENT_BYTES])
def test_ring_is_exact_for_any_segment_size(rng, n_ranks, segment_bytes):
    inputs = int_inputs(rng, n_ranks, 3001)
    out, _ = allreduce(inputs, segment_bytes=segment_bytes)
    naive = np.sum(inputs, axis=0, dtype=np.float32)
    for got in out:
        np.testing.assert_array_equal(got, naive)


@pytest.mark.parametrize("n_ranks", RANKS)
def test_ring_mean_divides_the_exact_sum_once(rng, n_ranks):
    for n in (1, n_ranks + 1, 1001):
        inputs = int_inputs(rng, n_ranks, n)
        want = np.sum(inputs, axis=0, dtype=np.float32) / np.float32(n_ranks)
        out, _ = allreduce(inputs, op="mean", segment_bytes=TINY_SEGMENT)
        for got in out:
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("n_ranks", [1, 2, 3, 4, 7, 8])
@pytest.mark.parametrize("op", ["sum", "mean"])
def test_ring_float64_is_exact_for_dyadic_inputs(rng, n_ranks, op):
    for n in sizes_for(n_ranks):
        inputs = [x * 0.125 for x in int_inputs(rng, n_ranks, n, np.float64)]
        want = np.sum(inputs, axis=0)
        if op == "mean":
            want = want / n_ranks
        out, stats = allreduce(inputs, op=op, segment_bytes=16)
        for r, got in enumerate(out):
            assert got.dtype == np.float64
            np.testing.assert_array_equal(got, want)
            assert stats[r].bytes_sent == expected_uncompressed_bytes(n, n_ranks, r, 8)


@pytest.mark.parametrize("n_ranks", RANKS)
@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_ring_max_and_min_match_numpy_for_every_size(rng, n_ranks, op, dtype):
    # torch.distributed.ReduceOp.MAX/MIN: elementwise over the ranks, the same on every rank.
    reduce = {"max": np.maximum, "min": np.minimum}[op].reduce
    for n in sizes_for(n_ranks):
        inputs = [x + rng.uniform(-0.5, 0.5, n).astype(dtype)
                  for x in int_inputs(rng, n_ranks, n, dtype)]
        if n > 2:  # a nan on one rank wins, as numpy.maximum
            inputs[-1][1] = np.nan
        out, stats = allreduce(inputs, op=op, segment_bytes=TINY_SEGMENT)
        want = reduce(np.stack(inputs), axis=0)
        for r, got in enumerate(out):
            np.testing.assert_array_equal(got, want, err_msg=f"rank {r} of {n_ranks}, n={n}")
            itemsize = np.dtype(dtype).itemsize
            assert stats[r].bytes_sent == expected_uncompressed_bytes(n, n_ranks, r, itemsize)


def test_ring_max_refuses_a_lossy_codec(rng):
    with pytest.raises(ValueError, match='op "max" takes codec "none", got "int8"'):
        allreduce(int_inputs(rng, 2, 10), op="max", compression="int8")


def test_ring_reduces_in_place_and_returns_the_same_arrays(rng):
    inputs = int_inputs(rng, 3, 50)
    bufs = [x.copy() for x in inputs]
    out, _ = comm.loopback_allreduce(bufs, segment_bytes=TINY_SEGMENT)
    assert all(o is b for o, b in zip(out, bufs))
    np.testing.assert_array_equal(bufs[1], np.sum(inputs, axis=0))


@pytest.mark.parametrize("codec", ["fp16", "bf16", "int8", "topk:0.1", "sign"])
@pytest.mark.parametrize("n_ranks", [2, 3, 5])
def test_lossy_ring_leaves_every_rank_bit_identical(rng, codec, n_ranks):
    inputs = [rng.standard_normal(777).astype(np.float32) for _ in range(n_ranks)]
    out, stats = allreduce(inputs, compression=codec, segment_bytes=256)
    for got in out[1:]:
        np.testing.assert_array_equal(got, out[0])
    assert all(s.bytes_sent < s.bytes_uncompressed for s in stats)


@pytest.mark.parametrize("n_ranks", [2, 3, 4])
def test_topk_sums_every_ranks_own_top_entries_in_rank_order(rng, n_ranks):
    # Each rank keeps its own top RATIO / N of each segment; the picks are gathered, not
    # re-sparsified along the ring, and added in rank order (so the bits match everywhere).
    n, seg_bytes = 777, 256
    inputs = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
    out, stats = allreduce(inputs, compression="topk:0.2", segment_bytes=seg_bytes)
    seg = seg_bytes // 4
    ks = [int(np.ceil(0.2 / n_ranks * len(range(off, min(off + seg, n))) - 1e-9))
          for off in range(0, n, seg)]
    want = np.zeros(n, np.float32)
    for x in inputs:
        picked = np.zeros(n, np.float32)
        for off, k in zip(range(0, n, seg), ks):
            part = x[off:off + seg]
            top = np.argsort(-np.abs(part), kind="stable")[:k]
            picked[off + top] = part[top]
        want += picked
    for got in out:
        np.testing.assert_array_equal(got, want)
    for s in stats:  # N - 1 forwards of one message of 8-byte (index, value) entries
        assert s.bytes_sent == (n_ranks - 1) * 8 * sum(ks)


def test_world_of_one_sends_nothing_and_applies_no_codec(rng):
    x = rng.standard_normal(100).astype(np.float32)
    out, stats = allreduce([x], compression="sign", op="mean")
    np.testing.assert_array_equal(out[0], x)
    assert (stats[0].bytes_sent, stats[0].bytes_uncompressed) == (0, 0)
    assert stats[0].seconds >= 0


def test_stats_report_wire_and_uncompressed_bytes_separately(rng):
    inputs = [rng.standard_normal(4096).astype(np.float32) for _ in range(4)]
    _, plain = allreduce(inputs)
    _, half = allreduce(inputs, compression="fp16")
    for p, h in zip(plain, half):
        assert p.bytes_sent == p.bytes_uncompressed == h.bytes_uncompressed
        assert h.bytes_sent * 2 == h.bytes_uncompressed
    assert "bytes_sent=" in repr(plain[0])


# ---- failures: raised, named, never hanging --------------------------------------------------

@pytest.mark.parametrize("n_ranks,absent", [(2, 1), (4, 2), (8, 0)])
def test_a_rank_that_never_arrives_makes_the_others_raise_naming_it(rng, n_ranks, absent):
    inputs = int_inputs(rng, n_ranks, 1000)
    with pytest.raises(comm.CommError) as info:
        comm.loopback_allreduce(inputs, timeout_s=0.3, segment_bytes=64, absent=[absent])
    # The right neighbour waits on the absent rank and names both; whichever rank times out
    # first, the message says so and names the ranks that never joined.
    msg = str(info.value)
    right = (absent + 1) % n_ranks
    assert f"failed on {n_ranks - 1} of {n_ranks} ranks" in msg
    assert f"rank {right} (this rank)" in msg and f"from rank {absent}" in msg
    assert "timed out after 0.3 s" in msg
    assert f"ranks that never joined: {absent}" in msg


def test_a_rank_that_raises_stops_the_others_and_its_error_is_reported(rng):
    inputs = int_inputs(rng, 4, 100)
    residuals = [comm.Residual(100), comm.Residual(100), comm.Residual(5), comm.Residual(100)]
    with pytest.raises(ValueError, match="Residual has 5 elements but the buffer has 100"):
        comm.loopback_allreduce(inputs, compression="int8", residuals=residuals, timeout_s=30.0)


def test_bad_arguments_raise_value_and_type_errors(rng):
    x = [np.zeros(4, np.float32)] * 2
    with pytest.raises(ValueError, match="'prod' is not one of 'none', 'sum', 'mean', 'max', 'min'"):
        comm.loopback_allreduce([a.copy() for a in x], op="prod")
    # "none" is a ReduceOp (a loss's), but not one the ring combines ranks with
    with pytest.raises(ValueError, match="all_reduce: op 'none' is not one of 'sum', 'mean', 'max', 'min'$"):
        comm.loopback_allreduce([a.copy() for a in x], op="none")
    with pytest.raises(ValueError, match="valid codecs"):
        comm.loopback_allreduce([a.copy() for a in x], compression="zstd")
    with pytest.raises(ValueError, match="a float64 buffer takes codec"):
        comm.loopback_allreduce([np.zeros(4), np.zeros(4)], compression="fp16")
    with pytest.raises(ValueError, match="rank 1's buffer has 5 elements but rank 0's has 4"):
        comm.loopback_allreduce([np.zeros(4, np.float32), np.zeros(5, np.float32)])
    with pytest.raises(TypeError, match="float32 or float64"):
        comm.loopback_allreduce([np.zeros(4, np.int32)])
    with pytest.raises(ValueError, match="segment_bytes must be > 0"):
        comm.loopback_allreduce([a.copy() for a in x], segment_bytes=0)
    with pytest.raises(ValueError, match="timeout_s must be > 0"):
        comm.loopback_allreduce([a.copy() for a in x], timeout_s=0)
