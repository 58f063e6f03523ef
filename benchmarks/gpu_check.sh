#!/usr/bin/env bash
# One script for a fresh GPU machine: builds and installs Nexus with its CUDA backend, runs the
# GPU tests, then benchmarks/gpu.py (Nexus vs PyTorch CUDA in the same run).
#
#   bash benchmarks/gpu_check.sh [WHEEL_DIR] [--quick]
#
# Works offline (air-gapped GPU nodes): nothing is downloaded. It uses the python3 that has
# PyTorch (PYTHON= to choose another) and the CUDA toolkit on PATH; wheels the build needs and
# such a node may lack (scipy-openblas32; mpich for the MPI extension) can be given as a folder:
#   pip download --only-binary=:all: --no-deps -d wheels scipy-openblas32 mpich  (elsewhere)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
WHEELS=${NEXUS_WHEELS:-}
if [ $# -gt 0 ] && [ -d "$1" ]; then WHEELS=$1; shift; fi
if [ -n "$WHEELS" ]; then
  "$PY" -m pip install -q --no-index --no-deps "$WHEELS"/*.whl
fi
command -v nvcc >/dev/null || { echo "gpu_check: nvcc is not on PATH: the CUDA backend needs the toolkit"; exit 1; }
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader || true
# This machine's architecture only (NEXUS_CUDA_ARCHS, from the first GPU's compute capability,
# with its PTX), and NEXUS_CUDA=ON: a build without the backend fails here instead of skipping
# every GPU test.
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .' || true)
archs=${NEXUS_CUDA_ARCHS:-${cc:-75-real;80-real;86-real;89-real;90}}
# Every stage runs even when one before it fails (a GPU lease is short: one run reports all of
# them); the script's exit status says whether any failed.
failed=()
stage() {
  local name=$1; shift
  echo "gpu_check: == $name"
  if ! "$@"; then failed+=("$name"); echo "gpu_check: $name FAILED"; fi
}
start=$(date +%s)
"$PY" -m pip install -q --no-build-isolation --no-deps -Cbuild-dir=build/gpu \
  -Ccmake.define.NEXUS_CUDA=ON -Ccmake.define.NEXUS_CUDA_ARCHS="$archs" .
echo "gpu_check: built and installed in $(( $(date +%s) - start )) s"
core=$(find build/gpu -name libnexus_core.so | head -1)
if [ -n "$core" ] && command -v readelf >/dev/null && ! readelf -d "$core" | grep -q 'libstdc++'; then
  echo "gpu_check: warning: ${CXX:-c++} linked libstdc++ statically; if a stage crashes, rerun with" \
       "CC=/usr/bin/gcc CXX=/usr/bin/g++ CUDAHOSTCXX=/usr/bin/g++ (README, Troubleshooting)"
fi
stage info "$PY" -m nexus.cli info
# Every backend kernel against the host kernels (tests/cuda/check_backend.cpp), then the GPU tests.
stage kernels bash -c 'cmake --build build/gpu --target nexus_cuda_check >/dev/null && build/gpu/nexus_cuda_check'
stage tests timeout 300 "$PY" -m pytest -q --tb=short -p no:cacheprovider -o addopts="" tests/gpu tests/python/test_device.py
stage benchmark timeout 200 "$PY" benchmarks/gpu.py "$@"
if [ ${#failed[@]} -gt 0 ]; then echo "gpu_check: failed: ${failed[*]}"; exit 1; fi
echo "gpu_check: all stages passed"
