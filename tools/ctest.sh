#!/usr/bin/env bash
# Builds the core alone (NEXUS_PYTHON=OFF: no Python extensions) with its C++ tests (tests/cpp) and
# runs them with CTest.
# Usage: tools/ctest.sh [BUILD_DIR]      (default build/ctest)
# NEXUS_CTEST_BUILD_ONLY=1: configure and build, run nothing.
# NEXUS_CTEST_CMAKE_ARGS: more configure arguments, split on spaces, e.g. for another target
# "-DCMAKE_TOOLCHAIN_FILE=... -DNEXUS_BLAS_ROOT=<its scipy_openblas32 directory>". Without
# NEXUS_BLAS_ROOT there, the scipy-openblas32 wheel of this Python is the BLAS.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ctest}
read -r -a extra <<<"${NEXUS_CTEST_CMAKE_ARGS:-}"
blas=()
if [[ " ${NEXUS_CTEST_CMAKE_ARGS:-}" != *" -DNEXUS_BLAS_ROOT="* ]]; then
  root=$(python -c 'import scipy_openblas32; print(scipy_openblas32.__path__[0])') ||
    { echo "ctest.sh: pip install scipy-openblas32, or pass -DNEXUS_BLAS_ROOT=... in NEXUS_CTEST_CMAKE_ARGS"; exit 1; }
  blas=("-DNEXUS_BLAS_ROOT=$root")
fi
# The compiler of the README's pip build: $CXX, else the one this Python was built with (what
# scikit-build-core hands CMake then), so that the tests build the core pip installs. In .ci/run
# that makes the two builds' commands the same, and ccache answers this one from pip's.
if [[ -z "${CXX:-}" ]]; then
  cxx=$(python -c 'import sysconfig; print((sysconfig.get_config_var("CXX") or "").split(" ")[0])' || true)
  if [[ -n "$cxx" ]] && command -v "$cxx" >/dev/null; then export CXX=$cxx; fi
fi
cmake -S . -B "$build" -DNEXUS_PYTHON=OFF -DNEXUS_BUILD_TESTS=ON -DCMAKE_BUILD_TYPE=Release "${blas[@]}" "${extra[@]}"
cmake --build "$build" --parallel "$(nproc)"
[[ -n "${NEXUS_CTEST_BUILD_ONLY:-}" ]] && exit 0  # tools/ctest-aarch64.sh: it checks the binaries, then runs ctest
cd "$build" && ctest --output-on-failure --parallel "$(nproc)"
