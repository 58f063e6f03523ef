"""nexus.info(): what this build has and what this machine offers."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import subprocess
import sys

from . import _C


def _jit_compiler() -> str | None:
    """The C++ compiler the kernel JIT would use: $CXX, else c++ on PATH."""
    cxx = os.environ.get("CXX") or "c++"
    path = shutil.which(cxx.split()[0])
    if path is None:
        return None
    try:
        first = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=10).stdout
        version = first.splitlines()[0] if first else ""
    except (OSError, subprocess.SubprocessError):
        version = ""
    return f"{path} ({version})" if version else path


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def _mpi(compiled: bool) -> str | None:
    """Which MPI nexus.distributed uses, without loading or initialising it: the library mpi4py
    already loaded when it is imported, else the mpich wheel's version. None: not compiled in."""
    if not compiled or importlib.util.find_spec("nexus._C_mpi") is None:
        return None
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        library = " ".join(mpi.Get_library_version().splitlines()[0].split())
    elif _version("mpich"):
        library = f"MPICH {_version('mpich')} (mpich wheel)"
    else:
        library = "system MPI"
    mpi4py = _version("mpi4py")
    return f"{library}, mpi4py {mpi4py}" if mpi4py else f"{library}; mpi4py missing: pip install mpi4py"


def info() -> dict:
    """Build and runtime facts: version, BLAS, SIMD, threads, CUDA, MPI, JIT compiler."""
    d = dict(_C.build_info())
    d["num_threads"] = _C.get_num_threads()
    d["cuda_available"] = False  # no CUDA backend is compiled into this build
    d["mpi"] = _mpi(d["mpi_compiled"])
    d["jit_compiler"] = _jit_compiler()
    return d
