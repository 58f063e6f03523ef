"""nexus.info(): what this build has and what this machine offers."""

from __future__ import annotations

import os
import shutil
import subprocess

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


def info() -> dict:
    """Build and runtime facts: version, BLAS, SIMD, threads, CUDA, MPI, JIT compiler."""
    d = dict(_C.build_info())
    d["num_threads"] = _C.get_num_threads()
    d["cuda_available"] = False  # no CUDA backend is compiled into this build
    d["mpi"] = "compiled" if d["mpi_compiled"] else None
    d["jit_compiler"] = _jit_compiler()
    return d
