#!/usr/bin/env bash
# The core cross-compiled for aarch64 with its C++ tests, run under qemu-aarch64 (-cpu max), so an
# x86 machine proves the ARM build and its NEON kernels. Needs Debian's
# g++-aarch64-linux-gnu and qemu-user-static (apt-get installs them when missing, as root).
# OpenBLAS comes from the scipy-openblas32 wheel for manylinux aarch64, as on an ARM machine.
#
#   bash tools/ctest-aarch64.sh [BUILD_DIR]     # default: build/ctest-aarch64
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build/ctest-aarch64}
if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64-static >/dev/null; then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends g++-aarch64-linux-gnu qemu-user-static
fi
blas="$PWD/$build/openblas"
if [[ ! -f "$blas/scipy_openblas32/include/cblas.h" ]]; then
  rm -rf "$blas" && mkdir -p "$blas"
  python -m pip download -q --only-binary=:all: --no-deps --platform manylinux2014_aarch64 \
    "scipy-openblas32>=0.3.27,<0.4" -d "$blas/wheel"
  python -m zipfile -e "$blas"/wheel/scipy_openblas32-*.whl "$blas"
fi
NEXUS_CTEST_CMAKE_ARGS="-DCMAKE_TOOLCHAIN_FILE=$PWD/cmake/toolchains/aarch64-linux-gnu.cmake \
-DNEXUS_BLAS_ROOT=$blas/scipy_openblas32 ${NEXUS_CTEST_CMAKE_ARGS:-}" bash tools/ctest.sh "$build"
