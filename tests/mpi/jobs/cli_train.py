"""mpiexec job: `nexus train --config RUN_TOML ...` on every rank, as the console script runs it
(checked by tests/mpi/test_mpi_scheduler.py)."""

import sys

from nexus.cli import main

sys.exit(main(["train", *sys.argv[1:]]))
