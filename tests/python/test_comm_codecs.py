"""Gradient codecs: round trips and error bounds, wire sizes, and error feedback through the ring."""

import math

import numpy as np
import pytest

from nexus._C import comm

SPECS = ["none", "fp16", "bf16", "int8", "topk:0.01", "topk:0.25", "sign"]
SIZES = [0, 1, 7, 255, 256, 257, 1000, 4099]


def roundtrip(spec, x):
    c = comm.Codec(spec)
    wire = c.encode(x)
    assert len(wire) == c.max_encoded_bytes(x.size)
    return c.decode(wire, x.size)


def bf16_reference(x):
    """Round to nearest even on the float32 bits, as torch and the core do."""
    u = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) >> 16 << 16
    return u.astype(np.uint32).view(np.float32)


@pytest.mark.parametrize("spec", SPECS)
@pytest.mark.parametrize("n", SIZES)
def test_every_codec_round_trips_every_size(rng, spec, n):
    x = rng.standard_normal(n).astype(np.float32)
    y = roundtrip(spec, x)
    assert y.dtype == np.float32 and y.shape == (n,)
    assert comm.Codec(spec).max_encoded_bytes(0) == 0


@pytest.mark.parametrize("spec", SPECS)
def test_encode_and_decode_into_given_buffers_match_the_copying_calls(rng, spec):
    # the benchmark's and the ring's path: no allocation, the result in the caller's buffers
    c = comm.Codec(spec)
    x = rng.standard_normal(3000).astype(np.float32)
    wire = np.full(c.max_encoded_bytes(x.size) + 8, 0xAB, np.uint8)
    written = c.encode(x, out=wire)
    assert written == c.max_encoded_bytes(x.size)
    assert bytes(wire[:written]) == c.encode(x) and (wire[written:] == 0xAB).all()
    out = np.full(x.size, 7.0, np.float32)
    assert c.decode(wire[:written], x.size, out=out) is out
    np.testing.assert_array_equal(out, c.decode(c.encode(x), x.size))
    base = rng.standard_normal(x.size).astype(np.float32)
    acc = base.copy()
    c.decode(wire[:written], x.size, out=acc, accumulate=True)
    np.testing.assert_array_equal(acc, base + out)


def test_codec_buffers_of_the_wrong_kind_raise_value_error():
    c = comm.Codec("fp16")
    x = np.ones(100, np.float32)
    for bad in (np.empty(199, np.uint8), np.empty(100, np.uint16), np.empty(400, np.uint8)[::2]):
        with pytest.raises(ValueError, match="out must be a writeable contiguous uint8 array"):
            c.encode(x, out=bad)
    wire = c.encode(x)
    for bad in (np.empty(100, np.float64), np.empty(99, np.float32)):
        with pytest.raises(ValueError, match="out must be a writeable contiguous float32 array"):
            c.decode(wire, 100, out=bad)
    with pytest.raises(ValueError, match="accumulate=True needs an out array"):
        c.decode(wire, 100, accumulate=True)


def test_none_is_lossless(rng):
    x = rng.standard_normal(1000).astype(np.float32)
    np.testing.assert_array_equal(roundtrip("none", x), x)
    assert comm.Codec("none").lossless and not comm.Codec("fp16").lossless


def test_fp16_rounds_like_numpy_and_saturates(rng):
    x = (rng.standard_normal(5000) * 100).astype(np.float32)
    y = roundtrip("fp16", x)
    np.testing.assert_array_equal(y, x.astype(np.float16).astype(np.float32))
    normal = np.abs(x) > 2.0**-14
    assert np.all(np.abs(y - x)[normal] <= np.abs(x)[normal] * 2.0**-11)
    big = np.array([1e6, -1e6, 7e4], np.float32)
    np.testing.assert_array_equal(roundtrip("fp16", big), [65504, -65504, 65504])


def test_bf16_rounds_to_nearest_even_with_relative_error_bound(rng):
    x = (rng.standard_normal(5000) * 1e3).astype(np.float32)
    y = roundtrip("bf16", x)
    np.testing.assert_array_equal(y, bf16_reference(x))
    assert np.all(np.abs(y - x) <= np.abs(x) * 2.0**-8)


@pytest.mark.parametrize("n", [1, 255, 256, 257, 1000, 4099])
def test_int8_error_is_at_most_half_a_step_per_block(rng, n):
    # blocks of very different magnitude: each gets its own scale
    x = (rng.standard_normal(n) * np.repeat(10.0 ** rng.integers(-3, 4, 64), 256)[:n])
    x = x.astype(np.float32)
    y = roundtrip("int8", x)
    block = comm.INT8_BLOCK
    assert block == 256
    for lo in range(0, n, block):
        xs, ys = x[lo:lo + block], y[lo:lo + block]
        scale = np.float32(np.abs(xs).max()) / np.float32(127)
        assert np.all(np.abs(ys - xs) <= scale / 2 * (1 + 1e-5)), lo
    zeros = np.zeros(300, np.float32)
    np.testing.assert_array_equal(roundtrip("int8", zeros), zeros)


@pytest.mark.parametrize("ratio", [0.01, 0.1, 0.5, 1.0])
def test_topk_keeps_exactly_the_largest_magnitudes(rng, ratio):
    n = 1000
    x = rng.permutation(np.arange(1, n + 1, dtype=np.float32)) * rng.choice([-1, 1], n)
    x = x.astype(np.float32)
    y = roundtrip(f"topk:{ratio}", x)
    k = math.ceil(ratio * n)
    kept = np.flatnonzero(y)
    assert kept.size == k
    np.testing.assert_array_equal(np.sort(np.abs(x))[::-1][:k], np.sort(np.abs(y[kept]))[::-1])
    np.testing.assert_array_equal(y[kept], x[kept])
    assert comm.Codec(f"topk:{ratio}").max_encoded_bytes(n) == 8 * k


def test_topk_breaks_ties_towards_the_lower_index():
    y = roundtrip("topk:0.5", np.array([1, -1, 1, 1], np.float32))
    np.testing.assert_array_equal(y, [1, -1, 0, 0])


@pytest.mark.parametrize("n", [1, 7, 8, 9, 1000])
def test_sign_keeps_signs_and_the_mean_magnitude(rng, n):
    x = rng.standard_normal(n).astype(np.float32)
    x[0] = 0.0 if n > 1 else x[0]
    y = roundtrip("sign", x)
    scale = np.abs(x.astype(np.float64)).mean()
    np.testing.assert_allclose(np.abs(y), scale, rtol=1e-6)
    np.testing.assert_array_equal(np.sign(y[1:]), np.sign(x[1:]))
    if n > 1:
        assert y[0] > 0  # zero decodes to +scale
    assert comm.Codec("sign").max_encoded_bytes(n) == 4 + (n + 7) // 8


def test_bad_specs_and_bad_messages_raise_value_error():
    for spec in ["zstd", "topk", "topk:0", "topk:1.5", "topk:abc", "int4"]:
        with pytest.raises(ValueError, match="valid codecs"):
            comm.Codec(spec)
    assert comm.Codec("topk:0.010").spec == "topk:0.01"
    c = comm.Codec("int8")
    with pytest.raises(ValueError, match="cannot hold 10 encoded elements"):
        c.decode(b"\0" * 11, 10)


# ---- on the wire: bytes sent by the ring, compressed vs uncompressed ---------------------------

@pytest.mark.parametrize("spec,bar", [("none", 1.0), ("fp16", 0.51), ("bf16", 0.51),
                                      ("int8", 0.27), ("topk:0.01", 0.03), ("sign", 0.04)])
@pytest.mark.parametrize("n_ranks", [2, 4])
def test_wire_bytes_meet_the_compression_bars(rng, spec, bar, n_ranks):
    inputs = [rng.standard_normal(1 << 16).astype(np.float32) for _ in range(n_ranks)]
    _, stats = comm.loopback_allreduce(inputs, compression=spec, timeout_s=30.0)
    sent = sum(s.bytes_sent for s in stats)
    uncompressed = sum(s.bytes_uncompressed for s in stats)
    assert uncompressed == 2 * (n_ranks - 1) * 4 * (1 << 16)
    assert sent <= bar * uncompressed, (spec, sent / uncompressed)


# ---- error feedback: nothing lost, only delayed -------------------------------------------------

@pytest.mark.parametrize("spec", ["int8", "topk:0.1", "sign", "bf16"])
def test_error_feedback_converges_in_mean_to_the_exact_sum(rng, spec):
    """The residuals telescope: the mean of T results misses the exact sum by O(1/T)."""
    n_ranks, n = 4, 600
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(n_ranks)]
    exact = np.sum(np.array(grads, np.float64), axis=0)
    one_shot = np.abs(comm.loopback_allreduce([g.copy() for g in grads], compression=spec,
                                              timeout_s=30.0)[0][0] - exact).max()
    residuals = [comm.Residual(n) for _ in range(n_ranks)]
    total, errors = np.zeros(n), {}
    for t in range(1, 1001):
        out, _ = comm.loopback_allreduce([g.copy() for g in grads], compression=spec, segment_bytes=512,
                                         residuals=residuals, timeout_s=30.0)
        total += out[0]
        if t in (250, 1000):
            errors[t] = np.abs(total / t - exact).max()
    assert errors[1000] < 0.1 * one_shot, (spec, one_shot, errors)
    assert errors[1000] < 0.5 * errors[250], (spec, errors)  # still shrinking, about as 1/T


def test_without_feedback_a_deterministic_codec_repeats_its_error(rng):
    grads = [rng.standard_normal(600).astype(np.float32) for _ in range(3)]
    first = comm.loopback_allreduce([g.copy() for g in grads], compression="sign")[0][0]
    again = comm.loopback_allreduce([g.copy() for g in grads], compression="sign")[0][0]
    np.testing.assert_array_equal(first, again)


def test_residual_holds_what_the_codec_dropped(rng):
    n = 512
    grads = [rng.standard_normal(n).astype(np.float32) for _ in range(2)]
    residuals = [comm.Residual(n), comm.Residual(n)]
    assert len(residuals[0]) == n and not residuals[0].numpy().any()
    comm.loopback_allreduce([g.copy() for g in grads], compression="topk:0.1", residuals=residuals)
    for r in residuals:
        kept = np.count_nonzero(r.numpy() == 0)
        assert 0 < kept < n  # dropped entries wait in the residual, sent ones are cleared
    residuals[0].reset()
    assert not residuals[0].numpy().any()
    # a lossless codec leaves nothing behind
    lossless = [comm.Residual(n), comm.Residual(n)]
    comm.loopback_allreduce([g.copy() for g in grads], compression="none", residuals=lossless)
    assert not any(r.numpy().any() for r in lossless)
