"""The CUDA dialect of fused kernels, compiled to PTX by NVRTC (no GPU needed)."""

import importlib

import pytest

import nexus as nx
from jit_cases import chain, chain_sum

jit_module = importlib.import_module("nexus.jit")


def nvrtc_or_none():
    try:
        return nx._C.codegen.nvrtc_version(jit_module.nvrtc_candidates())
    except ValueError:
        return None


NVRTC = nvrtc_or_none()
needs_nvrtc = pytest.mark.skipif(NVRTC is None, reason="needs NVRTC: pip install nvidia-cuda-nvrtc-cu12 "
                                 "(or the nvrtc extra: pip install '.[nvrtc]')")


@needs_nvrtc
@pytest.mark.parametrize("fn, dtype", [(chain, "float32"), (chain_sum, "float16")])
def test_ptx_of_fused_kernels(fn, dtype):
    ptx = nx.jit(fn).ptx(nx.randn(4, 3).astype(dtype), arch="compute_80")
    assert ".entry nx_fused_" in ptx and ".target sm_80" in ptx


def test_cuda_source_is_rendered_from_the_same_program():
    f = nx.jit(chain)
    f(nx.randn(3))
    program = next(iter(f._plans.values())).kernels[0][1]
    cuda = program.source("cuda")
    assert "__global__" in cuda and program.name in cuda
    with pytest.raises(ValueError, match="dialect must be"):
        program.source("metal")


@pytest.mark.skipif(NVRTC is not None, reason="NVRTC is installed here; the error path needs it absent")
def test_missing_nvrtc_says_what_to_install():
    with pytest.raises(ValueError, match="pip install nvidia-cuda-nvrtc"):
        nx.jit(chain).ptx(nx.randn(3))
