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


def test_cuda_available_is_what_this_build_compiled():
    # No CUDA backend is in this version: CMake builds none (and refuses NEXUS_CUDA=ON), so the
    # native flag is False and info() must say so rather than guess.
    import nexus._C

    built = nexus._C.build_info()
    assert built["cuda_compiled"] is False
    assert nx.info()["cuda_available"] is built["cuda_compiled"]


def test_cuda_status_says_why_cuda_is_not_built():
    status = nx.info()["cuda_status"]
    assert status.startswith("not built: ")
    if "NEXUS_CUDA=OFF" in status:
        return
    assert "the CUDA backend is not in this version" in status
    if "CUDA toolkit found: " in status:  # names the CUDA compiler CMake found (nvcc, $CUDACXX)
        compiler = status.split("CUDA toolkit found: ", 1)[1].rstrip(")")
        assert Path(compiler).is_file(), status
    else:
        assert "nor a CUDA toolkit: no nvcc on PATH or in $CUDACXX" in status
        assert shutil.which("nvcc") is None, "nvcc is on PATH but the build did not find it"


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


def test_set_num_threads_round_trips(restore_threads):
    for n in (1, 2, 3):
        nx.set_num_threads(n)
        assert nx.get_num_threads() == n
        assert nx.info()["num_threads"] == n


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
