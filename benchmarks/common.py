"""Shared helpers for the benchmark programs: timer, result check, table, thread control.

Benchmarks are programs, not tests (STYLE.md): each one checks its result against the peer
before timing, warms up, runs many iterations, reports the median and prints the peer side by
side as a ratio. These helpers keep that pattern short in every benchmarks/<capability>.py.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

# Environment variables that change how the BLAS behind numpy (and Nexus) runs. We only report
# them; a benchmark must never change the machine's settings behind the reader's back.
BLAS_ENV = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
            "NEXUS_NUM_THREADS")


def bench(fn, warmup=3, repeat=None, min_time=0.5, min_repeat=5):
    """Time fn() with time.perf_counter: `warmup` untimed calls, then `repeat` timed calls, or,
    when repeat is None, as many as fit in `min_time` seconds (at least `min_repeat`).

    Returns dict(median, p10, p90, n) with times in seconds.
    """
    for _ in range(warmup):
        fn()
    return stats(_samples(fn, repeat, min_time, min_repeat))


# A pause before each side's slice in bench_interleaved: the side that ran before leaves its idle
# threads spinning for a while (OpenBLAS's workers, some 10-30 ms here), and they take the cores
# from the next side. Measured: Nexus's 1024^3 matmul ran at 236 GFLOP/s in slices right after
# numpy's, 412 after a 30 ms pause, when numpy's OpenBLAS ran its AVX-512 kernels.
SETTLE_S = 0.05


def bench_interleaved(fns, warmup=3, rounds=5, min_time=0.5, settle=SETTLE_S):
    """bench() for several functions compared with each other (ours vs the peer), alternating
    between them in `rounds` slices of min_time / rounds each, so that a load change on the
    machine hits every side alike and the ratio stays meaningful. Each slice starts after
    `settle` seconds of quiet (SETTLE_S). Returns one dict per fn.
    """
    for fn in fns:
        for _ in range(warmup):
            fn()
    times = [[] for _ in fns]
    for _ in range(rounds):
        for fn, t in zip(fns, times):
            if settle > 0:
                time.sleep(settle)
            t += _samples(fn, None, min_time / rounds, 1)
    return [stats(t) for t in times]


def _samples(fn, repeat, min_time, min_repeat):
    times = []
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
        if repeat is not None:
            if len(times) >= repeat:
                break
        elif len(times) >= min_repeat and time.perf_counter() - start >= min_time:
            break
    return times


def stats(times):
    """median, p10, p90 and n of a list of sample times."""
    times = sorted(times)
    return dict(median=statistics.median(times), p10=_quantile(times, 0.10),
                p90=_quantile(times, 0.90), n=len(times))


def _quantile(sorted_times, q):
    """Linear-interpolated quantile of an already sorted list."""
    pos = q * (len(sorted_times) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_times) - 1)
    return sorted_times[lo] + (sorted_times[hi] - sorted_times[lo]) * (pos - lo)


def to_numpy(x):
    """A Nexus tensor, numpy array or Python number as a numpy array (zero-copy where possible)."""
    if hasattr(x, "numpy") and not isinstance(x, np.ndarray):
        return x.numpy()
    return np.asarray(x)


def check(name, ours, ref, rtol, atol):
    """Raise SystemExit naming the benchmark row when `ours` and `ref` disagree.

    A benchmark whose result is wrong has no meaningful time, so it stops here (llm.c's
    validate_result) instead of printing a number.
    """
    a = to_numpy(ours).astype(np.float64, copy=False)
    b = to_numpy(ref).astype(np.float64, copy=False)
    if a.shape != b.shape:
        raise SystemExit(f"check failed for {name}: shape {a.shape} (nexus) != {b.shape} "
                         "(reference)")
    bad = ~np.isclose(a, b, rtol=rtol, atol=atol, equal_nan=False)
    if bad.any():
        err = np.abs(a - b)
        i = np.unravel_index(int(np.argmax(np.where(bad, err, -1.0))), a.shape) if a.ndim else ()
        rel = err / np.maximum(np.abs(b), np.finfo(np.float64).tiny)
        raise SystemExit(
            f"check failed for {name}: {int(bad.sum())} of {a.size} elements differ beyond "
            f"rtol={rtol:g} atol={atol:g}; max abs err {err.max():.3g}, max rel err "
            f"{rel.max():.3g}; worst at index {tuple(int(k) for k in i)}: "
            f"nexus {float(a[i]):.9g} vs reference {float(b[i]):.9g}")


def table(rows, headers):
    """Print rows (sequences of cells) as a GitHub-markdown table with aligned columns."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in r] for r in rows]
    widths = [max(len(r[j]) for r in cells) for j in range(len(headers))]

    def line(r):
        return "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |"

    print(line(cells[0]))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in cells[1:]:
        print(line(r))


def threads(n):
    """Use n threads in Nexus and in numpy's BLAS (and torch, when it is already imported).

    numpy's BLAS is limited through threadpoolctl when it is installed; otherwise nothing is set
    for numpy and the returned notes say so. Returns a list of human-readable notes.
    """
    import nexus as nx

    nx.set_num_threads(n)
    notes = [f"nexus threads: {nx.get_num_threads()}"]
    try:
        from threadpoolctl import threadpool_info, threadpool_limits
    except ImportError:
        notes.append("numpy BLAS threads: NOT set (threadpoolctl not installed; "
                     "pip install threadpoolctl) -- numpy uses its default")
    else:
        # Called as a function, threadpool_limits sets the limit until the process exits.
        threadpool_limits(limits=n, user_api="blas")
        libs = [f"{i.get('internal_api')} {i.get('version')} ({i.get('num_threads')} threads)"
                for i in threadpool_info() if i.get("user_api") == "blas"]
        notes.append("numpy BLAS threads: " + (", ".join(libs) or "no BLAS pool found"))
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(n)
        notes.append(f"torch threads: {sys.modules['torch'].get_num_threads()}")
    return notes


def print_run_notes(thread_notes) -> None:
    """The header's closing lines: thread settings, BLAS environment, a busy-machine warning."""
    for note in thread_notes:
        print(f"- {note}")
    print("- environment (left as found): " + ", ".join(env_report()))
    print(f"- {round_trip_note()}")
    if os.getloadavg()[0] > 0.5 * (os.cpu_count() or 1):
        print("- WARNING: the machine is busy (load average above half the CPUs); threads get "
              "preempted and times jump by scheduler slices -- rerun on an idle machine")
    print()


def round_trip_note() -> str:
    """A line with a cache line's round trip between two threads now (nexus's ping-pong probe).

    On shared virtual machines it moves between ~100 ns and several times that as the vCPUs are
    placed on nearby or distant cores, and every parallel region's hand-offs cost that much more:
    a run's small-op latencies are only comparable with others taken at a similar value.
    """
    from nexus import _C

    ns = _C.cpu_round_trip_ns()
    if ns == 0:
        return "CPU round trip between two threads: not measured (one CPU)"
    if ns >= 5e7:  # the probe gives up after 50 ms and reports the time it waited
        return ("CPU round trip between two threads: not measured (the probe's partner thread got no CPU "
                "within its 50 ms: other threads, such as a peer's spinning workers, held them)")
    return (f"CPU round trip between two threads: {ns:.0f} ns (cache-line ping-pong; severalfold "
            "higher while a VM's vCPUs sit on distant cores, which slows small parallel regions)")


def env_report():
    """Lines saying which BLAS-related environment variables are set (they are left as found)."""
    return [f"{k}={os.environ[k]}" if k in os.environ else f"{k} not set" for k in BLAS_ENV]


def fmt_ms(seconds):
    """A time in seconds as milliseconds with sensible precision."""
    ms = seconds * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


# ---- MPI jobs --------------------------------------------------------------------------------
def mpiexec() -> str:
    """The mpiexec beside this interpreter (the `mpich` wheel's), else the one on PATH."""
    launcher = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    return launcher if os.path.exists(launcher) else "mpiexec"


def run_uneven_job(program: list[str], timeout: float, ranks: int | None = None) -> int:
    """Runs `program` as the heterogeneous 3-rank job: rank 0 alone on the first CPU, ranks 1 and
    2 sharing the second (`taskset`), one thread each; or, with `ranks`, as that many ranks under
    a plain `mpiexec -n` (placed by the OS). Returns its exit code; a job past `timeout` seconds
    is killed with everything it started, and returns 1."""
    import signal
    import subprocess

    env = {**os.environ, "NEXUS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    if ranks is not None:
        cmd = [mpiexec(), "-n", str(ranks), *program]
    else:
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            raise SystemExit(f"{os.path.basename(program[1])} needs 2 cores: rank 0 alone on one, ranks 1-2 "
                             "on the other")
        cmd = [mpiexec(), "-n", "1", "taskset", "-c", str(cpus[0]), *program,
               ":", "-n", "2", "taskset", "-c", str(cpus[1]), *program]
    print(f"$ {' '.join(cmd)}", flush=True)
    job = subprocess.Popen(cmd, env=env, start_new_session=True)  # its own process group
    try:
        return job.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(job.pid, signal.SIGKILL)  # mpiexec and the ranks it started
        job.wait()
        print(f"{os.path.basename(program[1])}: the job ran past {timeout:g} s and was killed")
        return 1


def gloo_group(comm):
    """torch.distributed's gloo process group over 127.0.0.1 for the MPI world `comm` (rank 0
    picks a free port), torch at one thread: (torch, torch.distributed), or None without torch."""
    import socket

    try:
        import torch
        import torch.distributed as td
    except ImportError:
        return None
    port = None
    if comm.rank == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
    port = comm.bcast(port, root=0)
    td.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=comm.rank, world_size=comm.size)
    torch.set_num_threads(1)
    return torch, td
