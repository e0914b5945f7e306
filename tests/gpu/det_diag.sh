#!/usr/bin/env bash
# Why did the deterministic case of test_collectives (5 ranks on one GPU
# driven by one thread: all-reduce, reduce-scatter and reduce of up to
# 1.2 MB in one group, BRAID_DETERMINISTIC=1) hang on an H200 when 1 MiB
# messages got 8 blocks per rank (commit 37d68e9), when it passed with 4
# (cc65b67)? The simulator passes both. One short device call, every run
# under a 10 s Braid deadline (a wait that never ends is reported: rank,
# block, op) with line-buffered output:
#   1. the test's own case, as built (expected to pass);
#   2. the deterministic reduce, all-reduce and reduce-scatter at 1 to 64 MiB
#      (8 blocks from 16 MiB, 16 from 32 MiB), 5 ranks as threads and as one
#      thread driving all five, with and without BRAID_DETERMINISTIC.
#   bash tests/gpu/det_diag.sh [BUILD] [OUT]        (about 2 minutes on a GPU)
B=${1:-gpucheck}
O=${2:-${OUT:-/tmp/det-diag}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* "$B"/tests/host/* 2>/dev/null
exec > >(tee "$O/det.md") 2>&1
echo "# det_diag: $(date -u +%FT%TZ), $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null), build $B"
run() { # name, "env", program, args...
  local name=$1 envs=$2; shift 2
  local t0=$SECONDS
  env BRAID_TIMEOUT=10 NCCL_DEBUG=WARN $envs timeout -k 2 40 stdbuf -oL -eL "$@" \
    >"$O/$name.txt" 2>&1
  local rc=$?
  echo "[$name] rc=$rc $((SECONDS - t0))s env: ${envs:--} cmd: ${*##*/}"
  grep -E "WARN|FAIL|wrong|^ +[0-9]+ +[0-9]+ " "$O/$name.txt" | head -n 12 | sed 's/^/    /'
}
run test BRAID_DEVICE=cuda\ BRAID_TEST_QUICK=1\ BRAID_TEST_CHILD=deterministic\ BRAID_DETERMINISTIC=1 \
  "$B/tests/host/test_collectives"
A=(-b 1M -e 64M -f 4 -c 1 -w 1 -n 2)
for det in 1 0; do
  for t in "-t 5 -g 1" "-t 1 -g 5"; do
    tag=$([[ $t == "-t 5 -g 1" ]] && echo t5 || echo g5)
    run "reduce-$tag-det$det" "BRAID_DETERMINISTIC=$det" "$B/bin/reduce_perf" "${A[@]}" $t -r 3
    run "allreduce-$tag-det$det" "BRAID_DETERMINISTIC=$det" "$B/bin/all_reduce_perf" "${A[@]}" $t
    run "rs-$tag-det$det" "BRAID_DETERMINISTIC=$det" "$B/bin/reduce_scatter_perf" "${A[@]}" $t
  done
done
# One suspect: a plan's upload during a group (a copy on a private stream)
# that the GPU queues behind a peer's spinning kernel when the streams
# outnumber the hardware queues (CUDA_DEVICE_MAX_CONNECTIONS, 8 by
# default), which the simulator does not model. With 32 queues that
# aliasing goes away: the one-thread cases again.
for det in 1; do
  run "reduce-g5-det$det-conn32" "BRAID_DETERMINISTIC=$det CUDA_DEVICE_MAX_CONNECTIONS=32" \
    "$B/bin/reduce_perf" "${A[@]}" -t 1 -g 5 -r 3
  run "allreduce-g5-det$det-conn32" "BRAID_DETERMINISTIC=$det CUDA_DEVICE_MAX_CONNECTIONS=32" \
    "$B/bin/all_reduce_perf" "${A[@]}" -t 1 -g 5
done
run test-conn32 BRAID_DEVICE=cuda\ BRAID_TEST_QUICK=1\ BRAID_TEST_CHILD=deterministic\ BRAID_DETERMINISTIC=1\ CUDA_DEVICE_MAX_CONNECTIONS=32 \
  "$B/tests/host/test_collectives"
echo "Raw outputs: $O/*.txt"
