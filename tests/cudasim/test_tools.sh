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
# Hardware queues shared between streams (BRAID_CUDASIM_CONNECTIONS=8,
# CUDA's default): 8 ranks as threads, each one's first launch after its
# host thread waited (a plan's upload, the input copies). Work waited for on
# a stream other than the rank's own queued behind a peer's copy-out and
# hung every run before uploads and the tool's copies moved to the rank's
# stream (docs/architecture.md).
BRAID_CUDASIM_CONNECTIONS=8 NCCL_ALGO=Ring BRAID_TIMEOUT=10 \
  check all_reduce_perf -b 8 -e 8 -t 8 -g 1 -c 1 -w 1 -n 2
# One thread driving two ranks, and ranks as processes (CUDA IPC windows).
check all_reduce_perf -b 8 -e 1M -f 16 -t 1 -g 2 -c 1 -w 1 -n 2 -d all -o all
check sendrecv_perf -b 8 -e 64K -f 16 -P 3 -c 1 -w 1 -n 2
check all_gather_perf -b 8 -e 64K -f 16 -P 2 -c 1 -w 1 -n 2

# Blocks per rank: by default half the SMs shared among the ranks on the
# GPU, at most 32 for a rank with a GPU of its own and 8 where ranks share
# one (132 SMs: 32 for 2 ranks on 2 GPUs, 8 for 2 or 8 ranks on one, 4 for
# 2 ranks of a 16-SM GPU); NCCL_MAX_CTAS above that. Each run says so at
# connect (the INFO lines of the limit and of the plans made up to it) and
# checks out; the 64 MiB all-reduce of 2 ranks on 2 GPUs runs its plan on
# all 32 blocks, the others stay at 1 MiB (the simulator is slow at 8
# ranks).
blocks() { # want, label, bytes, env..., -- args...
  local want=$1 label=$2 bytes=$3; shift 3
  local envs=()
  while [[ $1 != -- ]]; do envs+=("$1"); shift; done
  shift
  local dbg out rc log
  dbg=$(mktemp -d)
  out=$(env "${envs[@]}" NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
        NCCL_DEBUG_FILE="$dbg/log.%p" timeout 300 \
        "$bin/all_reduce_perf" -b "$bytes" -e "$bytes" -c 1 -w 0 -n 1 "$@" 2>&1)
  rc=$?
  log=$(cat "$dbg"/log.* 2>/dev/null)
  rm -rf "$dbg"
  if [[ $rc -ne 0 ]] || ! grep -q "all-reduce, Simple, $want blocks" <<<"$log" ||
     ! grep -q "up to $want blocks per rank" <<<"$log" ||
     ! awk -v b="$bytes" '$1 == b && $2 ~ /^[0-9]+$/ { ok = ($9 == "0" && $13 == "0") }
                          END { exit !ok }' <<<"$out"; then
    echo "FAIL $label: no checked $bytes-byte all-reduce with $want blocks per rank"
    grep -E "^ +$bytes |WARN|failure" <<<"$out" | head -4 | sed 's/^/  | /'
    grep -E 'blocks per rank|blocks,|WARN' <<<"$log" | head -4 | sed 's/^/  | /'
    fails=$((fails + 1))
  else
    echo "PASS $label: $bytes-byte all-reduce, up to $want blocks per rank"
  fi
}
blocks 32 "2 ranks on 2 GPUs, default" 67108864 BRAID_CUDASIM_DEVICES=2 -- -t 2 -g 1
blocks 8 "2 ranks on one GPU, default" 1048576 -- -t 2 -g 1
blocks 32 "2 ranks on one GPU, NCCL_MAX_CTAS=32" 1048576 NCCL_MAX_CTAS=32 -- -t 2 -g 1
blocks 4 "2 ranks, 16 SMs" 1048576 BRAID_CUDASIM_SMS=16 -- -t 2 -g 1
blocks 8 "8 ranks, default" 1048576 -- -t 8 -g 1
blocks 16 "8 ranks, NCCL_MAX_CTAS=16" 1048576 NCCL_MAX_CTAS=16 -- -t 8 -g 1

# Ranks in two processes on one GPU: without MPS every rank WARNs that the
# GPU takes turns between them, and names the fix; under MPS none does.
for mps in 0 1; do
  out=$(BRAID_CUDASIM_MPS=$mps NCCL_DEBUG=WARN timeout 300 \
        "$bin/all_reduce_perf" -b 8 -e 8 -P 2 -c 1 -w 0 -n 1 2>&1)
  rc=$?
  # The two processes print at once: count the ranks that warned.
  nwarn=$(grep -oE 'WARN rank [0-9]+: rank [0-9]+, in another process, shares GPU 0 without MPS' \
          <<<"$out" | sort -u | wc -l)
  want=$((mps == 0 ? 2 : 0))
  fix=$(grep -c 'start the MPS control daemon (nvidia-cuda-mps-control -d)' <<<"$out")
  if [[ $rc -ne 0 || $nwarn -ne $want || ($want -gt 0 && $fix -eq 0) ]]; then
    echo "FAIL MPS=$mps: $nwarn MPS warnings from 2 processes sharing the GPU, want $want (exit $rc)"
    grep -E 'WARN|failure' <<<"$out" | head -4 | sed 's/^/  | /'
    fails=$((fails + 1))
  else
    echo "PASS MPS=$mps: $nwarn MPS warnings from 2 processes sharing the GPU"
  fi
done

if [[ $fails -gt 0 ]]; then
  echo "FAIL: $fails benchmark run(s) failed"
  exit 1
fi
echo "PASS: every benchmark run checked out"
