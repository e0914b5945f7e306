#!/usr/bin/env bash
# Is a lazy kernel load in one rank's thread what hangs ranks sharing the
# GPU as threads? sync_probe shows that a lazy load waits for a kernel
# spinning on another stream. all_reduce_perf -c 1 fills each rank's output
# with cudaMemset before every checked call, and a memset of a new size may
# load a runtime kernel for the first time while other ranks' collectives
# already spin on this one. tests/gpu/shared_check.sh's case (8 ranks as
# threads, Ring, 8 B and 64 KiB, the case that hung 2 of 2 at 694b21b),
# once per line, REPS times each:
#   default | CUDA_MODULE_LOADING=EAGER | -c 0 (SHARED_CHECK=0: no memsets
#   between calls)
# Each line says how the run ended; a failed run's WARNs follow it.
#   bash tests/gpu/lazy_diag.sh [BUILD] [REPS] [SECONDS]    (a GPU only)
B=${1:-gpucheck}
REPS=${2:-4}
LIMIT=${3:-200}
CHECK=$(dirname "$0")/shared_check.sh
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* 2>/dev/null
out=$(mktemp "${TMPDIR:-/tmp}/braid-lazy.XXXXXX")
trap 'rm -f "$out"' EXIT
declare -A hung runs
for rep in $(seq 1 "$REPS"); do
  for v in default eager nocheck; do
    ((SECONDS > LIMIT)) && break 2
    envs=()
    [[ $v == eager ]] && envs=(CUDA_MODULE_LOADING=EAGER)
    [[ $v == nocheck ]] && envs=(SHARED_CHECK=0)
    env "${envs[@]}" bash "$CHECK" "$B/bin/all_reduce_perf" 1 >"$out" 2>&1
    rc=$?
    if ! grep -q '^run 1: ' "$out"; then # no GPU (77) or no benchmark
      cat "$out"
      exit "$rc"
    fi
    runs[$v]=$((${runs[$v]:-0} + 1))
    [[ $rc != 0 ]] && hung[$v]=$((${hung[$v]:-0} + 1))
    # shared_check.sh's "run 1: ..." line, then its indented WARN lines.
    echo "[$v-$rep] $(sed -n 's/^run 1: //p' "$out")"
    grep '^    ' "$out"
  done
done
echo
echo "| setting | runs | failed |"
echo "| --- | ---: | ---: |"
for v in default eager nocheck; do echo "| $v | ${runs[$v]:-0} | ${hung[$v]:-0} |"; done
