"""A failing rank ends the whole `mpiexec` job, non-zero and naming the rank, within the timeout
(jobs/fault.py). The subprocess timeout in conftest bounds each job."""

import pytest

TIMEOUT_S = 3  # NEXUS_COMM_TIMEOUT for these jobs


@pytest.mark.parametrize("n", [2, 4])
def test_a_rank_that_raises_aborts_the_job_naming_the_rank(run_job, n):
    proc = run_job(n, "fault.py", "raise", timeout_s=TIMEOUT_S, expect_ok=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert f"deliberate failure on rank {n - 1}" in out
    assert f"rank {n - 1} of {n} raised ValueError" in out
    assert "finished the all-reduce" not in out


def test_a_rank_that_never_arrives_times_out_naming_both_ranks(run_job):
    proc = run_job(2, "fault.py", "timeout", timeout_s=TIMEOUT_S, expect_ok=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "rank 0 (this rank) timed out" in out and "from rank 1" in out
    assert "CommError" in out and "rank 0 of 2 raised" in out


def test_a_rank_that_never_joins_a_shared_memory_step_times_out_naming_it(run_job):
    proc = run_job(2, "fault.py", "step_timeout", timeout_s=TIMEOUT_S, expect_ok=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "rank 0 (this rank) waited 3 s at the exchange of the step's counts for rank(s) 1" in out, out[-2000:]
    assert "CommError" in out and "rank 0 of 2 raised" in out
    assert "finished the step" not in out
