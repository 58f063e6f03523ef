"""Data-parallel training in real `mpiexec -n 2` and `-n 4` jobs (jobs/training.py)."""

import pytest

from mpi_jobs import by_check

WORLDS = [2, 4]
EPOCHS_INT8 = 3


@pytest.fixture(scope="module", params=WORLDS, ids=lambda n: f"{n}ranks")
def job(request, run_job, tmp_path_factory):
    log = tmp_path_factory.mktemp(f"train{request.param}") / "metrics.jsonl"
    return request.param, run_job(request.param, "training.py", str(log)), log


def test_data_parallel_weights_are_identical_on_every_rank_after_every_step(job):
    n, proc, _ = job
    rows = by_check(proc, "custom_loop", n)
    for row in rows:
        assert len(row["identical"]) == 1 + 5  # before the first step (broadcast), then 5 steps
        assert all(row["identical"]), row["identical"]
        assert row["losses"] == rows[0]["losses"]  # the global batch's loss, on every rank
        assert row["buckets"] > 1  # bucket_bytes=2048 splits the gradients
        assert row["nccl"] is False  # host models: NCCL's handshake runs, and every rank declines


def test_data_parallel_equals_single_process_full_batch_sgd(job):
    n, proc, _ = job
    (ref,) = by_check(proc, "custom_loop_reference", 1)
    assert ref["max_diff"] <= 1e-5
    assert ref["loss_diff"] <= 1e-5


def test_unequal_shares_give_the_full_batch_result(job):
    n, proc, _ = job
    rows = by_check(proc, "fit_shares", n)
    assert all(row["identical"] for row in rows)
    (ref,) = by_check(proc, "fit_shares_reference", 1)
    assert ref["max_diff"] <= 1e-5
    assert rows[0]["loss"] == pytest.approx(ref["loss"], rel=1e-5)


def test_compressed_fit_keeps_ranks_identical_and_logs_from_rank_0_only(job):
    n, proc, log = job
    rows = by_check(proc, "fit_int8", n)
    assert all(row["identical"] for row in rows)
    assert all(row["loss"] == rows[0]["loss"] for row in rows)
    assert rows[0]["loss"][-1] < rows[0]["loss"][0]
    assert rows[0]["accuracy"] > 0.6  # 3 short epochs; benchmarks/allreduce.py compares codecs
    assert len(log.read_text().splitlines()) == EPOCHS_INT8  # not one line per rank


def test_reducing_while_backward_runs_gives_the_result_of_reducing_after_it(job):
    n, proc, _ = job
    rows = by_check(proc, "overlap", n)
    assert all(row["used"] == [True, False] for row in rows)  # the overlapped path did run
    assert all(row["identical"] for row in rows)
    assert max(row["max_diff"] for row in rows) <= 1e-5, rows


def test_hierarchical_reduction_overlapped_or_not_trains_as_the_flat_ring(job):
    n, proc, _ = job
    rows = by_check(proc, "hierarchical_training", n, per_rank=2 if n == 2 else 4)
    assert {row["overlap"] for row in rows} == {True, False}  # the overlapped path did run
    for row in rows:
        assert row["identical"], row
        assert row["max_diff"] <= 1e-5, row



def test_ranks_on_one_machine_step_through_shared_memory_as_the_ring_does(job):
    n, proc, _ = job
    rows = by_check(proc, "shared_memory", n, per_rank=3)
    assert {row["opt"] for row in rows} == {"sgd", "momentum", "adam_clip"}
    for row in rows:
        assert row["in_use"] == [True, False], row
        # plain SGD is sharded from the first step; momentum and Adam create their moments first
        first = row["opt"] == "sgd"
        assert row["shared"] == [first] + [True] * (len(row["shared"]) - 1), row
        assert not any(row["ring_shared"]), row
        assert row["identical"] and row["state_identical"], row
        assert row["weights_diff"] <= 1e-5 and row["state_diff"] <= 1e-5, row
        assert row["steps_equal"], row
        # after the data-parallel run, a rank's own update does not touch the other ranks' moments
        assert row["alone_equal"], row
    (left,) = by_check(proc, "segments_left", 1)
    assert left["names"] == []  # unlinked once every rank had mapped it


def test_parameters_in_the_segment_stay_each_ranks_own_for_an_update_outside_the_step(job):
    n, proc, _ = job
    rows = by_check(proc, "params_in_segment", n)
    for row in rows:
        # rank 0 trained alone while the DataParallel lived: its weights moved, no other rank's did
        assert row["others_kept"], row
        assert row["start_kept"] and row["live_readable"], row
        # rank 0 moved its parameters out and back in through the next step: identical again
        assert row["back_identical"], row
        # after the DataParallel is gone, rank 1 training alone changes only its own weights
        assert row["own_after"], row


def test_one_rank_declining_shared_memory_keeps_every_rank_on_the_ring(job):
    n, proc, _ = job
    rows = by_check(proc, "one_rank_declines", n)
    assert [row["in_use"] for row in rows] == [False] * n
    assert all(row["identical"] for row in rows)
    assert max(row["max_diff"] for row in rows) <= 1e-5  # the same training as the flat ring's
