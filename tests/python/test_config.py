"""NEXUS_* knobs: one parser (csrc/base/env.cpp) for C++ and Python; booleans in every common
spelling; a bad value is a ValueError naming the knob, the value and what is valid, and a
one-line error with exit status 2 from `nexus info`; compiler flags that change floating-point
results are refused."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import nexus as nx
from nexus import config

BAD_VALUES = [
    ("NEXUS_NUM_THREADS", "abc", r"\[1, 1024\]"),
    ("NEXUS_NUM_THREADS", "0", r"\[1, 1024\]"),
    ("NEXUS_NUM_THREADS", "4096", r"\[1, 1024\]"),
    ("NEXUS_NUM_THREADS", "2.5", r"\[1, 1024\]"),
    ("NEXUS_ALLOC_CACHE_MB", "-1", r"\[0, "),
    ("NEXUS_ALLOC_CACHE_MB", "lots", r"\[0, "),
    ("NEXUS_JIT", "maybe", "true, false, yes, no, on, off"),
    ("NEXUS_JIT", "2", "true, false, yes, no, on, off"),
    ("NEXUS_COMM_TIMEOUT", "soon", "seconds > 0"),
    ("NEXUS_DP_SHARED_MEMORY", "sometimes", "true, false, yes, no, on, off"),
    ("NEXUS_COMM_TIMEOUT", "-5", "seconds > 0"),
    ("NEXUS_JIT_CXXFLAGS", "-O2 -ffast-math", "-ffast-math"),
]

# Flags that change what a floating-point operation returns (GCC/Clang manuals).
REFUSED_FLAGS = ["-ffast-math", "-Ofast", "-ffinite-math-only", "-funsafe-math-optimizations",
                 "-fassociative-math", "-freciprocal-math", "-fno-signed-zeros", "-fcx-limited-range",
                 "-ffp-contract=fast", "-ffp-contract=on", "-ffp-model=fast", "-fapprox-func",
                 "-fno-honor-nans", "-mfpmath=387", "-fdenormal-fp-math=preserve-sign"]
# Flags that leave results alone: optimisation, code generation, the safe side of a switch.
ALLOWED_FLAGS = ["-O2", "-O3 -march=native", "-O1 -fno-trapping-math", "-O2 -fno-math-errno",
                 "-O2 -fno-fast-math", "-O2 -ffp-contract=off", "-Os -g", "-O2 -mfpmath=sse"]

BOOLEANS = {"1": True, "0": False, "true": True, "false": False, "yes": True, "no": False,
            "on": True, "off": False, "TRUE": True, "False": False, "Yes": True, "OFF": False,
            " on ": True}


def nexus_script() -> str:
    candidate = Path(sys.executable).parent / "nexus"
    return str(candidate) if candidate.exists() else shutil.which("nexus")


def run_nexus(*args, **env):
    return subprocess.run([nexus_script(), *args], capture_output=True, text=True, timeout=120,
                          env={**os.environ, **env})


def test_every_knob_has_one_parser_and_a_default_that_parses(monkeypatch):
    for name in config.names():
        monkeypatch.delenv(name, raising=False)
    values = config.check()
    assert list(values) == config.names()
    assert values["NEXUS_JIT"] is True
    assert values["NEXUS_NUM_THREADS"] is None  # computed: the cores this process may use
    assert isinstance(values["NEXUS_ALLOC_CACHE_MB"], int)
    assert isinstance(values["NEXUS_COMM_TIMEOUT"], float)


@pytest.mark.parametrize(("name", "bad", "valid"), BAD_VALUES)
def test_a_bad_value_names_the_knob_the_value_and_what_is_valid(monkeypatch, name, bad, valid):
    monkeypatch.setenv(name, bad)
    with pytest.raises(ValueError, match=valid) as info:
        config.value(name)
    assert name in str(info.value) and bad in str(info.value)
    with pytest.raises(ValueError, match=name):
        config.check()


def test_an_unknown_knob_lists_the_knobs():
    with pytest.raises(ValueError, match="NEXUS_JIT_CXXFLAGS"):
        config.value("NEXUS_NO_SUCH_KNOB")


@pytest.mark.parametrize(("spelling", "expected"), BOOLEANS.items())
def test_booleans_accept_every_common_spelling(monkeypatch, spelling, expected):
    monkeypatch.setenv("NEXUS_JIT", spelling)
    assert config.value("NEXUS_JIT") is expected
    if not expected:  # the C++ reader agrees: fused kernels go to the interpreter
        assert nx.info()["jit_enabled"] is False


def test_comm_timeout_reads_through_the_parser(monkeypatch):
    monkeypatch.setenv("NEXUS_COMM_TIMEOUT", "2.5")
    assert config.comm_timeout() == 2.5


@pytest.mark.parametrize("flag", REFUSED_FLAGS)
def test_flags_that_change_floating_point_results_are_refused(monkeypatch, flag):
    monkeypatch.setenv("NEXUS_JIT_CXXFLAGS", f"-O2 {flag}")
    with pytest.raises(ValueError, match="NEXUS_JIT_CXXFLAGS") as info:
        config.value("NEXUS_JIT_CXXFLAGS")
    assert f"{flag} is refused" in str(info.value)


@pytest.mark.parametrize("flags", ALLOWED_FLAGS)
def test_flags_that_keep_results_are_accepted(monkeypatch, flags):
    monkeypatch.setenv("NEXUS_JIT_CXXFLAGS", flags)
    assert config.value("NEXUS_JIT_CXXFLAGS") == flags


# ---- `nexus info` --------------------------------------------------------------------------------


@pytest.mark.parametrize(("name", "bad", "valid"), BAD_VALUES)
def test_nexus_info_with_a_bad_knob_prints_one_line_and_exits_2(name, bad, valid):
    proc = run_nexus("info", **{name: bad})
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and bad in lines[0]


def test_nexus_info_shows_every_knob_and_its_value():
    proc = run_nexus("info", NEXUS_NUM_THREADS="3", NEXUS_JIT="off")
    assert proc.returncode == 0, proc.stderr
    rows = {line.split()[0]: line for line in proc.stdout.splitlines() if line.strip().startswith("NEXUS_")}
    assert sorted(rows) == sorted(config.names())
    assert rows["NEXUS_NUM_THREADS"].split()[1:3] == ["3", "(set)"]
    assert rows["NEXUS_JIT"].split()[1:3] == ["off", "(set)"]
    default = dict((n, d) for n, d, _ in config.KNOBS)["NEXUS_ALLOC_CACHE_MB"]
    assert rows["NEXUS_ALLOC_CACHE_MB"].split()[1:3] == [default, "(default)"]
    as_json = json.loads(run_nexus("info", "--json", NEXUS_NUM_THREADS="3").stdout)
    knobs = {k["name"]: k for k in as_json["knobs"]}
    assert sorted(knobs) == sorted(config.names()) and knobs["NEXUS_NUM_THREADS"]["value"] == "3"


# ---- fused kernels under NEXUS_JIT_CXXFLAGS ------------------------------------------------------

FUSED_EXP = """
import json, numpy as np, nexus as nx
x = nx.tensor(np.array([0.0, 1.0, 10.0, -3.0], dtype=np.float32))
f = nx.jit(lambda x: nx.exp(x) * 2.0 - 1.0)
try:
    out = f(x).numpy().tolist()
except ValueError as e:
    print(json.dumps(dict(error=str(e)))); raise SystemExit(0)
print(json.dumps(dict(out=out, eager=(nx.exp(x) * 2.0 - 1.0).numpy().tolist(), **f.stats())))
"""


def run_fused_exp(tmp_path, flags):
    proc = subprocess.run([sys.executable, "-c", FUSED_EXP], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NEXUS_CACHE_DIR": str(tmp_path), "NEXUS_JIT": "1",
                               "NEXUS_JIT_CXXFLAGS": flags})
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not nx.info()["jit_enabled"], reason="needs a C++ compiler for the JIT")
def test_a_fused_exp_compiled_with_allowed_flags_is_right(tmp_path):
    r = run_fused_exp(tmp_path, "-O2")
    assert r["backend"] != "interpreter" and r["compiles"] >= 1
    assert r["out"] == r["eager"]  # bit for bit
    for x, y in zip([0.0, 1.0, 10.0, -3.0], r["out"]):
        assert math.isclose(y, 2 * math.exp(x) - 1, rel_tol=1e-6)


def test_a_fused_kernel_with_fast_math_flags_is_refused(tmp_path):
    r = run_fused_exp(tmp_path, "-O2 -ffast-math")
    assert "NEXUS_JIT_CXXFLAGS" in r["error"] and "-ffast-math is refused" in r["error"]
    assert not (tmp_path / "kernels").exists() or not list((tmp_path / "kernels").glob("*.so"))


def test_the_readme_documents_every_knob():
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    table = readme[readme.index("## Environment knobs"):readme.index("## Build options")]
    missing = [name for name, *_ in nx._C.knobs() if f"| `{name}` |" not in table]
    assert not missing, f"README's Environment knobs table lacks {missing}"
