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


def mlp():
    g = GraphBuilder(seed=0).input("x", Shape(8, 6))
    for act in ("relu", "tanh", "sigmoid", "gelu"):
        g.dense(8, act)
    return g.dense(3, "softmax").compile()


def lenet():
    g = GraphBuilder(seed=0).input("x", Shape(4, 1, 12, 12))
    g.conv2d(4, 3, padding="same", activation="relu").batch_norm().max_pool2d(2)
    g.conv2d(8, 3, activation="relu").max_pool2d(2).flatten().dense(16, "relu").dropout(0.1)
    return g.dense(10, "softmax").compile()


@needs_nvrtc
@pytest.mark.parametrize("make", [mlp, lenet])
def test_device_kernels_take_their_arguments_by_value(make):
    # What a CUDA model launches: the elementwise groups, each one entry point taking one struct
    # by value (no argument arrays in device memory) and the element count.
    groups = make().fusion_stats(4)["groups"]
    on_device = [grp for grp in groups if grp["program"].runs_on_device]
    assert on_device and len(on_device) < len(groups)  # the reductions stay with the host form
    libs = jit_module.nvrtc_candidates()
    for grp in on_device:
        name, program = grp["kernel"], grp["program"]
        assert f"__global__ void {name}(NxArgs a, int64_t n)" in program.source("cuda")
        assert "NxArgs" not in program.source("cpp")
        ptx = nx._C.codegen.ptx(program, "compute_90", libs)
        assert f".entry {name}(" in ptx
        # the struct the host fills (codegen::CudaArgs) is exactly the kernel's first parameter
        assert f"{name}_param_0[{nx._C.codegen.cuda_args_bytes}]" in ptx
        assert f"{name}_param_2" not in ptx
    for grp in groups:
        if not grp["program"].runs_on_device:
            assert "(char* const* p, const int64_t* s, int64_t n, const double* c" in grp["program"].source("cuda")


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
