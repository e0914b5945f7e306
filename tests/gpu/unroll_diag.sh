#!/usr/bin/env bash
# Does a GPU block move more with more bytes in flight? One block per SM
# keeps 4 packs of 16 bytes in flight per thread (32 KiB per block) and
# waits one memory latency per loop iteration; at about 1 us that bounds a
# block near 30 GB/s, and the H200 measured 15-20 GB/s of memory traffic
# per block (docs/perf/gpu.md). scripts/gpu-check --prepare builds a
# variant library with 8 (variants/u8, make EXEC_UNROLL=8); this runs the
# same all-reduces with each library and prints algbw side by side.
#   bash tests/gpu/unroll_diag.sh [BUILD] [OUT]     (about 90 s on a GPU)
B=${1:-gpucheck}
O=${2:-${OUT:-/tmp/unroll-diag}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* 2>/dev/null
P=$B/bin/all_reduce_perf
exec > >(tee "$O/unroll.md") 2>&1
echo "# unroll_diag: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), build $B"
if [[ ! -f $B/variants/u8/libnccl.so.2 ]]; then
  echo "SKIP: $B/variants/u8/libnccl.so.2 is missing (scripts/gpu-check --prepare builds it)"
  exit 77
fi
echo
echo "| ranks | env | unroll 4: 16 MiB / 256 MiB GB/s (wrong) | unroll 8: 16 MiB / 256 MiB GB/s (wrong) |"
echo "| --- | --- | --- | --- |"
one() { # lib, name, env, args... -> "a16 / a256 (wrong)"
  local lib=$1 name=$2 envs=$3; shift 3
  env BRAID_TIMEOUT=10 $envs ${lib:+LD_PRELOAD=$lib} timeout -k 2 40 "$P" \
    -b 16M -e 256M -f 16 -n 5 -w 2 -c 1 "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  awk -v rc=$rc '$2 ~ /^[0-9]+$/ && ($1 == 16777216 || $1 == 268435456) {a[$1] = $7; w += $9}
       END {printf "%s / %s (%d)%s", a[16777216], a[268435456], w, rc ? " exit " rc : ""}' \
    "$O/$name.txt"
}
row() { # name, env, args...
  local name=$1 envs=$2; shift 2
  local x y
  x=$(one "" "$name-u4" "$envs" "$@")
  y=$(one "$PWD/$B/variants/u8/libnccl.so.2" "$name-u8" "$envs" "$@")
  echo "| $* | ${envs:--} | $x | $y |"
}
row t2 "" -t 2 -g 1
row t2-32 "NCCL_MAX_CTAS=32" -t 2 -g 1
row t2-ring "NCCL_ALGO=Ring" -t 2 -g 1
row t4 "" -t 4 -g 1
row t8 "" -t 8 -g 1
row t2-reg "" -t 2 -g 1 -R 1
echo
echo "Raw outputs: $O/*.txt"
