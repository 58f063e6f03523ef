"""compression="auto" decides from the codecs' measured cost and the link (a model of the ring:
bytes moved over the slowest link, plus encoding and decoding), never picking a codec predicted to
slow the reduction; an explicit codec predicted to cost more than it saves carries a warning."""

import dataclasses

import pytest

from nexus.scheduler.plan import (
    AUTO_CODEC,
    AUTO_SPARSE_CODECS,
    Compression,
    codec_ratio,
    measure_codec_costs,
    ring_seconds,
)
from nexus.scheduler.profile import Profile

GRAD = 4e6  # bytes


def ring(*gbps):
    return [Profile(rank=r, host="h", device="cpu", device_name="X", cores=1, threads=1, gemm_flops=1e9,
                    memory_total=1 << 30, memory_free=1 << 30, link_bandwidth=b * 1e9)
            for r, b in enumerate(gbps)]


def choose(compression, profiles, costs, below=1.0, grad=GRAD):
    return Compression.choose(compression, profiles, ["g"] * len(profiles), False, below, grad_bytes=grad,
                              codec_costs=costs)


def test_the_ring_model():
    assert ring_seconds(GRAD, 2, 1e9, "none", {}) == pytest.approx(GRAD / 1e9)
    assert ring_seconds(GRAD, 4, 1e9, "none", {}) == pytest.approx(1.5 * GRAD / 1e9)
    assert ring_seconds(GRAD, 1, 1e9, "int8", {"int8": 1.0}) == 0.0
    assert 0.25 < codec_ratio("int8") < 0.3 and codec_ratio("fp16") == pytest.approx(0.5, abs=0.01)
    with_int8 = ring_seconds(GRAD, 2, 1e9, "int8", {"int8": 1e-10})
    assert with_int8 == pytest.approx(GRAD * (codec_ratio("int8") / 1e9 + 1e-10))


def test_auto_compresses_a_slow_link_when_the_codec_is_cheap():
    cheap = {"fp16": 1e-11, "bf16": 1e-11, "int8": 1e-11}
    c = choose("auto", ring(0.1, 0.1), cheap)
    assert c.ring == "int8" and "int8" in c.reason and "uncompressed" in c.reason
    # when int8's encoding is dear and fp16's cheap, fp16 wins
    c = choose("auto", ring(0.1, 0.1), {"fp16": 1e-11, "bf16": 1e-11, "int8": 1e-8})
    assert c.ring in ("fp16", "bf16")


def test_auto_never_picks_a_codec_that_would_slow_the_reduction():
    dear = {"fp16": 2e-9, "bf16": 2e-9, "int8": 2e-9}  # 0.5 GB/s encode+decode
    c = choose("auto", ring(0.5, 0.5), dear)  # a 0.5 GB/s link: compression cannot pay
    assert c.ring == "none" and "would not pay" in c.reason and "ms" in c.reason
    # a small gain is not taken either (10 % at least): here each codec saves about 5 %
    barely = {s: (1 - codec_ratio(s)) / 1e9 * 0.95 for s in ("fp16", "bf16", "int8")}
    assert choose("auto", ring(1, 1), barely, below=2.0).ring == "none"


def test_fast_links_and_missing_costs_keep_the_threshold_rule():
    assert choose("auto", ring(10, 10), {"int8": 0.0}).ring == "none"  # above the threshold
    c = Compression.choose("auto", ring(0.1, 0.1), ["g", "g"], False, 1.0)  # no costs: the old rule
    assert c.ring == AUTO_CODEC


def test_an_explicit_codec_that_costs_more_than_it_saves_warns_with_both_numbers():
    c = choose("int8", ring(5, 5), {"int8": 2e-9})
    assert c.ring == "int8" and c.reason == "as requested"
    assert "predicted to slow" in c.warning and c.warning.count(" ms") == 2 and "5.00 GB/s" in c.warning
    assert choose("int8", ring(0.05, 0.05), {"int8": 1e-11}).warning == ""
    assert "warning" in dataclasses.asdict(c)  # logged with the plan


def test_codec_costs_are_measured():
    costs = measure_codec_costs(["fp16", "int8"], floats=1 << 16, repeats=1)
    assert set(costs) == {"fp16", "int8"} and all(0 < v < 1e-6 for v in costs.values())


def test_with_the_compute_time_auto_weighs_sparse_codecs_by_time_to_accuracy():
    costs = {"fp16": 1e-11, "bf16": 1e-11, "int8": 1e-11, "sign": 1e-11, "topk:0.01": 1e-11}

    def pick(gbps, compute, latency=0.0, hierarchical=False):
        profiles = [dataclasses.replace(p, link_latency_s=latency) for p in ring(gbps, gbps)]
        groups = ["a", "b"] if hierarchical else ["g", "g"]
        return Compression.choose("auto", profiles, groups, hierarchical, 1.0, grad_bytes=GRAD, codec_costs=costs,
                                  compute_seconds=compute)

    # the link sets the step time: fewer bytes win even at twice the steps
    slow = pick(0.01, compute=1e-3)
    assert slow.ring in AUTO_SPARSE_CODECS and "steps of" in slow.reason
    # the compute sets it: twice the steps cost more than the bytes save, so a dense codec
    dense = pick(0.5, compute=0.01)
    assert dense.ring in ("fp16", "bf16", "int8")
    # latency is paid per hop: top-k's all-gather has half the ring's hops
    assert ring_seconds(GRAD, 4, 1e9, "topk:0.01", costs, latency=1e-3) < \
        ring_seconds(GRAD, 4, 1e9, "sign", costs, latency=1e-3)
    assert ring_seconds(GRAD, 4, 1e9, "none", {}, latency=1e-3) == pytest.approx(1.5 * GRAD / 1e9 + 6e-3)
    # a hierarchical plan keeps its leaders' ring dense (the sparse codecs are flat-ring only)
    assert pick(0.01, compute=1e-3, hierarchical=True).leaders in ("fp16", "bf16", "int8")
