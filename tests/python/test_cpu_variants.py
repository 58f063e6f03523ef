"""CPU variants: the hot kernels are built once per instruction set and one is chosen per process
(csrc/base/cpu_variant.h). The kernel tests pass under every variant this CPU runs, the choice is
the best it supports unless NEXUS_CPU_VARIANT says otherwise, and fused kernels are compiled for
the variant in use (so they agree bit for bit with the eager kernels) and cached apart per target.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import nexus as nx
from nexus import _C

TESTS = Path(__file__).resolve().parent
BUILT = nx.info()["cpu_variants"]
RUNNABLE = [v for v in BUILT if _C.cpu_supports(v)]
# What the main run covers with the default variant, run again under each other one.
KERNEL_TESTS = ["test_op_table.py", "test_elementwise.py", "test_reductions.py", "test_nn_ops.py",
                "test_comm_codecs.py", "test_jit_interp.py", "test_optim.py", "test_fusion.py",
                "test_backward_fusion.py"]


def python(code: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})


def test_the_default_is_the_best_variant_this_cpu_runs():
    info = nx.info()
    assert info["cpu_variant"] == RUNNABLE[-1]  # built in order of preference, baseline first
    assert info["cpu_variant"] in info["simd"]
    if info["march"] == "portable" and sys.platform == "linux" and os.uname().machine == "x86_64":
        assert BUILT[0] == "baseline" and {"avx2", "avx512"} <= set(BUILT)
        assert "sse4_2" in info["cpu_features"]


@pytest.mark.parametrize("variant", [v for v in RUNNABLE if v != RUNNABLE[-1]])
def test_kernel_tests_pass_under_every_variant_this_cpu_runs(variant, tmp_path):
    env = {**os.environ, "NEXUS_CPU_VARIANT": variant, "NEXUS_CACHE_DIR": str(tmp_path / "cache")}
    probe = subprocess.run([sys.executable, "-c", "import nexus; print(nexus.info()['cpu_variant'])"],
                           capture_output=True, text=True, env=env, timeout=120)
    assert probe.stdout.strip() == variant, probe.stderr
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                        *[str(TESTS / t) for t in KERNEL_TESTS]],
                       capture_output=True, text=True, env=env, cwd=TESTS, timeout=1200)
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-2000:]


def test_fused_kernels_are_compiled_for_the_variant_in_use():
    code = ("import nexus, json; i = nexus.info()\n"
            "print(json.dumps([i['cpu_variant'], i['jit_flags'], nexus._C.cpu_variant()['march']]))")
    for variant in RUNNABLE:
        r = python(code, NEXUS_CPU_VARIANT=variant)
        assert r.returncode == 0, r.stderr
        name, flags, march = json.loads(r.stdout)
        assert name == variant
        assert (f"-march={march}" in flags) if march else ("-march" not in flags), flags


@pytest.mark.skipif(len(RUNNABLE) < 2, reason="needs two CPU variants this CPU runs")
@pytest.mark.skipif(not nx.info()["jit_enabled"], reason="needs a C++ compiler for the JIT")
def test_variants_sharing_a_cache_build_and_load_their_own_kernels(tmp_path):
    # Each variant's fused kernel gives the eager ops' bits, and is keyed by its own target.
    code = (f"import sys, json; sys.path.insert(0, {str(TESTS)!r})\n"
            "import numpy as np, nexus as nx\n"
            "from jit_cases import chain\n"
            "x = nx.tensor(np.linspace(-4, 4, 4096, dtype=np.float32))\n"
            "f = nx.jit(chain)\n"
            "ok = bool(np.array_equal(f(x).numpy(), chain(x).numpy()))\n"
            "print(json.dumps(dict(ok=ok, **f.stats())))\n")
    variants = [RUNNABLE[0], RUNNABLE[-1]]
    for expect_compile in (True, False):
        for variant in variants:
            r = python(code, NEXUS_CPU_VARIANT=variant, NEXUS_CACHE_DIR=str(tmp_path))
            assert r.returncode == 0, r.stderr
            stats = json.loads(r.stdout)
            assert stats["ok"], variant
            assert (stats["compiles"], stats["cache_hits"]) == ((1, 0) if expect_compile else (0, 1)), variant
    assert len(list((tmp_path / "kernels").glob("*.so"))) == 2


def test_float32_math_agrees_across_variants_within_its_error_bound():
    code = ("import nexus as nx, numpy as np, json\n"
            "x = np.linspace(-20, 20, 4001, dtype=np.float32)\n"
            "t = nx.tensor(x)\n"
            "out = [np.asarray(f(t)).tolist() for f in (nx.exp, nx.tanh, nx.sigmoid, nx.log)]\n"
            "print(json.dumps(out))\n")
    results = {}
    for variant in RUNNABLE:
        r = python(code, NEXUS_CPU_VARIANT=variant)
        assert r.returncode == 0, r.stderr
        results[variant] = json.loads(r.stdout)
    import numpy as np

    first = results[RUNNABLE[0]]
    for variant in RUNNABLE[1:]:
        for a, b in zip(first, results[variant]):
            # FMA or not changes the last bit or two of the polynomials, never more (vec_math.h).
            np.testing.assert_allclose(np.array(b, np.float32), np.array(a, np.float32), rtol=4e-7, atol=0,
                                       equal_nan=True)


def test_a_bad_variant_is_a_value_error_listing_the_valid_ones():
    r = python("import nexus as nx; nx.ones(2) + 1", NEXUS_CPU_VARIANT="sse9")
    assert r.returncode != 0
    assert "ValueError: NEXUS_CPU_VARIANT=sse9" in r.stderr
    assert all(v in r.stderr for v in BUILT) and "auto" in r.stderr
    with pytest.raises(ValueError, match="no CPU variant"):
        _C.cpu_supports("sse9")


def test_nexus_info_names_the_variant_and_the_features_it_saw():
    r = subprocess.run([sys.executable, "-m", "nexus.cli", "info", "--json"], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["cpu_variant"] == RUNNABLE[-1]
    assert info["cpu_variants"] == BUILT
    knobs = {k["name"]: k for k in info["knobs"]}
    assert knobs["NEXUS_CPU_VARIANT"]["default"] == "auto"
