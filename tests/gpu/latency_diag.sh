#!/usr/bin/env bash
# Where does the time of a small all-reduce go when ranks share one GPU?
# The H200 run of 2026-11-26 measured 22 us at 2 ranks and 71 us at 8 for
# 8 bytes (docs/perf/gpu.md), linear in the ranks, CUDA graphs included.
# One short device call: all_reduce_perf at 8 B .. 64 KiB under variants
# that each remove one suspect, and a table of the 8 B and 64 KiB times.
#   time  device time per call (CUDA events); cpu: host issue time (-C 1)
#   -G    CUDA graphs (no host issue per call)
#   -t 1 -g N   one thread drives every rank (no thread contention)
#   CUDA_DEVICE_MAX_CONNECTIONS=32   more hardware queues than streams
#   NCCL_PROTO / NCCL_ALGO   another plan
#   -P N  ranks as processes (time-sliced contexts)
#   bash tests/gpu/latency_diag.sh [BUILD] [OUT]      (about 90 s on a GPU)
B=${1:-gpucheck}
O=${2:-${OUT:-/tmp/latency-diag}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export CUDA_MODULE_LOADING=${CUDA_MODULE_LOADING:-LAZY}
chmod +x "$B"/bin/* 2>/dev/null
P=$B/bin/all_reduce_perf
COMMON=(-b 8 -e 64K -f 8192 -n 200 -w 20 -c 0)
exec > >(tee "$O/latency.md") 2>&1
echo "# latency_diag: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), build $B"
echo
echo "| run | args | env | 8 B (us) | 64 KiB (us) | exit |"
echo "| --- | --- | --- | ---: | ---: | ---: |"
row() { # name, "env", args...
  local name=$1 envs=$2; shift 2
  env BRAID_TIMEOUT=10 $envs timeout -k 2 40 "$P" "${COMMON[@]}" "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  local t8 t64
  t8=$(awk '$1 == 8 && $2 ~ /^[0-9]+$/ {print $6; exit}' "$O/$name.txt")
  t64=$(awk '$1 == 65536 && $2 ~ /^[0-9]+$/ {print $6; exit}' "$O/$name.txt")
  echo "| $name | $* | ${envs:--} | ${t8:-?} | ${t64:-?} | $rc |"
}
for n in 2 8; do
  row "t$n" "" -t "$n" -g 1
  row "t$n-cpu" "" -t "$n" -g 1 -C 1
  row "t$n-graph" "" -t "$n" -g 1 -G 10
  row "g$n" "" -t 1 -g "$n"
  row "t$n-conn32" "CUDA_DEVICE_MAX_CONNECTIONS=32" -t "$n" -g 1
  row "t$n-simple" "NCCL_PROTO=Simple" -t "$n" -g 1
  row "t$n-ring" "NCCL_ALGO=Ring" -t "$n" -g 1
done
row "t4" "" -t 4 -g 1
row "p2" "" -P 2
row "t1" "" -t 1 -g 1
echo
echo "Raw outputs: $O/*.txt"
