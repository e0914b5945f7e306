#!/usr/bin/env bash
# Why do ranks sharing the GPU as threads of one process hang, now and
# then, in their first collective? The H200 run at e22eae3 (up to 32 blocks
# per rank) hung test_register, test_graph under compute-sanitizer (2
# ranks), all_reduce_perf -t 4 -g 1 and -t 8 -g 1 NCCL_ALGO=Ring and
# reduce_scatter_perf -t 1 -g 5, each in the first iteration of the
# process's first collective, with one rank's block never started ("holds
# 0"); about one run in six. The run at cc65b67 (8 blocks) passed them.
#   1. tests/gpu/sync_probe: which host calls let another stream's kernel
#      run beside a spinning one (a table; the 2026-11-26 H200 answer:
#      cudaFree, cudaFreeHost and a lazy kernel load wait for it; cudaMalloc,
#      cudaHostAlloc, copies, memsets, streams, events and cuMem do not),
#      and whether a stream made k streams after another queues behind its
#      kernel (hardware queues, CUDA_DEVICE_MAX_CONNECTIONS), at the default
#      connections;
#   2. the hung cases REPS times under each setting of SYNC_SETTINGS
#      (default: "default conn32 ctas32 ctas32conn32"): 8 blocks per rank
#      where ranks share the GPU, the same with 32 hardware queues
#      (CUDA_DEVICE_MAX_CONNECTIONS=32), NCCL_MAX_CTAS=32 (e22eae3's count),
#      and both; a count of hangs per setting. Every run under a 10 s
#      deadline; t8-ring is tests/gpu/shared_check.sh's case, run by it once.
#      SYNC_EXTRA=1 adds test_register and memcheck of test_graph.
#   bash tests/gpu/sync_diag.sh [BUILD] [OUT] [REPS]    (about 4 minutes at REPS=2)
B=${1:-gpucheck}
O=${2:-${OUT:-/tmp/sync-diag}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* "$B"/tests/*/* 2>/dev/null
exec > >(tee "$O/sync.md") 2>&1
echo "# sync_diag: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), build $B"
echo
timeout -k 2 90 "$B/tests/gpu/sync_probe" 1000
echo "sync_probe exit $?"
echo
run() { # name, lib ("" = as built), "env", limit, program, args...
  local name=$1 lib=$2 envs=$3 lim=$4; shift 4
  local t0=$SECONDS
  env BRAID_TIMEOUT=10 NCCL_DEBUG=WARN $envs ${lib:+LD_PRELOAD=$lib} timeout -k 2 "$lim" \
    stdbuf -oL -eL "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  local wrong
  wrong=$(awk '$2 ~ /^[0-9]+$/ && NF >= 12 {w += $9 + $13} END {print w + 0}' "$O/$name.txt")
  echo "[$name] rc=$rc $((SECONDS - t0))s wrong=$wrong env: ${envs:--} cmd: ${1##*/} ${*:2}"
  grep -E "WARN|FAIL|FAILED" "$O/$name.txt" | head -n 4 | cut -c1-300 | sed 's/^/    /'
}
ring() { # name, "env": shared_check.sh's 8-rank Ring case once, its output kept
  local name=$1 envs=$2 check
  : >"$O/$name.txt"
  # shellcheck disable=SC2086
  check=$(env $envs SHARED_LOG="$O/$name.txt" bash "$(dirname "$0")/shared_check.sh" \
            "$B/bin/all_reduce_perf" 1 2>&1)
  local line
  line=$(sed -n 's/^run 1: //p' <<<"$check")
  echo "[$name] ${line:-$(head -n 1 <<<"$check")} env: ${envs:--} (shared_check.sh)"
  grep '^    ' <<<"$check"
}
REPS=${3:-3}
SETTINGS=${SYNC_SETTINGS:-default conn32 ctas32 ctas32conn32}
declare -A hung
for rep in $(seq 1 "$REPS"); do
  for v in $SETTINGS; do
    envs=
    [[ $v == ctas32 ]] && envs="NCCL_MAX_CTAS=32"
    [[ $v == conn32 ]] && envs="CUDA_DEVICE_MAX_CONNECTIONS=32"
    [[ $v == ctas32conn32 ]] && envs="NCCL_MAX_CTAS=32 CUDA_DEVICE_MAX_CONNECTIONS=32"
    for c in t4 rs-g5 t8-ring; do
      case $c in
        t4) run "$c-$v-$rep" "" "$envs" 40 "$B/bin/all_reduce_perf" -b 16M -e 256M -f 16 -n 5 \
              -w 2 -c 1 -t 4 -g 1 ;;
        rs-g5) run "$c-$v-$rep" "" "$envs BRAID_DETERMINISTIC=0" 40 "$B/bin/reduce_scatter_perf" \
                 -b 1M -e 64M -f 4 -c 1 -w 1 -n 2 -t 1 -g 5 ;;
        t8-ring) ring "$c-$v-$rep" "$envs" ;;
      esac
      grep -q 'no progress for' "$O/$c-$v-$rep.txt" && hung[$v]=$((${hung[$v]:-0} + 1))
    done
  done
done
echo
echo "| setting | runs | hung |"
echo "| --- | ---: | ---: |"
for v in $SETTINGS; do echo "| $v | $((3 * REPS)) | ${hung[$v]:-0} |"; done
echo
[[ ${SYNC_EXTRA:-0} == 1 ]] || { echo "Raw outputs: $O/*.txt"; exit 0; }
run register "" "BRAID_DEVICE=cuda BRAID_TEST_QUICK=1" 50 "$B/tests/host/test_register"
san=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
run memcheck "" "BRAID_DEVICE=cuda BRAID_TEST_QUICK=1 BRAID_TEST_GRAPH_REPLAYS=2" 50 \
  "$san" --tool memcheck --error-exitcode 86 "$B/tests/gpu/test_graph"
grep -E "PASSED|FAILED|ERROR SUMMARY" "$O/register.txt" "$O/memcheck.txt" | head -n 8
echo "Raw outputs: $O/*.txt"
