#!/usr/bin/env bash
# The benchmarks under mpirun (built with MPI=1, or with mpicc present):
# ranks come from MPI, the preamble says so, every value checks, and the
# row count matches the size sweep. Skips where MPI is not installed.
set -euo pipefail
BUILD=${BUILD:-build}
tool=$BUILD/bin/all_reduce_perf
if ! command -v mpirun >/dev/null 2>&1; then
  echo "SKIP: mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev, then make MPI=1)"
  exit 0
fi
if ! ldd "$tool" 2>/dev/null | grep -q 'libmpi'; then
  echo "SKIP: $tool was built without MPI (rebuild with make MPI=1)"
  exit 0
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
BRAID_DEVICE=host timeout 300 mpirun --allow-run-as-root --oversubscribe -np 3 \
  -x BRAID_DEVICE "$tool" -b 8 -e 8K -f 4 -c 1 >"$out" 2>&1
grep -q '3 processes x 1 thread x 1 rank = 3 ranks (MPI)' "$out" || { echo "FAIL: preamble"; cat "$out"; exit 1; }
[[ $(grep -c '^#  Rank ' "$out") -eq 3 ]] || { echo "FAIL: one device line per rank"; exit 1; }
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float' "$out")
[[ $rows -eq 6 ]] || { echo "FAIL: $rows rows for 8..8K by 4 (want 6: 8 32 128 512 2K 8K)"; cat "$out"; exit 1; }
grep -q '# Out of bounds values : 0 OK' "$out" || { echo "FAIL: wrong values"; cat "$out"; exit 1; }
echo "PASS all_reduce_perf under mpirun -np 3"
