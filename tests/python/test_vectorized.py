"""The contiguous inner loops of the elementwise and reduction kernels must be vectorised.

Checked on the generated code, not on timings: GCC's -fopt-info-vec report for the kernel
sources, compiled as one CPU variant of the package is (-O3 -march=... -fno-math-errno
-DNX_CPU_VARIANT=<name>; here the avx2 variant's x86-64-v3 on x86-64, else the single variant of
a NEXUS_ARCH=native build), must list each fast-path loop as vectorised. Not -march=native on
x86-64: its tuning for some CPUs (AMD Zen 1) prefers 128-bit vectors, which no variant uses.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CXX = shutil.which("g++")
MARCH = "-march=x86-64-v3" if platform.machine() in ("x86_64", "AMD64") else "-march=native"

# (source file, text of a line whose loop must be vectorised)
FAST_PATHS = [
    ("csrc/ops/cpu/elementwise_kernel.cpp", "for (int64_t i = 0; i < n; ++i) o[i] = f(a[i]);"),
    ("csrc/ops/cpu/elementwise_kernel.cpp", "for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);"),
    ("csrc/ops/cpu/elementwise_kernel.cpp", "for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], bv);"),
    ("csrc/ops/cpu/elementwise_kernel.cpp", "for (int64_t i = 0; i < n; ++i) o[i] = f(av, b[i]);"),
    ("csrc/ops/cpu/reduce_kernel.cpp", "for (; i + kLanes <= n; i += kLanes)"),  # sum, max, min lanes
    ("csrc/ops/cpu/reduce_kernel.cpp", "for (int64_t j = 0; j < nj; ++j) acc[j] = kern::add(acc[j], Acc(row[j]));"),
]


def vectorized_lines(source: str) -> set[int]:
    cmd = [CXX, "-std=c++20", "-O3", MARCH, "-fno-math-errno", "-DNX_CPU_VARIANT=native",
           f"-I{ROOT / 'csrc'}", "-fopt-info-vec-optimized", "-c", str(ROOT / source), "-o", "/dev/null"]
    report = subprocess.run(cmd, capture_output=True, text=True, check=True).stderr
    name = Path(source).name
    pattern = rf"{re.escape(name)}:(\d+):\d+: optimized: loop vectorized"
    return {int(m.group(1)) for m in re.finditer(pattern, report)}


@pytest.mark.skipif(CXX is None, reason="needs g++ to inspect the generated code")
@pytest.mark.parametrize("source", sorted({s for s, _ in FAST_PATHS}))
def test_fast_path_loops_are_vectorized(source):
    lines = (ROOT / source).read_text().splitlines()
    done = vectorized_lines(source)
    for src, text in FAST_PATHS:
        if src != source:
            continue
        numbers = [i + 1 for i, line in enumerate(lines) if text in line]
        assert numbers, f"{text!r} not found in {source}: update FAST_PATHS"
        assert all(n in done for n in numbers), f"{source}:{numbers} ({text}) is not vectorized"


@pytest.mark.skipif(CXX is None, reason="needs g++ to inspect the generated code")
def test_float_exp_loop_calls_no_libm(tmp_path):
    """vec::exp inlines into a vector loop: no call to expf and packed (ymm/zmm) instructions."""
    src = tmp_path / "exp_loop.cpp"
    src.write_text('#include "ops/cpu/vec_math.h"\n'
                   "void run(const float* x, float* y, long n) {\n"
                   "  for (long i = 0; i < n; ++i) y[i] = nexus::ops::vec::exp(x[i]);\n}\n")
    asm = subprocess.run([CXX, "-std=c++20", "-O3", MARCH, "-fno-math-errno",
                          f"-I{ROOT / 'csrc'}", "-S", "-o", "-", str(src)],
                         capture_output=True, text=True, check=True).stdout
    assert "expf" not in asm
    assert re.search(r"\b(vfmadd\w*ps|vmulps)\b.*%[yz]mm", asm), "no packed float math in the loop"
