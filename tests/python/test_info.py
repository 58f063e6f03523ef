"""Build information: nx.info(), the `nexus info` console script, and the thread-count knob."""

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nexus as nx

REQUIRED_KEYS = ["version", "build_type", "blas", "simd", "num_threads", "cuda_compiled",
                 "cuda_status", "cuda_available", "mpi", "jit_compiler", "compiler"]


@pytest.fixture
def restore_threads():
    before = nx.get_num_threads()
    yield
    nx.set_num_threads(before)


def nexus_script():
    candidate = Path(sys.executable).parent / "nexus"
    if candidate.exists():
        return str(candidate)
    found = shutil.which("nexus")
    assert found, "the `nexus` console script is not installed next to the interpreter or on PATH"
    return found


def run_python(code, **env):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_info_has_every_documented_key():
    info = nx.info()
    assert isinstance(info, dict)
    missing = [key for key in REQUIRED_KEYS if key not in info]
    assert not missing


def test_info_values_have_the_documented_types():
    info = nx.info()
    for key in ("version", "build_type", "blas", "compiler"):
        assert isinstance(info[key], str) and info[key], key
    assert isinstance(info["num_threads"], int) and info["num_threads"] >= 1
    assert isinstance(info["cuda_compiled"], bool)
    assert isinstance(info["cuda_available"], bool)
    assert info["mpi"] is None or info["mpi"] is False or isinstance(info["mpi"], str)
    assert info["jit_compiler"] is None or isinstance(info["jit_compiler"], str)
    assert info["simd"] is not None


def test_info_version_is_the_installed_package_version():
    assert nx.info()["version"] == importlib.metadata.version("nexus")


def test_cuda_compiled_is_whether_the_backend_extension_is_there():
    import nexus._C

    built = nexus._C.build_info()["cuda_compiled"]
    assert built is nx.cuda.is_built()
    # CMake's AUTO builds the backend exactly when it finds nvcc (the same PATH as this process
    # at install time, on a machine as CI's)
    status = nx.info()["cuda_status"]
    if "NEXUS_CUDA=OFF" not in status:
        assert built is (shutil.which("nvcc") is not None), status
    assert nx.info()["cuda_available"] is (built and nx.cuda.device_count() > 0)


def test_cuda_status_names_the_architectures_or_why_not():
    status = nx.info()["cuda_status"]
    if nx.cuda.is_built():
        assert status.startswith("built for sm_") and " with CUDA " in status
        assert nx.info()["cuda_archs"].split() == nx.cuda._backend.build_archs()
    elif "NEXUS_CUDA=OFF" not in status:
        assert status == "not built: no CUDA toolkit (no nvcc on PATH or in $CUDACXX)"


def test_without_a_usable_device_info_says_why():
    info = nx.info()
    if nx.cuda.is_built() and not info["cuda_available"]:
        assert info["cuda_unavailable"] == nx.cuda.unavailable_reason()
        assert info["cuda_driver"] == "none" or info["cuda_driver"][0].isdigit()


def test_nexus_info_prints_why_cuda_is_missing():
    proc = subprocess.run([nexus_script(), "info"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr
    lines = {line.split(None, 1)[0]: line for line in proc.stdout.splitlines() if line.strip()}
    assert nx.info()["cuda_status"] in lines["cuda_status"]
    assert lines["cuda_available"].split()[1] in ("✗", "no")


def test_native_build_info_is_the_compiled_in_part_of_info():
    import nexus._C

    built = nexus._C.build_info()
    info = nx.info()
    assert isinstance(built, dict) and built
    for key, value in built.items():
        if key in ("num_threads", "cuda_available"):
            continue  # run-time values, may differ from what was compiled in
        assert key in info, key
        assert info[key] == value, key


def test_nexus_info_console_script_prints_the_build():
    proc = subprocess.run([nexus_script(), "info"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    info = nx.info()
    assert info["version"] in proc.stdout
    assert info["blas"].lower() in proc.stdout.lower()


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return next((set(line.split(":", 1)[1].split()) for line in f if line.startswith("flags")), set())
    except OSError:
        return set()


@pytest.mark.skipif("avx2" not in _cpu_flags(), reason="needs an x86 CPU with AVX2 (OpenBLAS's Haswell kernels)")
def test_blas_core_names_the_kernels_openblas_runs():
    # OPENBLAS_CORETYPE decides at load which kernels OpenBLAS runs; info reports OpenBLAS's own answer
    code = "import nexus as nx; print(nx.info()['blas_core'])"
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_CORETYPE"}
    forced = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            env={**env, "OPENBLAS_CORETYPE": "Haswell"})
    assert forced.returncode == 0, forced.stderr
    assert forced.stdout.strip() == "Haswell"
    assert isinstance(nx.info()["blas_core"], str) and nx.info()["blas_core"]


def test_set_num_threads_round_trips(restore_threads):
    for n in (1, 2, 3):
        nx.set_num_threads(n)
        assert nx.get_num_threads() == n
        assert nx.info()["num_threads"] == n


@pytest.mark.parametrize("n", [0, -1, 1025, 2**62, -2**63])
def test_a_thread_count_out_of_range_is_a_value_error_naming_it(restore_threads, n):
    before = nx.get_num_threads()
    with pytest.raises(ValueError, match=rf"set_num_threads: expected an integer in \[1, 1024\], got {n}"):
        nx.set_num_threads(n)
    assert nx.get_num_threads() == before


def test_results_do_not_depend_on_the_thread_count(restore_threads):
    nx.manual_seed(0)
    a, b = nx.randn(64, 48, dtype="float64"), nx.randn(48, 32, dtype="float64")
    nx.set_num_threads(1)
    one = (nx.matmul(a, b).numpy().copy(), nx.sum(nx.exp(a), axis=0).numpy().copy())
    nx.set_num_threads(4)
    four = (nx.matmul(a, b).numpy(), nx.sum(nx.exp(a), axis=0).numpy())
    for x, y in zip(one, four):
        assert x.shape == y.shape
        assert abs(x - y).max() <= 1e-12 * max(1.0, abs(x).max())


def test_environment_variable_sets_the_default_thread_count():
    proc = run_python("import nexus; print(nexus.get_num_threads())", NEXUS_NUM_THREADS="3")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "3"


def default_threads(bind: int | None = None, **env: str) -> int:
    """The thread count a fresh process starts with, bound first to its first `bind` CPUs."""
    code = "import nexus; print(nexus.get_num_threads())"
    if bind is not None:
        code = f"import os; os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:{bind}]); " + code
    clean = {k: v for k, v in os.environ.items()
             if k not in ("NEXUS_NUM_THREADS", "MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE")}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**clean, **env})
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout)


@pytest.mark.skipif(len(os.sched_getaffinity(0)) != os.cpu_count(), reason="this process is bound to some CPUs")
def test_unbound_mpi_ranks_of_a_node_share_its_cores():
    cpus = os.cpu_count()
    assert default_threads() == cpus
    for var in ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"):  # MPICH's Hydra, Open MPI
        assert default_threads(**{var: "1"}) == cpus
        assert default_threads(**{var: "2"}) == max(1, cpus // 2)
        assert default_threads(**{var: str(cpus + 1)}) == 1
    for junk in ("", "x", "0", "-2", "2x"):  # not the launcher's: as if unset
        assert default_threads(MPI_LOCALNRANKS=junk) == cpus
    assert default_threads(MPI_LOCALNRANKS="2", NEXUS_NUM_THREADS="3") == 3


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs to bind to one")
def test_a_rank_bound_to_some_cores_uses_those_cores():
    assert default_threads(bind=1, MPI_LOCALNRANKS="2") == 1
    if len(os.sched_getaffinity(0)) >= 3:  # bound to 2 of 3+: its own 2, not divided again
        assert default_threads(bind=2, MPI_LOCALNRANKS="2") == 2


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the probe needs two CPUs")
def test_cpu_round_trip_is_a_plausible_time():
    # A cache line's round trip between two threads: tens to thousands of nanoseconds; when the
    # partner never gets a CPU the probe gives up after 50 ms and reports the time it waited.
    from nexus import _C

    ns = _C.cpu_round_trip_ns()
    assert 1.0 < ns < 1e8, ns


def test_cpu_round_trip_on_one_cpu_is_not_measured():
    code = ("import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); from nexus import _C; "
            "print(_C.cpu_round_trip_ns())")
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert float(proc.stdout) == 0.0
