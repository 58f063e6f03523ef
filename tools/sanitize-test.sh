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
"$venv/bin/pip" install -q ".[test]" -Ccmake.define.NEXUS_MPI=OFF \
  -Ccmake.define.NEXUS_SANITIZE=address,undefined -Ccmake.build-type=RelWithDebInfo \
  -Cbuild-dir=build/sanitize
# libstdc++ is preloaded too: ASan intercepts __cxa_throw, and finds the real one only when
# libstdc++ is loaded before the interpreter (which does not link it) starts.
asan="$("${CXX:-c++}" -print-file-name=libasan.so) $("${CXX:-c++}" -print-file-name=libstdc++.so)"
echo "sanitize-test: preloading $asan"
# -p no:cacheprovider: the suite's .pytest_cache belongs to the normal run
cd tests && LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -c ../pyproject.toml --rootdir .. "$@" .
