"""Results of the jobs in tests/mpi/jobs: `report(...)` there, `by_check(...)` in the tests.

Each rank appends one JSON object per line to rank<R>.jsonl in $NEXUS_TEST_RESULTS.
"""

import json
import os


def report(rank: int, world: int, **fields) -> None:
    """Called in a job: records one result of this rank."""
    path = os.path.join(os.environ["NEXUS_TEST_RESULTS"], f"rank{rank}.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"rank": rank, "world": world, **fields}) + "\n")


def results(proc) -> list[dict]:
    rows = []
    for path in sorted(proc.results_dir.glob("rank*.jsonl")):
        rows += [json.loads(line) for line in path.read_text().splitlines()]
    return rows


def by_check(proc, check: str, n_ranks: int, per_rank: int = 1) -> list[dict]:
    """The `check` reports of every rank in rank order; each rank must have made `per_rank`."""
    rows = sorted((r for r in results(proc) if r["check"] == check), key=lambda r: r["rank"])
    want = [r for r in range(n_ranks) for _ in range(per_rank)]
    assert [r["rank"] for r in rows] == want, (check, proc.stdout[-2000:], proc.stderr[-2000:])
    return rows
