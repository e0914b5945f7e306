#!/usr/bin/env bash
# Is a lazy kernel load in one rank's thread what hangs ranks sharing the
# GPU as threads? sync_probe shows that a lazy load waits for a kernel
# spinning on another stream. all_reduce_perf -c 1 fills each rank's output
# with cudaMemset before every checked call, and a memset of a new size may
# load a runtime kernel for the first time while other ranks' collectives
# already spin on this one. 8 ranks as threads, Ring, 8 B and 64 KiB (the
# case that hung 2 of 2 at 694b21b), REPS times each:
#   default | CUDA_MODULE_LOADING=EAGER | -c 0 (no memsets between calls)
#   bash tests/gpu/lazy_diag.sh [BUILD] [REPS] [SECONDS]    (a GPU only)
B=${1:-gpucheck}
REPS=${2:-4}
LIMIT=${3:-200}
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* 2>/dev/null
declare -A hung runs
for rep in $(seq 1 "$REPS"); do
  for v in default eager nocheck; do
    ((SECONDS > LIMIT)) && break 2
    envs="BRAID_TIMEOUT=10 NCCL_DEBUG=WARN NCCL_ALGO=Ring"
    chk=1
    [[ $v == eager ]] && envs="$envs CUDA_MODULE_LOADING=EAGER"
    [[ $v == nocheck ]] && chk=0
    t0=$SECONDS
    env $envs timeout -k 2 40 "$B/bin/all_reduce_perf" -b 8 -e 64K -f 8192 -n 50 -w 5 \
      -c "$chk" -t 8 -g 1 >/tmp/lazy.txt 2>&1
    rc=$?
    runs[$v]=$((${runs[$v]:-0} + 1))
    [[ $rc != 0 ]] && hung[$v]=$((${hung[$v]:-0} + 1))
    echo "[$v-$rep] rc=$rc $((SECONDS - t0))s"
    grep -m 16 WARN /tmp/lazy.txt | cut -c1-260 | sed 's/^/    /'
  done
done
echo
echo "| setting | runs | failed |"
echo "| --- | ---: | ---: |"
for v in default eager nocheck; do echo "| $v | ${runs[$v]:-0} | ${hung[$v]:-0} |"; done
