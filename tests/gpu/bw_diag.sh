#!/usr/bin/env bash
# Why is large all-reduce slow when ranks share one GPU (2026-11-26 H200:
# 37.5 GB/s at 2 ranks, 24.7 at 4, 17.0 at 8, against 527/264/132 GB/s
# targets)? One short device call, three parts:
#   1. all_reduce_perf at 16 MiB and 256 MiB (algbw) under variants: blocks
#      per rank (NCCL_MAX_CTAS), algorithm, protocol, scratch size
#      (NCCL_BUFFSIZE), registered buffers (-R 1: zero-copy), one driving
#      thread (-g N);
#   2. ranks as processes (-P 2) with and without MPS (processes on one GPU
#      without MPS get time-sliced contexts: kernels that wait on each other
#      only meet at a context switch);
#   3. compute-sanitizer memcheck on test_graph with a short Braid deadline,
#      so a wait that never ends reports where it waits.
#   bash tests/gpu/bw_diag.sh [BUILD] [OUT]         (about 150 s on a GPU)
B=${1:-gpucheck}
O=${2:-${OUT:-/tmp/bw-diag}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* "$B"/tests/gpu/* 2>/dev/null
P=$B/bin/all_reduce_perf
COMMON=(-b 16M -e 256M -f 16 -n 5 -w 2 -c 1)
exec > >(tee "$O/bw.md") 2>&1
echo "# bw_diag: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), build $B"
echo
echo "| run | args | env | 16 MiB GB/s | 256 MiB GB/s | 256 MiB us | wrong | exit | s |"
echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |"
row() { # name, "env", args...
  local name=$1 envs=$2; shift 2
  local t0=$SECONDS
  env BRAID_TIMEOUT=10 $envs timeout -k 2 30 "$P" "${COMMON[@]}" "$@" >"$O/$name.txt" 2>&1
  local rc=$?
  local a16 a256 t256 wr
  a16=$(awk '$1 == 16777216 && $2 ~ /^[0-9]+$/ {print $7; exit}' "$O/$name.txt")
  a256=$(awk '$1 == 268435456 && $2 ~ /^[0-9]+$/ {print $7; exit}' "$O/$name.txt")
  t256=$(awk '$1 == 268435456 && $2 ~ /^[0-9]+$/ {print $6; exit}' "$O/$name.txt")
  wr=$(awk '$1 == 268435456 && $2 ~ /^[0-9]+$/ {print $9; exit}' "$O/$name.txt")
  echo "| $name | $* | ${envs:--} | ${a16:-?} | ${a256:-?} | ${t256:-?} | ${wr:-?} | $rc | $((SECONDS - t0)) |"
}
for c in 8 16 32 64; do row "t2-ctas$c" "NCCL_MAX_CTAS=$c" -t 2 -g 1; done
for a in Ring OneShot TwoShot; do row "t2-$a-32" "NCCL_MAX_CTAS=32 NCCL_ALGO=$a" -t 2 -g 1; done
row "t2-simple-32" "NCCL_MAX_CTAS=32 NCCL_PROTO=Simple" -t 2 -g 1
row "t2-buf16M-32" "NCCL_MAX_CTAS=32 NCCL_BUFFSIZE=16777216" -t 2 -g 1
row "t2-reg" "" -t 2 -g 1 -R 1
row "t2-reg-32" "NCCL_MAX_CTAS=32" -t 2 -g 1 -R 1
row "g2-32" "NCCL_MAX_CTAS=32" -t 1 -g 2
for c in 8 16 32; do row "t4-ctas$c" "NCCL_MAX_CTAS=$c" -t 4 -g 1; done
row "t4-reg-16" "NCCL_MAX_CTAS=16" -t 4 -g 1 -R 1
for c in 8 16; do row "t8-ctas$c" "NCCL_MAX_CTAS=$c" -t 8 -g 1; done
row "t1-ctas8" "NCCL_MAX_CTAS=8" -t 1 -g 1
row "t1-ctas32" "NCCL_MAX_CTAS=32" -t 1 -g 1
echo
echo "## processes sharing the GPU"
echo
lat() { # name, "env", args...
  local name=$1 envs=$2; shift 2
  local t0=$SECONDS
  env BRAID_TIMEOUT=10 $envs timeout -k 2 30 "$P" -b 8 -e 64M -f 8192 -n 20 -w 3 -c 0 "$@" \
    >"$O/$name.txt" 2>&1
  echo "[$name] rc=$? $((SECONDS - t0))s env: ${envs:--}"
  awk '$2 ~ /^[0-9]+$/ {print "    " $1 " B: " $6 " us, " $7 " GB/s"}' "$O/$name.txt"
}
lat p2 "" -P 2
MPS=$(command -v nvidia-cuda-mps-control)
if [[ -n $MPS ]]; then
  export CUDA_MPS_PIPE_DIRECTORY=/tmp/braid-mps/pipe CUDA_MPS_LOG_DIRECTORY=/tmp/braid-mps/log
  mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
  timeout 10 "$MPS" -d; echo "[mps] control daemon rc=$?"
  sleep 1
  lat p2-mps "" -P 2
  lat t2-mps "" -t 2 -g 1
  echo quit | timeout 10 "$MPS"; sleep 1
  tail -n 5 $CUDA_MPS_LOG_DIRECTORY/control.log 2>/dev/null | sed 's/^/    mps: /'
  unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
else
  echo "[mps] nvidia-cuda-mps-control not found"
fi
echo
echo "## memcheck, test_graph, Braid deadline 15 s"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
t0=$SECONDS
env BRAID_DEVICE=cuda BRAID_TEST_QUICK=1 BRAID_TIMEOUT=15 BRAID_TEST_GRAPH_REPLAYS=2 \
  timeout -k 2 50 "$SAN" --tool memcheck "$B/tests/gpu/test_graph" >"$O/memcheck.txt" 2>&1
echo "[memcheck] rc=$? $((SECONDS - t0))s"
grep -v "^\[New" "$O/memcheck.txt" | tail -n 40 | sed 's/^/    /'
echo
echo "Raw outputs: $O/*.txt"
