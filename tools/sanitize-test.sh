#!/usr/bin/env bash
# Builds Nexus with NEXUS_SANITIZE=address,undefined into a throwaway virtual environment and runs
# the test suite under it. Python itself is not instrumented, so libasan is preloaded and leak
# detection (which would report the interpreter's own allocations) is off.
# Usage: tools/sanitize-test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
venv=$(mktemp -d "${TMPDIR:-/tmp}/nexus-asan.XXXXXX")
trap 'rm -rf "$venv"' EXIT
python3 -m venv "$venv"
"$venv/bin/pip" install -q ".[test]" \
  -Ccmake.define.NEXUS_SANITIZE=address,undefined -Ccmake.build-type=RelWithDebInfo \
  -Cbuild-dir=build/sanitize
asan=$("${CXX:-c++}" -print-file-name=libasan.so)
# libstdc++ too: when it is only dlopen'ed later (with the extension), ASan's __cxa_throw
# interceptor finds no real function and the first C++ exception aborts the process silently.
asan="$asan $("${CXX:-c++}" -print-file-name=libstdc++.so.6)"
echo "sanitize-test: preloading $asan"
# -p no:cacheprovider: the suite's .pytest_cache belongs to the normal run
cd tests && LD_PRELOAD="$asan" ASAN_OPTIONS=detect_leaks=0:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
  "$venv/bin/python" -m pytest -q -p no:cacheprovider -c ../pyproject.toml --rootdir .. "$@" .
