#!/usr/bin/env bash
# The host-mode correctness matrix on the GPU: tests/host/test_allreduce,
# tests/host/test_collectives and tests/host/test_register (registered
# buffers written in place: ncclMemAlloc's cuMem blocks exported to the
# other ranks) with BRAID_DEVICE=cuda. The first two run every
# one of its configurations (algorithm x protocol, tuner, tiny buffers,
# deterministic mode), with ranks as threads driven by one thread, as
# threads with one rank each and as processes, 1, 2, 4 and 8 ranks sharing
# one GPU, each rank on its own stream, checked against the CPU reference
# of tests/common/coll_ref.c.
#
#   BUILD=build tests/gpu/matrix.sh
# Environment: BUILD (build dir), MATRIX_BIN_DIR (where the programs
# are; default $BUILD/tests/host), MATRIX_TIMEOUT (seconds per program,
# default 1500), BRAID_TEST_QUICK=1 (the reduced matrix), MATRIX_PROGS
# (the programs to run, default "test_allreduce test_collectives
# test_register").
# Exits 77 after "SKIP: ..." when no GPU or no CUDA build is there; a skip
# is never a pass.
set -uo pipefail

BUILD=${BUILD:-build}
BIN_DIR=${MATRIX_BIN_DIR:-$BUILD/tests/host}
LIMIT=${MATRIX_TIMEOUT:-1500}

if [[ ${CUDA:-1} != 1 ]]; then
  echo "SKIP: matrix: this build has no CUDA (CUDA=0)"
  exit 77
fi

failed=0
skipped=0
ran=0
for prog in ${MATRIX_PROGS:-test_allreduce test_collectives test_register}; do
  bin=$BIN_DIR/$prog
  if [[ ! -x $bin ]]; then
    echo "FAIL: matrix: $bin is missing; build it first (make BUILD=$BUILD tests)"
    failed=$((failed + 1))
    continue
  fi
  echo "-- $prog, BRAID_DEVICE=cuda${BRAID_TEST_QUICK:+, BRAID_TEST_QUICK=$BRAID_TEST_QUICK}"
  start=$SECONDS
  BRAID_DEVICE=cuda timeout --kill-after=10 "$LIMIT" "$bin"
  rc=$?
  secs=$((SECONDS - start))
  case $rc in
    0) echo "PASS: matrix: $prog in CUDA mode (${secs}s)"; ran=$((ran + 1)) ;;
    77) echo "SKIP: matrix: $prog skipped (see its SKIP line above)"; skipped=$((skipped + 1)) ;;
    124) echo "FAIL: matrix: $prog timed out after ${LIMIT}s (MATRIX_TIMEOUT)"; failed=$((failed + 1)) ;;
    *) echo "FAIL: matrix: $prog exited $rc (${secs}s)"; failed=$((failed + 1)) ;;
  esac
done

if [[ $failed -gt 0 ]]; then
  exit 1
fi
if [[ $ran -eq 0 ]]; then
  echo "SKIP: matrix: nothing ran in CUDA mode ($skipped program(s) skipped)"
  exit 77
fi
exit 0
