"""The interpreter runs the same fused programs without a compiler (NEXUS_JIT=0, or no compiler
found) and gives the compiled kernels' results."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import nexus as nx
from jit_cases import chain, chain_sum

HERE = Path(__file__).resolve().parent
SCRIPT = f"""
import json, sys
sys.path.insert(0, {str(HERE)!r})
import numpy as np
import nexus as nx
from jit_cases import chain, chain_sum
x = nx.tensor(np.linspace(-4, 4, 3 * 4099, dtype=np.float32).reshape(3, 4099))
f, g = nx.jit(chain), nx.jit(chain_sum)
ok = bool(np.array_equal(f(x).numpy(), chain(x).numpy()))
close = bool(np.allclose(g(x).numpy(), chain_sum(x).numpy(), rtol=1e-5))
print(json.dumps(dict(ok=ok, close=close, info=nx.info()["jit_compiler"], **f.stats())))
"""


def run(**env):
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("env", [{"NEXUS_JIT": "0"}, {"CXX": "/nonexistent/c++"}])
def test_without_a_compiler_the_interpreter_runs(private_kernel_cache, env):
    r = run(NEXUS_CACHE_DIR=str(private_kernel_cache), **env)
    assert r["ok"] and r["close"]
    assert r["backend"] == "interpreter" and r["compiles"] == 0 and r["kernels"] == 1
    if "CXX" in env:
        assert r["info"] is None
    assert not (private_kernel_cache / "kernels").exists()


@pytest.mark.skipif(not nx.info()["jit_enabled"], reason="needs a C++ compiler for the JIT")
@pytest.mark.parametrize("fn", [chain, chain_sum])
def test_interpreter_and_compiled_kernels_agree_bitwise(monkeypatch, fn):
    x = nx.tensor(np.random.default_rng(1).standard_normal((7, 5000)).astype(np.float32))
    compiled = nx.jit(fn)(x).numpy().copy()
    monkeypatch.setenv("NEXUS_JIT", "0")
    interpreted = nx.jit(fn)(x).numpy()
    np.testing.assert_array_equal(compiled, interpreted)


def test_interpreter_handles_strided_and_broadcast_inputs(monkeypatch, rng):
    monkeypatch.setenv("NEXUS_JIT", "0")
    a = nx.tensor(rng.standard_normal((6, 8)).astype(np.float32)).T  # strided
    b = nx.tensor(rng.standard_normal((1, 6)).astype(np.float32))
    f = nx.jit(lambda a, b: nx.max(nx.tanh(a) * b + a, axis=0))
    np.testing.assert_array_equal(f(a, b).numpy(), nx.max(nx.tanh(a) * b + a, axis=0).numpy())
