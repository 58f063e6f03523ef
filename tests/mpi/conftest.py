"""Runs real `mpiexec -n N` jobs (tests/mpi/jobs/*.py) in subprocesses with timeouts.

Each rank of a job appends JSON lines to its own file in NEXUS_TEST_RESULTS (one file per rank:
ranks printing to one pipe interleave); the tests assert on them (mpi_jobs.by_check). They need the _C_mpi extension:
a build without it (NEXUS_MPI=OFF, as tools/sanitize-test.sh configures, or no MPI found) skips
them and says why. With the extension built, a missing mpiexec is a failure, not a skip.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

JOBS = Path(__file__).parent / "jobs"
JOB_TIMEOUT = 120  # seconds for one mpiexec job (4 ranks on 2 busy cores take a few seconds)


def pytest_collection_modifyitems(items):
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.fspath).parents:
            item.add_marker(pytest.mark.mpi)


def mpiexec() -> str:
    candidate = Path(sys.executable).parent / "mpiexec"
    found = str(candidate) if candidate.exists() else shutil.which("mpiexec")
    assert found, ("nexus has its MPI extension but no mpiexec is next to the interpreter or on "
                   "PATH: pip install mpich")
    return found


@pytest.fixture(scope="session")
def run_job():
    if importlib.util.find_spec("nexus._C_mpi") is None:
        pytest.skip("nexus was built without its MPI extension _C_mpi (NEXUS_MPI=OFF, as in the "
                    "sanitizer build, or no MPI found at build time): no mpiexec tests")
    launcher = mpiexec()

    def run(n: int, script: str, *args: str, timeout_s: float = 30, expect_ok: bool = True,
            pin: list[tuple[int, str]] | None = None):
        """``pin``: [(ranks, cpu list)] blocks, each block's ranks run under `taskset -c`."""
        out = tempfile.mkdtemp(prefix="nexus-mpi-job-")
        env = {**os.environ, "NEXUS_NUM_THREADS": "1", "NEXUS_COMM_TIMEOUT": str(timeout_s),
               "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "NEXUS_TEST_RESULTS": out}
        program = [sys.executable, str(JOBS / script), *args]
        cmd = [launcher, "-n", str(n), *program]
        if pin is not None:
            assert sum(k for k, _ in pin) == n, pin
            cmd = [launcher]
            for i, (k, cpus) in enumerate(pin):
                cmd += ([":"] if i else []) + ["-n", str(k), "taskset", "-c", cpus, *program]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=JOB_TIMEOUT, env=env)
        if expect_ok:
            assert proc.returncode == 0, (f"{' '.join(cmd)} exited {proc.returncode}\n"
                                          f"stdout:\n{proc.stdout[-4000:]}\n"
                                          f"stderr:\n{proc.stderr[-4000:]}")
        proc.results_dir = Path(out)
        return proc

    return run
