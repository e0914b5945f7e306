#!/usr/bin/env bash
# The benchmarks' CUDA paths on the CUDA simulator: device buffers, one
# stream per rank, event timing, -G graphs, several ranks sharing one GPU
# as threads (-t) and as processes (-P). Each run must exit 0, check every
# result (-c 1) with no wrong element, and report no out-of-bounds values.
# Needs `make cudasim` (binaries in $BUILD/cudasim/bin, or the flavour
# BRAID_CUDASIM_FLAVOUR names: cudasim-dev runs exec.cu's own kernels).
set -uo pipefail
BUILD=${BUILD:-build}
bin=$BUILD/${BRAID_CUDASIM_FLAVOUR:-cudasim}/bin
if [[ ! -x $bin/all_reduce_perf ]]; then
  echo "SKIP: $bin/all_reduce_perf is not built (make BUILD=$BUILD cudasim)"
  exit 77
fi
export BRAID_DEVICE=cuda
fails=0

check() { # tool, args...
  local tool=$1; shift
  local out rc
  out=$(timeout 300 "$bin/$tool" "$@" 2>&1)
  rc=$?
  # Data rows: a size column first; the #wrong columns are 9 and 13
  # (N/A where the tool does not check, e.g. in-place sendrecv).
  local rows bad
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' <<<"$out")
  bad=$(awk '/^ +[0-9]+ +[0-9]+ / { if (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "N/A")) print }' <<<"$out")
  if [[ $rc -ne 0 || $rows -eq 0 || -n $bad ]] ||
     ! grep -q '^# Out of bounds values : 0 OK' <<<"$out"; then
    echo "FAIL $tool $* (exit $rc, $rows rows)"
    [[ -n $bad ]] && echo "$bad" | head -5
    tail -n 15 <<<"$out" | sed 's/^/  | /'
    fails=$((fails + 1))
  else
    echo "PASS $tool $* ($rows rows)"
  fi
}

# Every collective, 3 ranks (not a power of two) sharing the GPU as threads.
for t in all_reduce all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv; do
  check ${t}_perf -b 8 -e 64K -f 32 -t 3 -g 1 -c 1 -w 1 -n 2
done
# Graphs: 4 ranks, each iteration replays a captured graph of 3 calls.
check all_reduce_perf -b 8 -e 4K -f 8 -t 4 -g 1 -c 1 -G 3 -w 1 -n 2
check reduce_scatter_perf -b 64 -e 4K -f 8 -t 2 -g 1 -c 1 -G 2 -w 1 -n 2
# One thread driving two ranks, and ranks as processes (CUDA IPC windows).
check all_reduce_perf -b 8 -e 1M -f 16 -t 1 -g 2 -c 1 -w 1 -n 2 -d all -o all
check sendrecv_perf -b 8 -e 64K -f 16 -P 3 -c 1 -w 1 -n 2
check all_gather_perf -b 8 -e 64K -f 16 -P 2 -c 1 -w 1 -n 2

# NCCL_MAX_CTAS above the default 8 blocks per rank: a 64 MiB all-reduce of
# 2 ranks sharing the GPU runs its plan on 32 blocks each (the tuner's
# INFO line says so) and checks out.
dbg=$(mktemp -d)
out=$(NCCL_MAX_CTAS=32 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
      NCCL_DEBUG_FILE="$dbg/log.%p" timeout 300 \
      "$bin/all_reduce_perf" -b 64M -e 64M -t 2 -g 1 -c 1 -w 0 -n 1 2>&1)
rc=$?
log=$(cat "$dbg"/log.* 2>/dev/null)
rm -rf "$dbg"
if [[ $rc -ne 0 ]] || ! grep -q 'plan: ring all-reduce, Simple, 32 blocks' <<<"$log" ||
   ! grep -q 'up to 32 blocks per rank' <<<"$log" ||
   ! awk '/^ +67108864 / { ok = ($9 == "0" && $13 == "0") } END { exit !ok }' <<<"$out"; then
  echo "FAIL NCCL_MAX_CTAS=32: no checked 64 MiB all-reduce on 32 blocks per rank"
  grep -E '^ +67108864|WARN|failure' <<<"$out" | head -4 | sed 's/^/  | /'
  grep -E 'blocks per rank|WARN' <<<"$log" | head -4 | sed 's/^/  | /'
  fails=$((fails + 1))
else
  echo "PASS NCCL_MAX_CTAS=32: 64 MiB all-reduce, 2 ranks, 32 blocks each"
fi

if [[ $fails -gt 0 ]]; then
  echo "FAIL: $fails benchmark run(s) failed"
  exit 1
fi
echo "PASS: every benchmark run checked out"
