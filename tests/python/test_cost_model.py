"""The cluster cost model behind `nexus plan`: the modelled Split, reduction and config errors."""

import argparse
import copy
import json
from pathlib import Path

import pytest

from nexus.scheduler import cost_model as cm

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "cluster.toml"


def cluster(*groups, network=None, **model):
    """A config dict: model keys (default a 784-4096-4096-10 MLP, batch 4096) and groups given as
    (name, device, count) or (name, device, count, {extra keys})."""
    config = {"model": {"mlp": [784, 4096, 4096, 10], "batch": 4096, **model},
              "group": [{"name": g[0], "device": g[1], "count": g[2], **(g[3] if len(g) > 3
                                                                          else {})}
                        for g in groups]}
    if network is not None:
        config["network"] = network
    return config


MIXED = cluster(("a100", "A100-80GB", 8), ("v100", "V100-32GB", 4),
                ("cpu", "cpu-avx512", 4, {"cores": 32, "ghz": 2.5}),
                network={"gbps": 12.5, "latency_us": 10})


def by_group(plan):
    return {gp.name: gp for gp in plan.groups}


def test_mixed_cluster_gives_a100_ranks_the_largest_shares():
    plan = cm.plan_cluster(MIXED)
    g = by_group(plan)
    assert min(g["a100"].samples) > max(g["v100"].samples) > max(g["cpu"].samples) > 0
    assert sum(rp.samples for rp in plan.ranks) == 4096
    assert len(plan.ranks) == 16
    assert sum(gp.share for gp in plan.groups) == pytest.approx(1.0)
    assert plan.speedup > 1.0
    assert plan.compute_s < plan.equal_compute_s


def test_rates_follow_published_peaks_and_six_n_rule():
    plan = cm.plan_cluster(cluster(("a", "A100-40GB", 1)))
    params = 784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10
    assert plan.param_count == params
    assert plan.flops_per_sample == 6 * params
    assert plan.groups[0].rate == pytest.approx(19.5e12 * 0.5 / (6 * params))
    tf32 = cm.plan_cluster(cluster(("a", "A100-40GB", 1), dtype="tf32")).groups[0]
    assert (tf32.peak_flops, tf32.peak_path) == (156e12, "tf32")
    # V100 has no TF32 path: the fp32 peak is used
    v100 = cm.plan_cluster(cluster(("v", "V100-16GB", 1), dtype="tf32")).groups[0]
    assert (v100.peak_flops, v100.peak_path) == (15.7e12, "fp32")


def test_cpu_peak_is_cores_times_ghz_times_flop_per_cycle():
    plan = cm.plan_cluster(cluster(("c", "cpu-avx2", 1, {"cores": 8, "ghz": 3.0})))
    assert plan.groups[0].peak_flops == pytest.approx(8 * 3.0e9 * 32)
    assert plan.groups[0].efficiency == 0.7


def test_memory_caps_are_respected():
    # 20 M params x 16 bytes = 0.32 GB of state; 1 GB per rank leaves room for 340 samples.
    config = cluster(("a100", "A100-80GB", 2, {"memory_gb": 1}), ("cpu", "cpu-avx2", 2),
                     network={"gbps": 12.5}, activation_bytes_per_sample=2_000_000)
    plan = cm.plan_cluster(config)
    g = by_group(plan)
    assert g["a100"].cap == 339
    assert g["a100"].samples == [339, 339]
    assert sum(rp.samples for rp in plan.ranks) == 4096
    assert all(s <= gp.cap for gp in plan.groups for s in gp.samples)
    assert plan.equal_over_memory == ["a100"]


def test_homogeneous_cluster_gives_an_equal_split():
    plan = cm.plan_cluster(cluster(("a100", "A100-80GB", 8)))
    assert [rp.samples for rp in plan.ranks] == [512] * 8
    assert plan.speedup == pytest.approx(1.0)
    assert plan.network_gbps is None and not plan.compression


def test_hierarchical_beats_flat_when_the_network_is_slow():
    plan = cm.plan_cluster(cluster(("a", "A100-80GB", 8), ("b", "A100-80GB", 8),
                                   network={"gbps": 1, "compress_below_gbps": 0}))
    assert plan.reduce_hier_s < plan.reduce_flat_s
    assert plan.reduction == "hierarchical"
    assert plan.reduce_s == plan.reduce_hier_s


def test_alpha_beta_ring_formula():
    assert cm.ring_allreduce_time(8e9, 1, 1e9, 1e-3) == 0.0
    assert cm.ring_allreduce_time(8e9, 4, 1e9, 1e-3) == pytest.approx(2 * 3 / 4 * 8 + 6e-3)
    assert cm.broadcast_time(8e9, 4, 1e9, 1e-3) == pytest.approx(8 + 3e-3)


def test_compression_turns_on_below_the_threshold_and_lowers_the_reduction():
    groups = (("a", "A100-80GB", 4), ("v", "V100-32GB", 4))
    slow = {"gbps": 2, "latency_us": 10}
    off = cm.plan_cluster(cluster(*groups, network={**slow, "compress_below_gbps": 1}))
    on = cm.plan_cluster(cluster(*groups, network={**slow, "compress_below_gbps": 5}))
    assert not off.compression and on.compression
    assert "2 GB/s < compress_below_gbps 5" in on.compression_reason
    assert on.reduce_hier_s < off.reduce_hier_s
    assert on.reduce_s < off.reduce_s


def test_the_example_toml_parses_and_renders():
    config = cm.load_cluster_toml(EXAMPLE)
    plan = cm.plan_cluster(config)
    text = cm.render(plan)
    assert text.splitlines()[0].startswith("MODEL, not a measurement")
    for word in ("a100", "v100", "cpu", "speed-up", "hierarchical", "flat ring", "compression"):
        assert word in text
    assert sum(rp.samples for rp in plan.ranks) == config["model"]["batch"]


def run(argv, capsys):
    parser = argparse.ArgumentParser()
    cm.add_plan_arguments(parser)
    code = cm.run_plan(parser.parse_args(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_run_plan_prints_the_model_label(capsys):
    code, out, err = run([str(EXAMPLE)], capsys)
    assert code == 0 and err == ""
    assert "MODEL, not a measurement" in out.splitlines()[0]


def test_run_plan_batch_override_and_json(capsys):
    code, out, _ = run([str(EXAMPLE), "--batch", "1000", "--json"], capsys)
    assert code == 0
    data = json.loads(out)
    assert data["batch"] == 1000
    assert sum(r["samples"] for r in data["ranks"]) == 1000
    assert data["label"].startswith("MODEL")


def test_run_plan_returns_2_on_a_bad_file(tmp_path, capsys):
    code, out, err = run([str(tmp_path / "missing.toml")], capsys)
    assert code == 2 and out == ""
    assert err.startswith("nexus plan: ") and "missing.toml" in err
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nbatch = 4096\nmlp = [784 10]\n")
    code, _, err = run([str(bad)], capsys)
    assert code == 2 and "not valid TOML" in err and "line 3" in err and "Traceback" not in err
    code, _, err = run([str(EXAMPLE), "--batch", "0"], capsys)
    assert code == 2 and "batch must be a positive integer" in err


def test_load_cluster_toml_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such cluster file"):
        cm.load_cluster_toml(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nbatch = = 3\n")
    with pytest.raises(ValueError, match=r"bad\.toml: not valid TOML: .*line 2"):
        cm.load_cluster_toml(bad)


def edited(edit):
    config = copy.deepcopy(MIXED)
    edit(config)
    return config


@pytest.mark.parametrize("edit, message", [
    (lambda c: c["group"][1].update(device="V100-64GB"),
     r"\[\[group\]\] 'v100': unknown device 'V100-64GB'; valid devices: A100-40GB, .*cpu-avx2"),
    (lambda c: c["group"][0].update(count=0), r"'a100': count must be a positive integer, got 0"),
    (lambda c: c["group"][0].update(count=2.5), r"count must be a positive integer, got 2.5"),
    (lambda c: c["group"][0].pop("count"), r"'a100': missing key 'count'"),
    (lambda c: c["group"][0].pop("name"), r"\[\[group\]\] #1: missing key 'name'"),
    (lambda c: c["group"][0].update(lnk_gbps=3),
     r"unknown key 'lnk_gbps'; valid keys: .*link_gbps"),
    (lambda c: c["group"][0].update(cores=8), r"cores and ghz apply only to CPU devices"),
    (lambda c: c["group"][0].update(efficiency=1.5), r"efficiency is a fraction of peak"),
    (lambda c: c["group"][1].update(name="a100"), r"'a100': the name is used twice"),
    (lambda c: c["group"][0].update(link_gbps=-1), r"link_gbps must be a positive number"),
    (lambda c: c.pop("group"), r"missing \[\[group\]\] tables"),
    (lambda c: c.pop("model"), r"missing \[model\] table"),
    (lambda c: c["model"].pop("batch"), r"\[model\]: missing key 'batch'"),
    (lambda c: c["model"].pop("mlp"), r"missing key 'mlp' \(layer widths\), or 'flops_per_sample'"),
    (lambda c: c["model"].update(mlp=[784]), r"mlp must list two or more positive layer widths"),
    (lambda c: c["model"].update(param_count=10), r"either mlp or flops_per_sample"),
    (lambda c: c["model"].update(dtype="int8"), r"dtype 'int8' is not modelled; valid: float32"),
    (lambda c: c["model"].update(batch=-4), r"batch must be a positive integer, got -4"),
    (lambda c: c.pop("network"), r"missing \[network\] table: 3 groups need gbps"),
    (lambda c: c["network"].pop("gbps"), r"\[network\]: missing key 'gbps'"),
    (lambda c: c["network"].update(latency_us=-1), r"latency_us must be a number >= 0"),
    (lambda c: c["model"].update(activation_bytes_per_sample=1e9, batch=10**6),
     r"batch 1000000 does not fit: memory holds \d+ samples"),
    (lambda c: c["model"].update(mlp=[50_000, 50_000, 10], activation_bytes_per_sample=1),
     r"'v100': the model state .* leaves no room for one sample"),
])
def test_config_errors_name_the_key_and_what_is_valid(edit, message):
    with pytest.raises(ValueError, match=message):
        cm.plan_cluster(edited(edit))


def test_explicit_flops_and_params_replace_the_mlp():
    config = cluster(("a100", "A100-80GB", 8))
    del config["model"]["mlp"]
    config["model"].update(flops_per_sample=6e9, param_count=10**9)
    plan = cm.plan_cluster(config)
    assert plan.flops_per_sample == 6e9 and plan.gradient_bytes == 4 * 10**9


def test_devices_carry_sources_and_datasheet_peaks():
    assert {"A100-40GB", "A100-80GB", "V100-16GB", "V100-32GB", "H100-SXM", "T4", "cpu-avx512",
            "cpu-avx2", "cpu-arm-neon"} <= set(cm.DEVICES)
    assert all(d.source and d.fp32_flops > 0 and d.memory_bytes > 0 for d in cm.DEVICES.values())
    assert cm.DEVICES["H100-SXM"].fp32_flops == 67e12
    assert cm.DEVICES["T4"].fp32_flops == pytest.approx(8.1e12)
    assert cm.DEVICES["V100-32GB"].fp16_flops == 125e12
