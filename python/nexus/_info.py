"""nexus.info(): what this build has and what this machine offers."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys

from . import _C


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
    jit = _C.codegen.config()  # the compiler fused kernels use: $CXX, else c++ on PATH
    d["jit_compiler"] = jit["compiler"] if jit["compiler_found"] else None
    d["jit_flags"] = jit["flags"]
    d["jit_enabled"] = jit["jit_enabled"]  # False: NEXUS_JIT=0 or no compiler (interpreter)
    d["jit_cache_dir"] = jit["cache_dir"]
    return d
