"""nexus.info(): what this build has and what this machine offers."""

from __future__ import annotations

from . import _C


def info() -> dict:
    """Build and runtime facts: version, BLAS, SIMD, threads, CUDA, MPI, JIT compiler."""
    d = dict(_C.build_info())
    d["num_threads"] = _C.get_num_threads()
    d["cuda_available"] = False  # no CUDA backend is compiled into this build
    d["mpi"] = "compiled" if d["mpi_compiled"] else None
    jit = _C.codegen.config()  # the compiler fused kernels use: $CXX, else c++ on PATH
    d["jit_compiler"] = jit["compiler"] if jit["compiler_found"] else None
    d["jit_flags"] = jit["flags"]
    d["jit_enabled"] = jit["jit_enabled"]  # False: NEXUS_JIT=0 or no compiler (interpreter)
    d["jit_cache_dir"] = jit["cache_dir"]
    return d
