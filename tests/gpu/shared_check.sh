#!/usr/bin/env bash
# Ranks that are threads sharing one GPU, repeated: 8 ranks, NCCL_ALGO=Ring
# (LL), 8 B and 64 KiB, checked, the case that hung about one run in four
# on the H100 at fce17ef (docs/perf/gpu.md: a rank's host thread waited on
# another stream, stuck in a hardware queue behind a peer's queued
# copy-out). REPS runs, each under a 10 s Braid deadline; a failed run's
# WARNs (each stuck rank's, with its launch epoch) are printed.
#   bash tests/gpu/shared_check.sh PERF_BINARY [REPS]
# Environment: SHARED_ARGS replaces the iteration counts (the rehearsal
# runs fewer); SHARED_CHECK=0 runs the benchmark with -c 0 (no result
# checks, so no memsets or copies between calls; wrong values are then not
# counted); SHARED_LOG=FILE appends each run's whole output to FILE; any
# other variable (CUDA_MODULE_LOADING, CUDA_DEVICE_MAX_CONNECTIONS,
# NCCL_MAX_CTAS ...) reaches the benchmark as it is (tests/gpu/lazy_diag.sh
# and sync_diag.sh run their variants so). Exit 0 when every run passed, 1
# otherwise, 77 (SKIP) when no GPU is visible.
set -uo pipefail
perf=${1:?usage: shared_check.sh PERF_BINARY [REPS]}
reps=${2:-12}
if [[ ! -x $perf ]]; then
  echo "FAIL: shared: $perf is missing or not executable"
  exit 1
fi
args=${SHARED_ARGS:--n 50 -w 5}
check=${SHARED_CHECK:-1}
failed=0
out=$(mktemp "${TMPDIR:-/tmp}/braid-shared.XXXXXX")
trap 'rm -f "$out"' EXIT
for i in $(seq 1 "$reps"); do
  t0=$SECONDS
  # shellcheck disable=SC2086
  env BRAID_DEVICE=cuda BRAID_TIMEOUT=10 NCCL_DEBUG=WARN NCCL_ALGO=Ring \
    timeout -k 5 60 "$perf" -b 8 -e 64K -f 8192 $args -c "$check" -t 8 -g 1 >"$out" 2>&1
  rc=$?
  [[ -n ${SHARED_LOG:-} ]] && cat "$out" >>"$SHARED_LOG"
  if [[ $i == 1 && $rc != 0 ]] && grep -q 'no GPU is usable' "$out"; then
    echo "SKIP: shared: no GPU visible ($(grep -m1 'no GPU is usable' "$out" | cut -c1-200))"
    exit 77
  fi
  wrong=$(awk '$2 ~ /^[0-9]+$/ && NF >= 12 {w += $9 + $13} END {print w + 0}' "$out")
  if [[ $rc != 0 || $wrong != 0 ]]; then
    failed=$((failed + 1))
    echo "run $i: exit $rc, $wrong wrong values, $((SECONDS - t0))s"
    grep -m 16 -E 'WARN|FAIL' "$out" | cut -c1-300 | sed 's/^/    /'
  else
    echo "run $i: ok ($((SECONDS - t0))s)"
  fi
done
if ((failed == 0)); then
  echo "PASS: shared: $reps runs of 8 ranks as threads on one GPU (Ring, 8 B and 64 KiB), none failed"
  exit 0
fi
echo "FAIL: shared: $failed of $reps runs of 8 ranks as threads on one GPU failed"
exit 1
