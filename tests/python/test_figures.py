"""nexus report: the heat map and timeline figures of a run, drawn with matplotlib from the
scheduler's log (a log written here with the scheduler's JsonlLog, and one from a real run)."""

import json

import numpy as np
import pytest

from nexus import cli
from nexus.scheduler.figures import draw_report, read_run_log
from nexus.scheduler.visual import JsonlLog

pytest.importorskip("matplotlib")  # the plots extra; the test extra installs it


def write_log(path, steps=12, rebalance_at=5):
    """Three ranks, 4 steps per epoch, one rebalance, as Scheduler.train logs them."""
    with JsonlLog(path, rank=0) as log:
        log.write("plan", world_size=3, groups=["a100", "cpu", "cpu"], shares=[32, 16, 16])
        shares = [32, 16, 16]
        for step in range(1, steps + 1):
            busy = [s / rate for s, rate in zip(shares, (800.0, 400.0, 300.0))]
            log.write("step", step=step, epoch=(step - 1) // 4 + 1, loss=1.0 / step, shares=shares,
                      seconds=max(busy), busy_seconds=busy)
            if step == rebalance_at:
                log.write("rebalance", step=step, old=shares, new=[34, 17, 13], predicted_speedup=1.1,
                          rates=[800.0, 400.0, 300.0])
                shares = [34, 17, 13]
            if step % 4 == 0:
                log.write("epoch", epoch=step // 4, loss=0.5, seconds=1.0, shares=shares, samples_per_second=100.0)
        log.write("done", samples_per_second=100.0, shares=shares, steps=steps)


def test_the_log_reads_back_as_arrays(tmp_path):
    write_log(tmp_path / "run.jsonl")
    run = read_run_log(tmp_path / "run.jsonl")
    assert run.labels == ["r0 a100", "r1 cpu", "r2 cpu"]
    assert run.shares.shape == (12, 3) and list(run.shares[5]) == [34, 17, 13]
    np.testing.assert_allclose(run.throughput[0], [800, 400, 300])
    assert run.epochs == [4, 8, 12] and run.rebalances == [(5, [32, 16, 16], [34, 17, 13])]
    assert run.elapsed[-1] == pytest.approx(run.seconds.sum())


def test_report_draws_labelled_png_and_svg(tmp_path):
    write_log(tmp_path / "run.jsonl")
    paths = draw_report(tmp_path / "run.jsonl")
    names = sorted(p.name for p in paths)
    assert names == ["run_heatmap.png", "run_heatmap.svg", "run_timeline.png", "run_timeline.svg"]
    for p in paths:
        data = p.read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" if p.suffix == ".png" else b"<svg" in data[:2000]
    heat = (tmp_path / "run_heatmap.svg").read_text()
    for text in ("throughput (samples/s)", "r0 a100", "r2 cpu", "step", "time (s)", "rebalance", "epoch end"):
        assert text in heat, text
    timeline = (tmp_path / "run_timeline.svg").read_text()
    for text in ("samples per step", "throughput (samples/s)", "r1 cpu", "rebalance", "epoch end", "time (s)"):
        assert text in timeline, text


def test_nexus_report_command(tmp_path, capsys):
    write_log(tmp_path / "run.jsonl")
    (tmp_path / "figs").mkdir()
    assert cli.main(["report", str(tmp_path / "run.jsonl"), "--out", str(tmp_path / "figs"), "--format", "svg"]) == 0
    assert sorted(p.name for p in (tmp_path / "figs").iterdir()) == ["run_heatmap.svg", "run_timeline.svg"]
    assert "run_heatmap.svg" in capsys.readouterr().out
    # bad input: a clear one-line error and exit status 2
    (tmp_path / "other.jsonl").write_text(json.dumps({"event": "step"}) + "\n")
    assert cli.main(["report", str(tmp_path / "other.jsonl")]) == 2
    assert "no 'plan' line" in capsys.readouterr().err
    (tmp_path / "broken.jsonl").write_text('{"event": "plan"\n')
    assert cli.main(["report", str(tmp_path / "broken.jsonl")]) == 2
    assert "broken.jsonl:1: not a JSON line" in capsys.readouterr().err
    assert cli.main(["report", str(tmp_path / "run.jsonl"), "--format", "jpg"]) == 2
    assert "formats must be some of ['png', 'svg']" in capsys.readouterr().err


def test_a_real_run_log_draws(tmp_path):
    import nexus as nx
    from nexus import BatchSize, ClusterConfig, Epochs, GraphBuilder, Scheduler, Shape
    g = GraphBuilder(seed=0).input("features", Shape(32, 64)).dense(32, "relu").dense(10, "softmax")
    s = Scheduler.with_graph(g, ClusterConfig.auto(), optimizer=nx.optim.Adam(lr=1e-2))
    s.train("digits", Epochs(2), BatchSize(128), log_file=tmp_path / "log.jsonl", verbose=False)
    run = read_run_log(tmp_path / "log.jsonl")
    assert run.labels and len(run.epochs) == 2 and run.shares.shape[1] == 1
    assert len(draw_report(tmp_path / "log.jsonl", formats=["png"])) == 2
