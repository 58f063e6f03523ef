"""The CUDA dialect of fused kernels, compiled to PTX by NVRTC (no GPU needed)."""

import importlib
import os
import subprocess
import sys

import pytest

import nexus as nx
from nexus.graph import GraphBuilder, Shape
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


@needs_nvrtc
def test_ptx_of_a_compiled_models_forward_and_backward_kernels():
    g = GraphBuilder(seed=0).input("x", Shape(8, 6))
    for act in ("relu", "tanh", "sigmoid", "gelu"):
        g.dense(8, act)
    model = g.dense(3, "softmax").compile()
    kernels = {grp["kernel"]: grp["program"] for grp in model.fusion_stats(8)["groups"]}
    assert any("relu_grad" in k for k in kernels) and any("tanh_grad" in k for k in kernels)
    for name, program in kernels.items():
        ptx = nx._C.codegen.ptx(program, "compute_80", jit_module.nvrtc_candidates())
        assert f".entry {name}" in ptx


def test_cuda_source_is_rendered_from_the_same_program():
    f = nx.jit(chain)
    f(nx.randn(3))
    program = next(iter(f._plans.values())).kernels[0][1]
    cuda = program.source("cuda")
    assert "__global__" in cuda and program.name in cuda
    with pytest.raises(ValueError, match="dialect must be"):
        program.source("metal")


def test_missing_nvrtc_says_what_to_install():
    # NEXUS_NVRTC names the only library tried: pointing it nowhere is a machine without NVRTC
    code = ("import nexus as nx\n"
            "try:\n    nx.jit(lambda t: t * 2 + 1).ptx(nx.randn(3))\n"
            "except ValueError as e:\n    print(e)\n")
    env = dict(os.environ, NEXUS_NVRTC="/nonexistent/libnvrtc.so")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NVRTC was not found (tried /nonexistent/libnvrtc.so)" in out.stdout
    assert "pip install nvidia-cuda-nvrtc-cu12" in out.stdout
