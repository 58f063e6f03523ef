"""One core per process: the extensions load one shared libnexus_core (one thread pool, one
allocator cache, one RNG, one kernel cache), installed next to them in the package."""

import importlib.util
import os
import subprocess
import sys

import pytest

MAPPED = """
import sys
for name in sys.argv[1:]:
    __import__(name)
print("\\n".join(sorted({line.split()[-1] for line in open("/proc/self/maps") if "nexus" in line})))
"""


def mapped(*modules: str) -> list[str]:
    out = subprocess.run([sys.executable, "-c", MAPPED, *modules], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


def cores(paths: list[str]) -> list[str]:
    return [p for p in paths if os.path.basename(p).startswith("libnexus_core")]


def test_the_core_is_a_shared_library_next_to_the_extension():
    paths = mapped("nexus")
    ext = next(p for p in paths if os.path.basename(p).startswith("_C."))
    assert cores(paths) == [os.path.join(os.path.dirname(ext), "libnexus_core.so")]


@pytest.mark.skipif(importlib.util.find_spec("nexus._C_mpi") is None,
                    reason="the MPI extension is not built here (NEXUS_MPI=OFF, as in the sanitizer run)")
def test_the_mpi_extension_loads_the_same_core():
    paths = mapped("mpi4py.MPI", "nexus", "nexus._C_mpi")
    assert any(os.path.basename(p).startswith("_C_mpi.") for p in paths)
    assert len(cores(paths)) == 1
