#!/usr/bin/env bash
# Builds Nexus with NEXUS_SANITIZE=address,undefined into a throwaway virtual environment and runs
# the test suite under it. Python itself is not instrumented, so libasan is preloaded and leak
# detection (which would report the interpreter's own allocations) is off.
# Usage: tools/sanitize-test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
# NEXUS_SANITIZE_VENV=dir keeps (and reuses) the environment, for debugging a failure.
if [ -n "${NEXUS_SANITIZE_VENV:-}" ]; then
  venv=$NEXUS_SANITIZE_VENV
else
  venv=$(mktemp -d "${TMPDIR:-/tmp}/nexus-asan.XXXXXX")
  trap 'rm -rf "$venv"' EXIT
fi
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
# NEXUS_MPI=OFF: the MPI extension is not built here, so the mpiexec tests skip (saying so); an
# uninstrumented MPI library and its launcher under a preloaded libasan would test MPICH, not us.
# NEXUS_CUDA=OFF: nvcc does not take the sanitizer flags, and the backend's host-side tests run
# in the normal build; here they skip, saying the backend is not built.
# -O1, as ASan's documentation suggests: under the sanitizers -O2 took twice as long to compile
# (conv_kernel.cpp: 160 s against 74 s), the longest step of .ci/run; -g keeps file:line in reports.
"$venv/bin/pip" install -q ".[test]" -Ccmake.define.NEXUS_MPI=OFF -Ccmake.define.NEXUS_CUDA=OFF \
  -Ccmake.define.NEXUS_SANITIZE=address,undefined -Ccmake.build-type=RelWithDebInfo \
  "-Ccmake.define.CMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g -DNDEBUG" -Cbuild-dir=build/sanitize
# libstdc++ is preloaded too: ASan intercepts __cxa_throw, and finds the real one only when
# libstdc++ is loaded before the interpreter (which does not link it) starts.
asan="$("${CXX:-c++}" -print-file-name=libasan.so) $("${CXX:-c++}" -print-file-name=libstdc++.so)"
echo "sanitize-test: preloading $asan"
# Under the preloaded libasan, libnvrtc no longer finds libnvrtc-builtins next to itself (its
# $ORIGIN lookup goes through ASan's dlopen): name the wheel's lib directory, so the PTX tests run
# here too.
nvrtc_lib=$("$venv/bin/python" -c 'import os, nvidia.cuda_nvrtc as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null || true)
if [ -n "$nvrtc_lib" ]; then export LD_LIBRARY_PATH="$nvrtc_lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"; fi
# -p no:cacheprovider: the suite's .pytest_cache belongs to the normal run. test_vectorized.py
# reads the compiler's vectorisation report of the kernel sources: no Nexus code runs in it, so
# it has nothing for a sanitizer to see (the normal run has it).
cd tests && LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:allocator_may_return_null=1 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -c ../pyproject.toml --rootdir .. \
  --ignore=python/test_vectorized.py "$@" .
