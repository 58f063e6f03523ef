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


def _cuda() -> dict:
    """What the CUDA backend sees: available or why not, the runtime and driver, each GPU."""
    from . import cuda

    reason = cuda.unavailable_reason()
    d = {"cuda_available": reason is None}
    if not cuda.is_built():
        return d
    backend = cuda._backend
    d["cuda_archs"] = " ".join(backend.build_archs())
    d["cuda_runtime"] = backend.runtime_version()
    d["cuda_driver"] = backend.driver_version()
    d["nccl"] = backend.nccl_version()  # "none" where it cannot be loaded
    if reason is not None:
        d["cuda_unavailable"] = reason
        return d
    for i in range(cuda.device_count()):
        major, minor = cuda.get_device_capability(i)
        d[f"cuda:{i}"] = f"{cuda.get_device_name(i)}, compute capability {major}.{minor}"
    return d


def info() -> dict:
    """Build and runtime facts: version, BLAS, SIMD, threads, CUDA, MPI, JIT compiler.

    Returns:
        A dict: what was compiled in (``_C.build_info()``: version, build_type, blas, blas_core --
        the kernels OpenBLAS chose for this CPU --, march --
        ``portable`` or the one -march of a ``NEXUS_ARCH`` build --, cpu_variants -- the kernel
        variants it carries --, compiler, sanitizers, cuda_compiled, cuda_status -- why CUDA is or is not built,
        mpi_compiled) and what this process sees (num_threads, cuda_available and, where the
        backend is built, cuda_archs, cuda_runtime, cuda_driver, nccl, one ``cuda:N`` entry per GPU or
        cuda_unavailable saying why; cpu_variant -- the kernel variant in use, chosen from
        cpu_features or by ``NEXUS_CPU_VARIANT`` --, simd -- it and its -march --; mpi,
        jit_compiler, jit_flags, jit_enabled, jit_cache_dir).

    Example:
        >>> nx.info()["cuda_available"]
        False
    """
    d = dict(_C.build_info())
    d["num_threads"] = _C.get_num_threads()
    cpu = _C.cpu_variant()
    d["cpu_variant"] = cpu["name"]
    d["simd"] = f"{cpu['name']} (-march={cpu['march']})" if cpu["march"] else cpu["name"]
    d["cpu_features"] = cpu["features"]
    d.update(_cuda())
    d["mpi"] = _mpi(d["mpi_compiled"])
    jit = _C.codegen.config()  # the compiler fused kernels use: $CXX, else c++ on PATH
    d["jit_compiler"] = jit["compiler"] if jit["compiler_found"] else None
    d["jit_flags"] = jit["flags"]
    d["jit_enabled"] = jit["jit_enabled"]  # False: NEXUS_JIT=0 or no compiler (interpreter)
    d["jit_cache_dir"] = jit["cache_dir"]
    return d
