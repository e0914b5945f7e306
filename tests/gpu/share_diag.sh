#!/usr/bin/env bash
# Why do ranks that are threads sharing one GPU hang on it (gpu-check,
# 2026-11-26: every -t N -g 1 run and the one-thread matrix timed out)?
# One short device call: all_reduce_perf with 2 thread-ranks on the GPU
# under CUDA's eager module loading, without cuMem (cudaMalloc + peer
# access), both, and as built; then the as-built run again with every
# host thread's stack read by cuda-gdb while it hangs.
#   bash tests/gpu/share_diag.sh [BUILD] [OUT]
B=${1:-gpucheck}
O=${2:-${OUT:-/tmp/share-diag}}
mkdir -p "$O"
export LD_LIBRARY_PATH=$PWD/$B/deps${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
chmod +x "$B"/bin/* 2>/dev/null
P=$B/bin/all_reduce_perf
ARGS="-b 8 -e 8 -n 3 -w 1 -c 1 -t 2 -g 1"
exec > >(tee "$O/diag.txt") 2>&1
echo "# share_diag: $(date -u +%FT%TZ) $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"
run() { # name, env...
  local name=$1; shift
  local t0=$SECONDS
  env BRAID_TIMEOUT=6 "$@" timeout -k 2 20 "$P" $ARGS >"$O/$name.log" 2>&1
  local rc=$?
  echo "[$name] rc=$rc $((SECONDS - t0))s env: $*"
  grep -E "^ +8 |failure|error|WARN" "$O/$name.log" | head -n 4 | sed 's/^/    /'
}
run eager CUDA_MODULE_LOADING=EAGER
run nocumem NCCL_CUMEM_ENABLE=0
run eager-nocumem CUDA_MODULE_LOADING=EAGER NCCL_CUMEM_ENABLE=0
run asbuilt
run lazy CUDA_MODULE_LOADING=LAZY
GDB=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -n 1)
echo "# backtraces of the as-built run while it hangs (cuda-gdb: ${GDB:-none})"
env BRAID_TIMEOUT=25 NCCL_DEBUG=INFO timeout -k 2 40 "$P" $ARGS >"$O/bt-run.log" 2>&1 &
pid=$!
sleep 5
pp=$(pgrep -x all_reduce_perf | head -n 1)
for t in /proc/$pp/task/*; do
  echo "task ${t##*/} $(cat $t/comm) wchan=$(cat $t/wchan 2>/dev/null) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)"
done
if [[ -n $GDB && -n $pp ]]; then
  timeout 60 "$GDB" -p "$pp" -batch -ex "info threads" -ex "thread apply all bt 25" 2>&1 |
    grep -v "^\[New\|^warning" | head -n 300
fi
wait $pid
echo "[bt-run] rc=$?"
tail -n 30 "$O/bt-run.log"
