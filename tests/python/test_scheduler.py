"""The scheduler's policy in one process: the split, the rebalancer, cluster declarations, the
train loop as a world of one, and `nexus train` (tests/mpi/test_mpi_scheduler.py runs 3 ranks)."""

import dataclasses
import io
import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import nexus as nx
from nexus import BatchSize, ClusterConfig, DeviceType, Epochs, GraphBuilder, Scheduler, Shape
from nexus import _toml
from nexus.cli import main as cli
from nexus.scheduler.balance import PHASES, AdaptiveBalancer, Readings, RunMeter, StepTimes
from nexus.scheduler.plan import Compression, Plan, Rebalance
from nexus.scheduler.profile import Gpu, Profile
from nexus.scheduler.run_config import build_graph, model_spec
from nexus.scheduler.split import Split, equal_split, split_batch, step_time


# ---- split -------------------------------------------------------------------------------------
@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.01, 1e4), min_size=1, max_size=12), st.integers(0, 5000))
def test_split_sums_to_the_batch_within_one_sample_of_proportional(rates, batch):
    shares = split_batch(rates, batch)
    assert sum(shares) == batch and min(shares) >= 0
    if batch >= len(rates):
        assert min(shares) >= 1  # nobody sits a step out
    total = sum(rates)
    if batch * min(rates) / total >= 1:  # nobody needs lifting to one sample: plain proportion
        for s, r in zip(shares, rates):
            assert abs(s - batch * r / total) < 1 + 1e-9
    by_rate = [s for _, s in sorted(zip(rates, shares))]
    assert by_rate == sorted(by_rate)  # a faster rank never gets fewer samples


@pytest.mark.parametrize("rates,batch,want", [
    ([1000.0, 1.0], 3, [2, 1]),            # an odd batch: the slow rank still gets one
    ([1000.0, 1.0, 1.0], 3, [1, 1, 1]),
    ([1.0, 1000.0, 1.0, 1.0], 5, [1, 2, 1, 1]),
    ([1000.0, 1.0], 1, [1, 0]),            # fewer samples than ranks: someone must wait
    ([1.0, 3.0], 8, [2, 6]),
])
def test_split_gives_every_rank_a_sample_when_the_batch_has_one_per_rank(rates, batch, want):
    assert split_batch(rates, batch) == want


def test_split_lifts_slow_ranks_to_one_sample_within_memory_caps():
    shares = split_batch([1000.0, 1.0, 1.0], 10, caps=[5, None, 0])
    assert shares == [5, 5, 0]  # a rank that can hold nothing keeps nothing
    assert split_batch([1.0] * 4 + [1e4], 9, caps=[None] * 4 + [3]) == [2, 2, 1, 1, 3]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.floats(0.1, 100), st.one_of(st.none(), st.integers(0, 300))),
                min_size=1, max_size=8), st.integers(0, 600))
def test_split_respects_memory_caps_or_says_it_cannot(pairs, batch):
    rates, caps = [p[0] for p in pairs], [p[1] for p in pairs]
    if all(c is not None for c in caps) and sum(caps) < batch:
        with pytest.raises(ValueError, match="memory limits hold"):
            split_batch(rates, batch, caps)
        return
    shares = split_batch(rates, batch, caps)
    assert sum(shares) == batch
    assert all(c is None or s <= c for s, c in zip(shares, caps))


def test_split_gives_a_twice_as_fast_rank_twice_the_samples_and_the_rest_to_the_uncapped():
    assert split_batch([2.0, 1.0, 1.0], 128) == [64, 32, 32]
    assert split_batch([2.0, 1.0, 1.0], 128, caps=[40, None, None]) == [40, 44, 44]
    assert equal_split(3, 10) == [4, 3, 3]
    assert step_time([64, 32, 32], [2.0, 1.0, 1.0]) == 32.0
    assert step_time(equal_split(3, 128), [2.0, 1.0, 1.0]) > step_time([64, 32, 32], [2, 1, 1])


@pytest.mark.parametrize("rates,batch,match", [
    ([], 4, "at least one rank"), ([1.0, 0.0], 4, "rank 1 has rate 0"),
    ([1.0, math.nan], 4, "positive finite"), ([1.0], -1, "batch must be"),
    ([1.0], 2.5, "batch must be")])
def test_split_rejects_bad_input(rates, batch, match):
    with pytest.raises(ValueError, match=match):
        split_batch(rates, batch)


# ---- balancer ----------------------------------------------------------------------------------
def steps(balancer, shares, speeds, n):
    """Feeds ``n`` steps where rank r computes ``speeds[r]`` samples/s."""
    for _ in range(n):
        balancer.observe(shares, [s / v for s, v in zip(shares, speeds)])
        change = balancer.propose(shares)
        if change is not None:
            shares = change[0]
    return shares


def test_balancer_moves_samples_to_the_faster_rank_and_then_stays():
    b = AdaptiveBalancer([1.0, 1.0, 1.0], every=5)
    shares = steps(b, [100, 100, 100], [400.0, 200.0, 200.0], 60)
    assert shares[0] > 1.8 * shares[1] and sum(shares) == 300
    settled = list(shares)
    assert steps(b, shares, [400.0, 200.0, 200.0], 30) == settled


def test_balancer_hysteresis_ignores_small_gains_and_single_noisy_windows():
    b = AdaptiveBalancer([100.0, 100.0], every=1, hysteresis=0.10, smoothing=1.0)
    b.observe([50, 50], [50 / 104, 50 / 100])  # 4% faster: predicted gain under 10%
    assert b.propose([50, 50]) is None
    b.observe([50, 50], [50 / 200, 50 / 100])  # one window says rank 0 is twice as fast...
    assert b.propose([50, 50]) is None
    b.observe([50, 50], [50 / 100, 50 / 200])  # ...the next says the opposite: no move
    assert b.propose([50, 50]) is None
    b.observe([50, 50], [50 / 100, 50 / 200])  # confirmed in the same direction: move
    new, gain = b.propose([50, 50])
    assert new[1] > new[0] and gain > 1.1


def test_a_move_that_makes_the_step_slower_is_rolled_back_and_not_retried_at_once():
    # The rates say rank 0 is twice as fast, but moving samples to it makes every step slower
    # (say it shares a core the measurement could not see): the move is undone.
    b = AdaptiveBalancer([100.0, 100.0], every=2, hysteresis=0.05, smoothing=1.0)
    shares = [50, 50]
    for _ in range(2):  # two windows confirm the direction
        for _ in range(2):
            b.observe(shares, [50 / 200, 50 / 100])  # critical path 0.5 s
        change = b.propose(shares)
    new, gain = change
    assert new[0] > 50 and gain > 1.05
    for _ in range(2):
        b.observe(new, [0.9, 0.3])  # after the move: 0.9 s, worse than 0.5
    back, slowdown = b.propose(new)
    assert back == [50, 50] and slowdown == pytest.approx(1.8)
    assert b.decisions[-1]["rolled_back"] and b.decisions[-1]["after"] == pytest.approx(0.9)
    for _ in range(3):  # the same direction waits TABU_DECISIONS decisions, however good it looks
        for _ in range(2):
            b.observe(back, [50 / 200, 50 / 100])
        assert b.propose(back) is None
    # a move that does make the step faster stays
    b2 = AdaptiveBalancer([100.0, 100.0], every=1, smoothing=1.0)
    for _ in range(2):
        b2.observe([50, 50], [50 / 200, 50 / 100])
        change = b2.propose([50, 50])
    b2.observe(change[0], [0.3, 0.3])
    assert b2.propose(change[0]) is None


def shared_core_step(shares, rng, fixed=2.0, per_sample=0.06):
    """One step's busy and CPU seconds on a 3-rank job: rank 0 alone on a core, ranks 1 and 2
    on the other, taking it in turns longer than a step (rank 1 first four times in five): the
    first computes alone, the second waits for it. Each rank's work is fixed + per-sample ms."""
    work = [(fixed + per_sample * s) * rng.uniform(0.97, 1.03) / 1e3 for s in shares]
    first, second = (1, 2) if rng.uniform() < 0.8 else (2, 1)
    busy = list(work)
    busy[second] = work[1] + work[2]
    return busy, work


@pytest.mark.parametrize("start", [[192, 96, 96], [192, 80, 112], [128, 128, 128]])
def test_ranks_sharing_a_core_are_measured_at_their_shared_speed_and_the_split_converges(start):
    # The split that makes both cores take equal time: fixed + 0.06 s0 = 2 fixed + 0.06 (384 - s0).
    best = (2.0 + 0.06 * 384) / (2 * 0.06)
    rng = np.random.default_rng(0)
    b = AdaptiveBalancer([2.0, 1.0, 1.0], every=5, sharing=[0, 1, 1])
    shares = list(start)
    for _ in range(600):
        busy, cpu = shared_core_step(shares, rng)
        b.observe(shares, busy, cpu)
        if (change := b.propose(shares)) is not None:
            shares = change[0]
    assert abs(shares[0] - best) <= 0.05 * best and abs(shares[1] - shares[2]) <= 2
    # Without the sharing labels the same readings make the rank that ran first look faster
    # than its twin, and the two together faster than their core.
    rng = np.random.default_rng(0)
    blind = AdaptiveBalancer([2.0, 1.0, 1.0], every=5)
    for _ in range(50):
        busy, cpu = shared_core_step([192, 96, 96], rng)
        blind.observe([192, 96, 96], busy, cpu)
        blind.propose([192, 96, 96])
    core = 192 / (2 * (2.0 + 0.06 * 96) / 1e3)  # samples/s of the shared core
    assert blind.rates[1] > 1.15 * blind.rates[2] and blind.rates[1] + blind.rates[2] > 1.2 * core
    shared = [s / (2 * (2.0 + 0.06 * s) / 1e3) for s in shares[1:]]  # each at half the core
    assert b.rates[1:] == pytest.approx(shared, rel=0.05)


def readings(sharing, *steps):
    r = Readings(len(steps[0][0]), sharing)
    for shares, busy, cpu in steps:
        r.add(shares, busy, cpu)
    return r.rates()


def test_readings_take_ranks_that_share_cores_at_their_groups_contention():
    # Ranks 1 and 2 share a core, in turns (step 1: rank 1 first; step 2: rank 2 first) or at
    # once (step 3: halves until rank 1 is done). Each of them got half the core's time while
    # both computed: its samples over its CPU seconds, halved.
    rates = readings([0, 1, 1], ([200, 80, 120], [1.0, 0.4, 1.0], [1.0, 0.4, 0.6]),
                     ([200, 80, 120], [1.0, 1.0, 0.6], [1.0, 0.4, 0.6]),
                     ([200, 80, 120], [1.0, 0.8, 1.0], [1.0, 0.4, 0.6]))
    assert rates == pytest.approx([200.0, 100.0, 100.0])
    # Three ranks free to run on two cores: each had two thirds of a core.
    assert readings([0, 0, 0], ([10, 10, 20], [1.0, 1.0, 1.0], [0.5, 0.5, 1.0])) == \
        pytest.approx([10 / 0.5 * 2 / 3, 10 / 0.5 * 2 / 3, 20 / 1.0 * 2 / 3])
    assert readings([0, 0], ([5, 0], [1.0, 1.0], [1.0, 1.0])) == [5.0, 0.0]  # no samples, no rate
    assert readings(None, ([5, 5], [1.0, 0.5], None)) == [5.0, 10.0]  # busy time alone
    assert readings([0, 0], ([5, 5], [1.0, 0.5], None)) == [5.0, 10.0]  # no CPU readings


def test_step_times_book_the_call_the_reduction_the_wait_and_the_loop():
    t = StepTimes()
    t.add({"call": 0.010, "backward": 0.005, "reduction": 0.003, "counts": 0.001}, [0.006, 0.008], 0, 0.011)
    t.add({"call": 0.010, "backward": 0.005, "reduction": 0.001, "counts": 0.001}, [0.009, 0.008], 0, 0.010)
    ms = {k: round(v * 1e3, 6) for k, v in t.per_step().items()}
    assert ms == {"compute": 7.0, "reduction": 2.0, "waiting": 1.0, "overhead": 0.5}
    assert tuple(ms) == PHASES and StepTimes().per_step() == dict.fromkeys(PHASES, 0.0)


def test_balancer_decides_only_every_k_steps_and_keeps_every_rank_measured():
    b = AdaptiveBalancer([1.0, 1.0], every=3, smoothing=1.0)
    for decision in range(2):
        for _ in range(2):
            b.observe([5, 5], [0.001, 1.0])
            assert b.propose([5, 5]) is None
        b.observe([5, 5], [0.001, 1.0])
        change = b.propose([5, 5])
        assert (change is None) == (decision == 0)  # the first decision waits for a second
    assert change[0] == [9, 1]  # the slow rank keeps one sample, so it is still measured
    with pytest.raises(ValueError, match="rebalance_every"):
        AdaptiveBalancer([1.0], every=0)


def test_run_meter_never_reports_more_than_the_ranks_summed_rate():
    # Rank 1 waited half of step 1; rank 0's busy reading of step 2 includes time before the
    # step began (the caller's loop), which counts only up to the step's wall time.
    m = RunMeter(2)
    m.add([6, 2], [1.0, 0.5], wall=1.0)
    m.add([6, 2], [1.5, 0.5], wall=1.0)
    assert m.samples_per_second == 8.0
    assert m.summed_rate == 6.0 + 4.0  # 12 samples / 2 s, 4 samples / 1 s
    assert m.efficiency == 0.8
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = RunMeter(3)
        for _ in range(5):
            wall = rng.uniform(0.1, 1.0)
            m.add(rng.integers(0, 9, 3).tolist(), rng.uniform(0.0, 2.0, 3).tolist(), wall)
        assert m.samples_per_second <= m.summed_rate * (1 + 1e-12) or m.summed_rate == 0
        assert m.summed_rate == 0 or 0 <= m.efficiency <= 1


# ---- cluster declarations ----------------------------------------------------------------------
def profiles(*devices):
    return [Profile(rank=r, host="h", device=d, device_name="X", cores=1, threads=1,
                    gemm_flops=1e9, memory_total=1 << 30, memory_free=1 << 30)
            for r, d in enumerate(devices)]


def test_ranks_fill_declared_groups_in_order():
    c = ClusterConfig().add_node("gpus", DeviceType.GPU, 1).add_node("cpus", "cpu", 2)
    assert c.assign(profiles("cpu", "gpu", "cpu")) == ["cpus", "gpus", "cpus"]
    assert c.num_ranks == 3 and not c.federated
    assert c.enable_federated_scheduling().federated


@pytest.mark.parametrize("cluster,devices,match", [
    (ClusterConfig().add_node("gpu-pool", DeviceType.GPU, 8).add_node("cpu-pool", "cpu", 4),
     ("cpu",) * 12, r"8 GPU ranks \(gpu-pool = 8 x GPU, cpu-pool = 4 x CPU\) but 0 of the job's "
                    r"12 ranks have a GPU \(found: 12 with a CPU\)"),
    (ClusterConfig().add_node("t", DeviceType.TPU, 1), ("cpu",), "no TPU backend"),
    (ClusterConfig().add_node("c", "cpu", 4), ("cpu",) * 3, r"declares 4 ranks .* job has 3"),
    (ClusterConfig(), ("cpu",), "declares no groups"),
])
def test_a_declaration_the_job_cannot_run_says_what_was_declared_and_found(cluster, devices,
                                                                            match):
    with pytest.raises(ValueError, match=match):
        cluster.assign(profiles(*devices))


def test_cluster_config_checks_its_arguments_and_reads_tables():
    with pytest.raises(ValueError, match="valid: GPU, CPU, TPU"):
        ClusterConfig().add_node("x", "fpga", 1)
    with pytest.raises(ValueError, match="count must be"):
        ClusterConfig().add_node("x", "cpu", 0)
    with pytest.raises(ValueError, match="already declared"):
        ClusterConfig().add_node("x", "cpu").add_node("x", "gpu")
    c = ClusterConfig.from_dict({"group": [{"name": "a", "device": "cpu", "count": 2}],
                                 "federated": True, "compress_below_gbps": 0.5})
    assert c.groups[0].count == 2 and c.federated and c.compress_below_gbps == 0.5
    assert ClusterConfig.from_dict({}).is_auto
    with pytest.raises(ValueError, match="missing"):
        ClusterConfig.from_dict({"group": [{"name": "a"}]})
    with pytest.raises(ValueError, match="unknown keys"):
        ClusterConfig.from_dict({"groups": []})


# ---- train in one process ----------------------------------------------------------------------
def mlp(features=64):
    g = GraphBuilder(seed=0)
    g.input("features", Shape(32, features)).dense(64, "relu").dense(10, "softmax")
    return g


def test_train_as_a_world_of_one_reports_what_it_did(tmp_path):
    s = Scheduler.with_graph(mlp(), ClusterConfig.auto(), optimizer=nx.optim.Adam(lr=1e-2))
    r = s.train("digits", Epochs(3), BatchSize(128), log_file=tmp_path / "log.jsonl",
                heatmap_png=tmp_path / "heat.png", verbose=False)
    assert r.shares == [128] and r.accuracy > 0.8 and len(r.history) == 3
    assert r.samples_per_second > 0 and r.plan.world_size == 1
    assert 0 < r.samples_per_second <= r.ideal_samples_per_second
    assert "% of the ranks' summed rate" in r.summary()
    assert r.plan.profiles[0].gemm_flops > 0 and r.plan.lr_scale == 1.0
    [times] = r.breakdown  # one rank: its compute, reduction (none), waiting (none), overhead
    assert tuple(times) == PHASES and times["reduction"] == times["waiting"] == 0.0
    assert sum(times.values()) == pytest.approx(1e3 * r.seconds / r.steps, rel=1e-6)
    events = [json.loads(line)["event"]
              for line in (tmp_path / "log.jsonl").read_text().splitlines()]
    assert events[0] == "plan" and events.count("epoch") == 3 and events[-1] == "done"
    assert (tmp_path / "heat.png").read_bytes()[:4] == b"\x89PNG"


def test_train_scales_the_learning_rate_by_the_documented_rule():
    s = Scheduler.with_graph(mlp(), optimizer=nx.optim.SGD(lr=0.1))
    r = s.train("digits", 1, 128, reference_batch=32, max_steps=1, verbose=False)
    assert r.plan.lr_scale == 4.0  # linear: 128 / 32
    r = s.train("digits", 1, 128, reference_batch=32, lr_scaling="sqrt", max_steps=1,
                verbose=False)
    assert r.plan.lr_scale == 2.0


def test_train_rejects_bad_arguments_clearly():
    s = Scheduler.with_graph(mlp(784))
    with pytest.raises(ValueError, match=r"shape \(64,\) but the model's input takes \(784,\)"):
        s.train("digits", 1, 32, verbose=False)
    with pytest.raises(ValueError, match="data_path=<folder with the four MNIST IDX files>"):
        Scheduler.with_graph(mlp(784)).train("mnist", 1, 32, verbose=False)
    with pytest.raises(ValueError, match="unknown balance"):
        s.train("digits", 1, 32, balance="fair", verbose=False)
    with pytest.raises(ValueError, match="Epochs must be"):
        Epochs(0)
    with pytest.raises(ValueError, match="BatchSize must be"):
        BatchSize(-3)
    with pytest.raises(TypeError, match="with_graph"):
        Scheduler()
    with pytest.raises(ValueError, match="shares must be 1 integers"):
        Scheduler.with_graph(mlp()).train("digits", 1, 32, shares=[30], verbose=False)
    with pytest.raises(ValueError, match="balance=\"equal\" splits evenly"):
        Scheduler.with_graph(mlp()).train("digits", 1, 32, shares=[32], balance="equal",
                                          verbose=False)
    with pytest.raises(ValueError, match="compression|codec"):
        Scheduler.with_graph(mlp()).train("digits", 1, 32, compression="zip", verbose=False)


def test_train_accepts_arrays_with_a_test_split():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((256, 8)).astype(np.float32)
    y = (x[:, 0] > 0).astype(np.int64)
    g = GraphBuilder(seed=0)
    g.input("f", Shape(1, 8)).dense(2, "softmax")
    r = Scheduler.with_graph(g, optimizer=nx.optim.Adam(lr=0.05)).train(
        (x[:200], y[:200], x[200:], y[200:]), 20, 50, verbose=False)
    assert r.accuracy > 0.9
    assert Scheduler.with_graph(g).train((x, y), 1, 50, verbose=False).accuracy is None


# ---- nexus train -------------------------------------------------------------------------------
RUN = """
[model]
input = [64]
layers = [{layer = "dense", units = 32, activation = "relu"}, {layer = "dropout", p = 0.1},
          {layer = "dense", units = 10, activation = "softmax"}]
[optimizer]
name = "adam"
lr = 1e-2
[train]
epochs = 2
batch_size = 64
compression = "auto"
[logging]
jsonl = "LOG"
checkpoint = "CKPT"
"""


def test_nexus_train_runs_a_run_file_and_saves_the_model(tmp_path, capsys):
    run = tmp_path / "run.toml"
    run.write_text(RUN.replace("LOG", str(tmp_path / "log.jsonl"))
                   .replace("CKPT", str(tmp_path / "model.safetensors")))
    assert cli(["train", "--config", str(run), "--max-steps", "5"]) == 0
    out = capsys.readouterr().out
    assert "nexus scheduler plan" in out and "5 steps" in out
    model = nx.load(tmp_path / "model.safetensors")
    assert model.predict(np.zeros((2, 64), np.float32)).shape == (2, 10)


@pytest.mark.parametrize("text,match", [
    ("[model]\ninput = [64]\n", "needs input"),
    ("[model]\ninput = [64]\nlayers = [{layer = \"conv3d\", filters = 4}]\n",
     r"\[model\] layers\[0\]: unknown layer 'conv3d'; valid: input, dense, conv2d"),
    (RUN.replace("[train]", "[train]\nspeed = 2"), r"\[train\]: unknown keys \['speed'\]"),
    (RUN.replace('name = "adam"', 'name = "lbfgs"'), "unknown name 'lbfgs'"),
    ("[model\n", "not valid TOML"),
    ("[trainer]\n", "unknown tables"),
])
def test_nexus_train_reports_a_bad_run_file_without_a_traceback(tmp_path, capsys, text, match):
    run = tmp_path / "run.toml"
    run.write_text(text)
    assert cli(["train", "--config", str(run)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("nexus train: ") and "Traceback" not in err
    assert __import__("re").search(match, err), err


def test_nexus_train_help_documents_every_table():
    with pytest.raises(SystemExit) as e:
        cli(["train", "--help"])
    assert e.value.code == 0


@pytest.mark.parametrize("layers,match", [
    ('{dense = 4}', r"\[model\] layers\[0\]: missing key 'layer' \(the layer kind, one of input, "
                    r"dense, conv2d"),
    ('{layer = "dense", units = 4}, {layer = "dense", unit = 4}',
     r"\[model\] layers\[1\]: dense: unknown key 'unit'; valid keys: layer, units, activation, "
     r"name"),
    ('{layer = "dropout"}', r"layers\[0\]: dropout: missing key 'p'; valid keys: layer, p, name"),
    ('{layer = "dense", units = "8"}', r"layers\[0\]: layer 'dense_1' \(dense\): units must be an "
                                       r"integer >= 1, got '8'"),
    ('{layer = "dense", units = 4, activation = "swish"}', r"unknown activation 'swish'; valid"),
    ('{layer = "add", ref = 7}', r"layers\[0\]: graph description: add entry refers to value 7"),
])
def test_a_bad_model_layer_names_its_entry_the_key_and_what_is_valid(layers, match):
    with pytest.raises(ValueError, match=match):
        build_graph(_toml.load(io.BytesIO(f"input = [64]\nlayers = [{layers}]".encode())))


@pytest.mark.parametrize("table,match", [
    ({"input": [64], "layers": [], "inputs": 1},
     r"\[model\]: unknown key 'inputs'; valid: dtype, input, layers, loss, seed"),
    ({"layers": []}, r"\[model\]: needs input .* missing 'input'"),
    ({"input": 64, "layers": []}, r"\[model\] input: expected one sample's shape"),
    ({"input": [0], "layers": []}, r"\[model\] input: Shape dimensions must be positive"),
    ({"input": [4], "layers": [], "loss": "mse"},
     r"\[model\] loss: unknown loss 'mse'; valid: cross_entropy"),
    ({"input": [4], "layers": [], "dtype": "int8"}, r"\[model\]: GraphBuilder dtype must be"),
])
def test_a_bad_model_table_names_the_key_and_what_is_valid(table, match):
    with pytest.raises(ValueError, match=match):
        build_graph(table)


def test_the_model_table_is_the_builders_spec():
    g = build_graph({"input": [64], "seed": 3, "layers": [
        {"layer": "dense", "units": 32, "activation": "relu"}, {"layer": "dropout", "p": 0.1},
        {"layer": "dense", "units": 10, "activation": "softmax", "name": "head"}]})
    built = GraphBuilder(seed=3).input("features", Shape(1, 64)).dense(32, "relu").dropout(0.1)
    built.dense(10, "softmax", name="head")
    assert g.spec() == built.spec()
    assert model_spec({"input": [64], "layers": []})["layers"] == built.spec()["layers"][:1]


# ---- the typed records: Profile, Split, Plan, Rebalance ------------------------------------------
def test_a_profile_survives_its_json_form_and_refuses_bad_fields():
    p = profiles("cpu")[0]
    p = dataclasses.replace(p, gpu=Gpu("A100", 80 << 30, 79 << 30, "8.0", 0, 1))
    assert Profile.from_dict(json.loads(json.dumps(p.to_dict()))) == p
    with pytest.raises(ValueError, match="unknown device 'fpga'; valid: gpu, cpu"):
        dataclasses.replace(p, device="fpga")
    with pytest.raises(ValueError, match="gemm_flops must be > 0, got 0"):
        dataclasses.replace(p, gemm_flops=0)
    with pytest.raises(ValueError, match="unknown fields \\['speed'\\]; valid: rank, host"):
        Profile.from_dict({**p.to_dict(), "speed": 1})
    with pytest.raises(ValueError, match="Profile.from_dict: .*missing .*'host'"):
        Profile.from_dict({k: v for k, v in p.to_dict().items() if k != "host"})
    with pytest.raises(ValueError, match="index 2 is not one of the 1 visible GPUs"):
        Gpu("A100", 1, 1, "8.0", 2, 1)


def test_a_split_holds_non_negative_shares_and_knows_each_ranks_rows():
    s = Split.proportional([2.0, 1.0, 1.0], 128)
    assert s.shares == (64, 32, 32) and s.batch == 128 and len(s) == 3 and s[0] == 64
    assert [s.offset(r) for r in range(3)] == [0, 64, 96] and list(s) == [64, 32, 32]
    assert Split.equal(3, 10).shares == (4, 3, 3)
    assert Split([np.int64(2), 1]).shares == (2, 1)
    for bad in ([], [1, -1], [1.5], [True]):
        with pytest.raises(ValueError, match="Split: shares must be integers >= 0"):
            Split(tuple(bad))


def plan(**changes):
    fields = dict(world_size=2, batch=10, requested_batch=10, balance="static",
                  groups=("a", "a"), hierarchical=False,
                  compression=Compression("none", "none", "as requested"), lr_scale=1.0,
                  probe_rates=(1.0, 1.0), bytes_per_sample=4.0, caps=(8, 8),
                  split=Split((5, 5)), profiles=tuple(profiles("cpu", "cpu")),
                  predicted_speedup_vs_equal=1.0)
    return Plan(**{**fields, **changes})


def test_a_plan_checks_its_per_rank_fields_and_logs_as_json():
    d = json.loads(json.dumps(plan().to_dict()))
    assert d["shares"] == [5, 5] and d["compression"]["ring"] == "none"
    assert d["profiles"][1]["rank"] == 1 and "split" not in d
    assert "nexus scheduler plan" in plan().render()
    with pytest.raises(ValueError, match="caps has 1 entries for 2 ranks"):
        plan(caps=(8,))
    with pytest.raises(ValueError, match=r"the split \[5, 4\] sums to 9, not the batch 10"):
        plan(split=Split((5, 4)))
    with pytest.raises(ValueError, match="unknown balance 'fair'; valid: adaptive, static, equal"):
        plan(balance="fair")
    with pytest.raises(ValueError, match="lr_scale and bytes_per_sample must be > 0"):
        plan(lr_scale=0.0)


def test_a_rebalance_moves_samples_within_one_batch():
    e = Rebalance(7, Split((5, 5)), Split((8, 2)), 1.5, (4.0, 1.0))
    assert e.to_dict() == {"step": 7, "old": [5, 5], "new": [8, 2], "predicted_speedup": 1.5,
                           "rates": [4.0, 1.0]}
    with pytest.raises(ValueError, match="must split the same batch over the same ranks"):
        Rebalance(7, Split((5, 5)), Split((8, 3)), 1.5, (4.0, 1.0))
    with pytest.raises(ValueError, match="predicted_speedup must be > 1"):
        Rebalance(7, Split((5, 5)), Split((8, 2)), 1.0, (4.0, 1.0))
