#!/usr/bin/env bash
# The core and its C++ tests cross-compiled for aarch64 with Debian's g++-aarch64-linux-gnu against
# the scipy-openblas32 wheel for manylinux aarch64, as on an ARM machine, then run under
# qemu-aarch64 (Debian's qemu-user-static; zlib1g:arm64 for the wheel's libgfortran): proves the
# ARM build and its results from an x86 machine. apt-get installs what is missing (as root).
#
#   bash tools/ctest-aarch64.sh [--build-only] [BUILD_DIR]     # default: build/ctest-aarch64
set -euo pipefail
cd "$(dirname "$0")/.."
run=1
if [[ "${1:-}" == "--build-only" ]]; then
  run=0
  shift
fi
build=${1:-build/ctest-aarch64}
packages=()
command -v aarch64-linux-gnu-g++ >/dev/null || packages+=(g++-aarch64-linux-gnu)
if ((run)); then
  command -v qemu-aarch64-static >/dev/null || packages+=(qemu-user-static)
  dpkg -s zlib1g:arm64 >/dev/null 2>&1 || { dpkg --add-architecture arm64 && packages+=(zlib1g:arm64); }
fi
if ((${#packages[@]})); then
  apt-get update -q
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${packages[@]}"
fi
blas="$PWD/$build/openblas"
if [[ ! -f "$blas/scipy_openblas32/include/cblas.h" ]]; then
  rm -rf "$blas" && mkdir -p "$blas"
  python -m pip download -q --only-binary=:all: --no-deps --platform manylinux2014_aarch64 \
    "scipy-openblas32>=0.3.27,<0.4" -d "$blas/wheel"
  python -m zipfile -e "$blas"/wheel/scipy_openblas32-*.whl "$blas"
fi
args="-DCMAKE_TOOLCHAIN_FILE=$PWD/cmake/toolchains/aarch64-linux-gnu.cmake -DNEXUS_BLAS_ROOT=$blas/scipy_openblas32"
NEXUS_CTEST_CMAKE_ARGS="$args ${NEXUS_CTEST_CMAKE_ARGS:-}" NEXUS_CTEST_BUILD_ONLY=1 bash tools/ctest.sh "$build"
for f in "$build"/libnexus_core.so "$build"/tests/cpp/test_kernels; do
  readelf -h "$f" | grep -q "Machine:.*AArch64" || { echo "ctest-aarch64.sh: $f is not an AArch64 binary"; exit 1; }
  echo "ctest-aarch64.sh: built $f (AArch64)"
done
# The toolchain file made qemu-aarch64 CTest's emulator: ctest runs each test through it.
if ((run)); then
  cd "$build" && ctest --output-on-failure --parallel "$(nproc)"
fi
