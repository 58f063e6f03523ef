"""The on-disk kernel cache: cold and warm processes, corrupted entries, concurrent writers,
private permissions. Each process here runs the same chain, so the suite compiles it once per
cache directory."""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

import nexus as nx

pytestmark = pytest.mark.skipif(not nx.info()["jit_enabled"], reason="needs a C++ compiler for the JIT")

HERE = Path(__file__).resolve().parent
SCRIPT = f"""
import json, sys
sys.path.insert(0, {str(HERE)!r})
import numpy as np
import nexus as nx
from jit_cases import chain
x = nx.tensor(np.linspace(-4, 4, 4096, dtype=np.float32))
f = nx.jit(chain)
ok = bool(np.array_equal(f(x).numpy(), chain(x).numpy()))
print(json.dumps(dict(ok=ok, **f.stats())))
"""


def run(cache, **env):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NEXUS_CACHE_DIR": str(cache), **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def start(cache):
    return subprocess.Popen([sys.executable, "-c", SCRIPT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, "NEXUS_CACHE_DIR": str(cache)})


def test_warm_cache_compiles_nothing(private_kernel_cache):
    cold = run(private_kernel_cache)
    assert cold["ok"] and cold["compiles"] == 1 and cold["cache_hits"] == 0
    assert cold["compile_seconds"] > 0
    warm = run(private_kernel_cache)
    assert warm["ok"] and warm["compiles"] == 0 and warm["cache_hits"] == 1


def test_nodes_whose_flags_resolve_to_other_cpus_keep_apart_in_one_cache(private_kernel_cache, tmp_path):
    # Two "nodes" share a cache directory, a compiler and NEXUS_JIT_CXXFLAGS, but their CPUs
    # differ: here a wrapper compiler that, on the second node, compiles as for a CPU without
    # AVX2 (as -march=native would on an older machine). Each builds its own kernel; neither
    # loads the other's, and each finds its own on the next run.
    real = os.environ.get("CXX", "c++")
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f'#!/bin/sh\nexec {real} "$@" $NODE_FLAGS\n')
    wrapper.chmod(0o755)
    nodes = {"new": {"CXX": str(wrapper), "NODE_FLAGS": ""},
             "old": {"CXX": str(wrapper), "NODE_FLAGS": "-mno-avx2 -mno-avx512f"}}
    for name, env in nodes.items():
        cold = run(private_kernel_cache, **env)
        assert cold["ok"] and cold["compiles"] == 1 and cold["cache_hits"] == 0, name
    assert len(list((private_kernel_cache / "kernels").glob("*.so"))) == 2
    for name, env in nodes.items():
        warm = run(private_kernel_cache, **env)
        assert warm["ok"] and warm["compiles"] == 0 and warm["cache_hits"] == 1, name


def test_cache_files_are_private(private_kernel_cache):
    run(private_kernel_cache)
    kernels = private_kernel_cache / "kernels"
    assert stat.S_IMODE(kernels.stat().st_mode) == 0o700
    files = list(kernels.iterdir())
    assert any(f.suffix == ".so" for f in files)
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


@pytest.mark.parametrize("damage", ["garbage", "other_kernel"])
def test_a_corrupted_entry_is_rebuilt(private_kernel_cache, damage):
    run(private_kernel_cache)
    (so,) = (private_kernel_cache / "kernels").glob("*.so")
    if damage == "garbage":
        so.write_bytes(b"\x7fELF not really a shared object")
    else:  # a valid library whose embedded key is another kernel's
        src = so.with_suffix(".cpp").read_text().replace(so.stem, "0" * 32)
        other = so.with_name("other.cpp")
        other.write_text(src)
        subprocess.run([os.environ.get("CXX", "c++"), "-std=c++20", "-O0", "-fPIC", "-shared",
                        str(other), "-o", str(so)], check=True, capture_output=True)
    again = run(private_kernel_cache)
    assert again["ok"] and again["compiles"] == 1 and again["cache_hits"] == 0
    assert run(private_kernel_cache)["compiles"] == 0  # the rebuilt entry is good


def test_concurrent_writers_all_succeed_and_leave_a_valid_cache(private_kernel_cache):
    procs = [start(private_kernel_cache) for _ in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out.strip().splitlines()[-1]))
    assert all(r["ok"] for r in results)
    assert sum(r["compiles"] for r in results) == 1  # the per-key lock: one process compiles
    after = run(private_kernel_cache)
    assert after["compiles"] == 0 and after["cache_hits"] == 1
    leftovers = [f.name for f in (private_kernel_cache / "kernels").iterdir() if ".tmp." in f.name]
    assert not leftovers


def compiler_takes_gch() -> bool:
    out = subprocess.run([os.environ.get("CXX", "c++"), "--version"], capture_output=True, text=True).stdout
    return "Free Software Foundation" in out  # GCC


gch_only = pytest.mark.skipif(not compiler_takes_gch(), reason="precompiled preludes are made for GCC only")


@gch_only
def test_kernels_compile_against_one_precompiled_prelude_into_the_same_code(private_kernel_cache):
    assert run(private_kernel_cache)["ok"]
    kernels = private_kernel_cache / "kernels"
    (gch,) = kernels.glob("prelude-*.h.gch")
    assert gch.with_suffix("").exists()  # the header beside it, for a compiler that cannot use it
    # The kernel compiled through it has the code its whole source gives, byte for byte (the
    # files differ in the compile unit's name, which the symbol table records).
    (so,) = kernels.glob("[0-9a-f]*.so")
    whole = private_kernel_cache / "whole.so"
    flags = nx.info()["jit_flags"].split()
    subprocess.run([os.environ.get("CXX", "c++"), *flags, str(so.with_suffix(".cpp")), "-o", str(whole)],
                   check=True, capture_output=True)

    def code(lib):
        out = lib.with_name(lib.name + ".text")
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.text", str(lib), str(out)], check=True)
        return out.read_bytes()
    assert len(code(so)) > 0 and code(whole) == code(so)
    assert not [f.name for f in kernels.iterdir() if ".tmp." in f.name]  # no compile unit left behind


@gch_only
def test_a_damaged_precompiled_prelude_costs_time_not_the_kernel(private_kernel_cache):
    run(private_kernel_cache)
    kernels = private_kernel_cache / "kernels"
    (gch,) = kernels.glob("prelude-*.h.gch")
    gch.write_bytes(b"gpch not a precompiled header")
    gch.with_suffix("").write_text("#error a damaged prelude\n")
    for so in kernels.glob("[0-9a-f]*.so"):
        so.unlink()
    again = run(private_kernel_cache)
    assert again["ok"] and again["compiles"] == 1


def test_nexus_info_shows_the_jit_compiler_flags_and_knobs():
    info = nx.info()
    assert info["jit_compiler"] and "-O3" in info["jit_flags"] and "-shared" in info["jit_flags"]
    names = [k[0] for k in nx._C.knobs()]
    for knob in ("NEXUS_JIT", "NEXUS_CACHE_DIR", "NEXUS_JIT_CXXFLAGS"):
        assert knob in names
