"""nexus.distributed's collectives in real `mpiexec -n 2` and `-n 4` jobs (jobs/collectives.py).

One job per world size runs every check; the tests below read its reports.
"""

import pytest

from mpi_jobs import by_check

WORLDS = [2, 4]
WIRE_BARS = {"none": (1.0, 1.0), "fp16": (0.49, 0.51), "bf16": (0.49, 0.51),
             "int8": (0.25, 0.27), "topk:0.01": (0.0, 0.03), "sign": (0.0, 0.04)}


@pytest.fixture(scope="module", params=WORLDS, ids=lambda n: f"{n}ranks")
def job(request, run_job):
    return request.param, run_job(request.param, "collectives.py")


def test_all_reduce_is_exact_for_every_size_dtype_and_op(job):
    n, proc = job
    for row in by_check(proc, "exact", n):
        assert 0 in row["sizes"] and 1 in row["sizes"] and n + 1 in row["sizes"]
        assert row["bad"] == [], f"rank {row['rank']} of {n}: wrong results for {row['bad']}"


def test_all_reduce_max_and_min_are_exact_for_every_size_and_dtype(job):
    n, proc = job
    for row in by_check(proc, "extremum", n):
        assert row["bad"] == [], f"rank {row['rank']} of {n}: wrong results for {row['bad']}"


def test_each_codec_meets_its_wire_ratio_and_all_ranks_agree(job):
    n, proc = job
    rows = by_check(proc, "codec", n, per_rank=len(WIRE_BARS))
    for row in rows:
        lo, hi = WIRE_BARS[row["codec"]]
        ratio = row["bytes_sent"] / row["bytes_uncompressed"]
        assert lo <= ratio <= hi, (row["codec"], ratio)
        assert row["bytes_uncompressed"] == 2 * (n - 1) * (1 << 16) * 4 // n
        assert row["identical"], f"{row['codec']}: ranks ended with different results"
        assert row["rel_err"] <= {"none": 1e-6, "fp16": 1e-3, "bf16": 1e-2, "int8": 0.05}.get(
            row["codec"], 1.0), (row["codec"], row["rel_err"])


def test_error_feedback_keeps_repeated_reductions_from_drifting(job):
    n, proc = job
    for row in by_check(proc, "error_feedback", n, per_rank=2):
        assert row["drift_with"] < 0.25 * row["drift_without"], row


def test_hierarchical_reduction_is_exact_and_sharded_sends_one_group_share_across(job):
    n, proc = job
    # layouts x (sharded, leaders) x 3 sizes x 3 dtype/codec: 2 x 9 at 2 ranks, 3 x 9 at 4
    rows = by_check(proc, "hierarchical", n, per_rank=18 if n == 2 else 27)
    assert {r["sharded"] for r in rows} == {True, False}
    for row in rows:
        what = (row["labels"], row["sharded"], row["n"], row["dtype"], row["codec"])
        assert row["identical"], f"ranks disagree: {what}"
        assert row["exact"] if row["codec"] == "none" else row["close"], f"wrong sum: {what}"
    # across groups: each rank sends its 1/G shard, where the leader path sends the whole
    # buffer from one rank (G ranks per group; the cross ring has the same length either way)
    if n == 4:
        def cross(sharded, rank):
            return [r["cross_bytes"] for r in rows if r["sharded"] == sharded and r["rank"] == rank and
                    r["labels"] == [0, 0, 1, 1] and r["n"] == 100_003 and r["codec"] == "none"
                    and r["dtype"] == "float32"][0]
        leader = cross(False, 0)
        assert leader > 0 and cross(False, 1) == 0  # only leaders cross
        for rank in range(4):
            assert 0 < cross(True, rank) <= leader / 2 + 64, (rank, cross(True, rank), leader)


def test_broadcast_and_all_gather(job):
    n, proc = job
    for row in by_check(proc, "broadcast", n):
        assert row["array"] == [[float(n - 1)] * 2] * 3
        assert row["tensor"] == [float(v + n - 1) for v in range(5)]
        assert row["ints"] == [v * n * (n + 1) // 2 for v in range(4)]
        # one array per rank, in rank order, each of that rank's shape
        assert row["gathered"] == [[[r, r]] * (r + 1) for r in range(n)]
        assert row["gathered_tensor"] == [[float(r)] for r in range(n)]


def test_bad_arguments_raise_the_same_clear_error_on_every_rank(job):
    n, proc = job
    rows = by_check(proc, "errors", n)
    for row in rows:
        errors = row["errors"]
        assert errors == rows[0]["errors"]
        assert errors["float64 with int8"].startswith("ValueError") and "float64" in \
            errors["float64 with int8"]
        assert errors["unknown codec"].startswith("ValueError") and "topk:RATIO" in \
            errors["unknown codec"]
        assert errors["unknown op"].startswith("ValueError") and "'max', 'min'" in \
            errors["unknown op"]
        assert errors["read-only array"].startswith("ValueError")
        assert errors["list"].startswith("TypeError")
        assert errors["bad root"].startswith("ValueError") and f"0..{n - 1}" in errors["bad root"]
