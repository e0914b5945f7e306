#!/usr/bin/env bash
# Runs inside the VM that tests/rxe/run.sh boots (as root, this machine's
# root filesystem read-only, <out> writable): soft-RoCE on the loopback
# interface, then Braid's IB verbs net on it, host mode.
#
#  1. modprobe rdma_rxe; rdma link add rxe0 type rxe netdev lo; the port
#     must come up ACTIVE, with the IPv4-mapped RoCE v2 GID (::ffff:127.0.0.1)
#     that NCCL's automatic GID choice picks.
#  2. Collectives with every peer on the IB net: NCCL_P2P_DISABLE=1
#     NCCL_SHM_DISABLE=1 NCCL_NET=IB NCCL_IB_HCA=rxe0, NCCL_IB_GID_INDEX left
#     to the automatic choice. all_reduce_perf -P 2 and all_gather_perf -P 3
#     (ranks as processes, -c 1: every result checked exact), then unless
#     RXE_QUICK=1 the conformance programs tests/host/test_allreduce and
#     test_collectives (BRAID_TEST_QUICK=1). Each must say "Using network
#     IB", set up its port channels over "net IB", pick GID index 1, never
#     fall back to the socket net, and find no wrong value.
#  3. tests/unit/test_net_ib with BRAID_TEST_IB_REAL=rxe0: the net's own
#     cases on real verbs (those needing the verbs mock skip).
#  4. Bandwidth on rxe0, side by side: ib_write_bw (perftest; RC RDMA
#     writes of 256 KiB and 1 MiB), braid-netbw with BRAID_NETBW_NET=ib
#     (the IB net alone, 256 KiB messages, 8 in flight, as the proxy drives
#     it) and sendrecv_perf -P 2 over the IB net (the whole stack); and
#     ib_write_lat at 8 B beside braid-netbw's 8-byte ping-pong (the IB
#     net alone, 5 runs) and sendrecv_perf's time for 8 B. braid-netbw runs
#     with BRAID_IB_CTS_AHEAD=2 (the default) and 32 (one clear-to-send
#     write per receive, as NCCL), alternated.
#
#  5. Faults on real verbs: a rank killed mid-collective, and rxe0's port
#     going down (lo down); every rank left fails within the deadline,
#     naming the cause.
#
# RXE_PARTS picks the parts after step 1 (default "coll conformance net_ib
# bw fault"; RXE_QUICK=1 drops conformance).
# Writes <out>/guest.log (everything), <out>/summary.txt (the figures) and
# <out>/status (0 passed, 1 a check failed, 77 soft-RoCE could not be set up).
set -uo pipefail

OUT=${1:?usage: guest.sh <out-dir>}
BUILD=${BUILD:-build}
PARTS=" ${RXE_PARTS:-coll conformance net_ib bw fault} "
[[ ${RXE_QUICK:-0} == 1 ]] && PARTS=${PARTS/ conformance / }
want() { [[ $PARTS == *" $1 "* ]]; }
LOG=$OUT/guest.log
SUM=$OUT/summary.txt
exec > >(tee -a "$LOG") 2>&1
failed=0
pass() { echo "PASS  $*"; }
fail() { echo "FAIL  $*"; failed=1; }
finish() { echo "$1" >"$OUT/status"; sleep 1; exit 0; }

echo "== guest: $(uname -srm), $(nproc) vCPUs, $(awk '/MemTotal/ {print int($2/1024) " MiB"}' /proc/meminfo), clocksource $(cat /sys/devices/system/clocksource/clocksource0/current_clocksource 2>/dev/null || echo '?')"

# ---- 1. soft-RoCE ------------------------------------------------------------------------------
ip link set lo up
if ! modprobe rdma_rxe; then
  echo "SKIP: modprobe rdma_rxe failed: this kernel has no rdma_rxe module"
  finish 77
fi
if ! rdma link add rxe0 type rxe netdev lo; then
  echo "SKIP: 'rdma link add rxe0 type rxe netdev lo' failed"
  finish 77
fi
for _ in $(seq 50); do
  ibv_devinfo -d rxe0 2>/dev/null | grep -q 'state:.*PORT_ACTIVE' && break
  sleep 0.2
done
ibv_devinfo -d rxe0 | grep -E 'hca_id|transport|state|active_mtu|link_layer'
if ! ibv_devinfo -d rxe0 2>/dev/null | grep -q 'state:.*PORT_ACTIVE'; then
  echo "SKIP: rxe0 did not come up ACTIVE"
  finish 77
fi
gid1=$(cat /sys/class/infiniband/rxe0/ports/1/gids/1 2>/dev/null)
type1=$(cat /sys/class/infiniband/rxe0/ports/1/gid_attrs/types/1 2>/dev/null)
echo "rxe0 GID index 1: $gid1 ($type1)"
pass "soft-RoCE: rxe0 on lo is ACTIVE"
ulimit -l unlimited

export BRAID_DEVICE=host NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_NET=IB NCCL_IB_HCA=rxe0
export NCCL_SOCKET_IFNAME=lo NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET
unset NCCL_IB_GID_INDEX BRAID_IBVERBS_LIB

# Checks a run's log: exit status, IB net used by every rank, no socket
# fallback, the automatic GID choice, and (perf tools) no wrong value.
# name, nranks, rc, log, kind (perf|test)
check_run() {
  local name=$1 nranks=$2 rc=$3 log=$4 kind=$5 ok=1 n
  [[ $rc -eq 0 ]] || { echo "  $name exited $rc"; ok=0; }
  n=$(grep -c 'Using network IB' "$log")
  [[ $n -ge $nranks ]] || { echo "  $name: 'Using network IB' on $n ranks, want $nranks"; ok=0; }
  n=$(grep -c 'port channels over net IB' "$log")
  [[ $n -ge $nranks ]] || { echo "  $name: port channels over net IB on $n ranks, want $nranks"; ok=0; }
  if grep -qE 'Using network Socket|over net Socket' "$log"; then
    echo "  $name: some rank used the socket net"; ok=0
  fi
  grep -q 'NET/IB : rxe0:1 RoCE, GID index 1 (::ffff:127.0.0.1)' "$log" ||
    { echo "  $name: no 'NET/IB : rxe0:1 RoCE, GID index 1 (::ffff:127.0.0.1)' line"; ok=0; }
  if [[ $kind == perf ]]; then
    grep -q '# Out of bounds values : 0 OK' "$log" || { echo "  $name: values out of bounds"; ok=0; }
    # size count type redop root time algbw busbw #wrong time algbw busbw #wrong
    # (N/A: a tool that has no in-place variant)
    n=$(awk 'function bad_(w) { return w != "N/A" && w != "0" }
             $1 ~ /^[0-9]+$/ && NF >= 13 {rows++; if (bad_($9) || bad_($13)) bad++}
             END {print (rows > 0 ? bad + 0 : -1)}' "$log")
    [[ $n -eq 0 ]] || { echo "  $name: $n sizes with wrong values (or no result rows: -1)"; ok=0; }
  fi
  grep -E 'NET/IB : Using|Using network|port channels over net' "$log" |
    sed -E 's/^.*NCCL INFO (rank [0-9]+: )?//' | sort | uniq -c | sed 's/^/    /'
  if [[ $ok -eq 1 ]]; then pass "$name"; else
    tail -n 30 "$log" | sed 's/^/    | /'
    fail "$name"
  fi
}

# ---- 2. collectives over the IB net ------------------------------------------------------------
run_perf() { # name nranks program args...
  local name=$1 np=$2 prog=$3 log=$OUT/$1.log start=$SECONDS
  shift 3
  echo "== $name: $prog -P $np $*"
  timeout --kill-after=10 600 "$BUILD/bin/$prog" -P "$np" "$@" >"$log" 2>&1
  local rc=$?
  grep -E '^ +[0-9]+ ' "$log" | sed 's/^/    /'
  echo "  ($((SECONDS - start)) s)"
  check_run "$name" "$np" "$rc" "$log" perf
}
if want coll; then
  run_perf all_reduce_2ranks 2 all_reduce_perf -b 8 -e 1M -f 32 -n 2 -w 1 -c 1 -d all -o sum
  run_perf all_gather_3ranks 3 all_gather_perf -b 12 -e 768K -f 32 -n 2 -w 1 -c 1
  run_perf all_reduce_4ranks 4 all_reduce_perf -b 4 -e 256K -f 256 -n 1 -w 1 -c 1 -d float -o all
fi

if want conformance; then
  for t in test_allreduce test_collectives; do
    echo "== conformance: $t (BRAID_TEST_QUICK=1, every peer on the IB net)"
    start=$SECONDS
    BRAID_TEST_QUICK=1 timeout --kill-after=10 900 "$BUILD/tests/host/$t" >"$OUT/$t.log" 2>&1
    rc=$?
    grep -E '^(PASS|FAIL)' "$OUT/$t.log" | tail -n 3 | sed 's/^/    /'
    echo "  ($((SECONDS - start)) s)"
    check_run "conformance $t" 2 "$rc" "$OUT/$t.log" test
  done
fi

# ---- 3. the net's own test program on real verbs -----------------------------------------------
if want net_ib; then
echo "== tests/unit/test_net_ib on rxe0 (BRAID_TEST_IB_REAL=rxe0)"
start=$SECONDS
( unset NCCL_NET NCCL_IB_HCA NCCL_DEBUG NCCL_DEBUG_SUBSYS
  BRAID_TEST_IB_REAL=rxe0 timeout --kill-after=10 600 "$BUILD/tests/unit/test_net_ib" ) \
  >"$OUT/test_net_ib.log" 2>&1
rc=$?
grep -E '^\[ *(RUN|OK|SKIPPED|FAILED|PASSED|ERROR|LINE|=+) *\]|^skipped|^net_ib' "$OUT/test_net_ib.log" |
  sed 's/^/    /'
echo "  ($((SECONDS - start)) s)"
if [[ $rc -eq 0 ]] && grep -q 'PASSED' "$OUT/test_net_ib.log"; then pass "test_net_ib on real verbs"
else fail "test_net_ib on real verbs (exit $rc)"; fi
fi


# ---- 4. bandwidth: ib_write_bw against Braid's IB net -------------------------------------------
: >"$SUM"
if want bw; then
echo "== bandwidth on rxe0"
for size in 262144 1048576; do
  log=$OUT/ib_write_bw_$size.log
  timeout 120 ib_write_bw -d rxe0 -x 1 -s $size -n 200 -F -p 18515 >"$log.srv" 2>&1 &
  srv=$!
  sleep 2
  timeout 120 ib_write_bw -d rxe0 -x 1 -s $size -n 200 -F -p 18515 127.0.0.1 >"$log" 2>&1
  rc=$?
  wait $srv
  # #bytes #iterations BW peak[MB/sec] BW average[MB/sec] MsgRate[Mpps]
  bw=$(awk -v s=$size '$1 == s && NF >= 5 {print $4}' "$log" | tail -n 1)
  if [[ $rc -eq 0 && -n $bw ]]; then
    echo "ib_write_bw ${size} B: $bw MiB/s (perftest's MB/sec)" | tee -a "$SUM"
  else
    cat "$log" "$log.srv" | tail -n 20 | sed 's/^/    | /'
    fail "ib_write_bw -s $size (exit $rc)"
  fi
done

# Latency: ib_write_lat's average one-way time (half a ping-pong) for 8 B.
log=$OUT/ib_write_lat.log
timeout 120 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 -F -p 18516 >"$log.srv" 2>&1 &
srv=$!
sleep 2
timeout 120 ib_write_lat -d rxe0 -x 1 -s 8 -n 1000 -F -p 18516 127.0.0.1 >"$log" 2>&1
rc=$?
wait $srv
# #bytes #iterations t_min t_max t_typical t_avg t_stdev 99% 99.9% [usec]
lat=$(awk '$1 == 8 && NF >= 7 {print $6}' "$log" | tail -n 1)
if [[ $rc -eq 0 && -n $lat ]]; then
  echo "ib_write_lat 8 B: $lat us average (one way)" | tee -a "$SUM"
else
  cat "$log" "$log.srv" | tail -n 20 | sed 's/^/    | /'
  fail "ib_write_lat -s 8 (exit $rc)"
fi

hf=$OUT/netbw.handle
# The IB net alone, with BRAID_IB_CTS_AHEAD=$1: the default holds a
# receiver's clear-to-send entries while 2 sent ones wait for data and
# sends the held ones in one write; 32 sends one per receive, as NCCL.
netbw_bw() {
  ( export BRAID_NETBW_NET=ib BRAID_IB_CTS_AHEAD=$1; unset NCCL_DEBUG
    "$BUILD/bin/braid-netbw" recv "$hf" 64 3 >"$OUT/netbw.recv.$1" 2>&1 &
    r=$!
    "$BUILD/bin/braid-netbw" send "$hf" 64 3 >"$OUT/netbw.send.$1" 2>&1
    s=$?
    wait $r
    exit $(( $? | s )) )
  local rc=$?
  sed 's/^/    /' "$OUT/netbw.recv.$1"
  if [[ $rc -eq 0 ]]; then
    echo "braid-netbw (IB net alone, 256 KiB messages, 64 MiB x 3, CTS ahead $1): $(grep -oE '[0-9.]+ MiB/s' "$OUT/netbw.recv.$1" | tr '\n' ' ')" |
      tee -a "$SUM"
    pass "braid-netbw over the IB net (CTS ahead $1)"
  else
    tail -n 20 "$OUT/netbw.send.$1" | sed 's/^/    | /'
    fail "braid-netbw over the IB net (CTS ahead $1, exit $rc)"
  fi
}

# The IB net alone, 8-byte ping-pong (4 receives posted ahead, each posted
# again after its answer is sent, as the proxy does), beside ib_write_lat's
# one-way figure; $2 tells the runs apart.
netbw_lat() {
  ( export BRAID_NETBW_NET=ib BRAID_IB_CTS_AHEAD=$1; unset NCCL_DEBUG
    "$BUILD/bin/braid-netbw" pong "$hf.lat" 1000 >"$OUT/netlat.pong.$1.$2" 2>&1 &
    r=$!
    "$BUILD/bin/braid-netbw" ping "$hf.lat" 1000 >"$OUT/netlat.ping.$1.$2" 2>&1
    s=$?
    wait $r
    exit $(( $? | s )) )
  local rc=$?
  local netlat
  netlat=$(awk '/^ping 8 B:/ {print $4}' "$OUT/netlat.ping.$1.$2")
  if [[ $rc -eq 0 && -n $netlat ]]; then
    echo "braid-netbw ping (IB net alone, 8 B, CTS ahead $1, run $2): $netlat us average (one way)" | tee -a "$SUM"
    pass "braid-netbw ping-pong over the IB net (CTS ahead $1, run $2)"
  else
    tail -n 20 "$OUT/netlat.ping.$1.$2" "$OUT/netlat.pong.$1.$2" | sed 's/^/    | /'
    fail "braid-netbw ping-pong over the IB net (CTS ahead $1, run $2, exit $rc)"
  fi
}

netbw_bw 2
netbw_bw 32
for run in 1 2 3 4 5; do
  netbw_lat 2 $run
  netbw_lat 32 $run
done

run_perf sendrecv_small 2 sendrecv_perf -b 8 -e 8 -n 50 -w 5 -c 1
awk '$1 == 8 && NF >= 13 {printf "sendrecv_perf -P 2 8 B: %s us per call (out of place), %s (in place)\n", $6, $10}' \
  "$OUT/sendrecv_small.log" | tee -a "$SUM"
run_perf sendrecv_2ranks 2 sendrecv_perf -b 256K -e 16M -f 4 -n 5 -w 1 -c 1
# Each rank sends size bytes to the next and receives as many at once: the
# rate per direction is size / time, in MiB/s as perftest's "MB/sec".
awk '$1 ~ /^[0-9]+$/ && NF >= 13 {printf "sendrecv_perf -P 2 %s B: %.1f MiB/s per direction (out of place), %.1f (in place)\n", $1, $1 / $6 / 1.048576, $1 / $10 / 1.048576}' \
  "$OUT/sendrecv_2ranks.log" | tee -a "$SUM"
fi

# ---- 5. faults on real verbs -------------------------------------------------------------------
# A rank killed mid-collective (3 ranks: the two left must fail), and the
# port going down (lo down: rxe0's port follows its netdev and the kernel
# raises IBV_EVENT_PORT_ERR; 2 ranks, both must fail). Each run is a long
# all_reduce_perf over the IB net; the fault comes FAULT_AT seconds in.
# Every surviving rank must exit with an error (not be killed by the
# timeout) within BRAID_TIMEOUT + 15 s of the fault, its WARN naming the
# cause: the dead rank, or the port event.
FAULT_AT=8
fault_run() { # name nranks action pattern last_pattern
  local name=$1 np=$2 action=$3 pattern=$4 last=$5 log=$OUT/fault_$1.log pid main victim t0 rc
  echo "== fault: $name (all_reduce_perf -P $np, $action after $FAULT_AT s)"
  BRAID_TIMEOUT=20 NCCL_IB_TIMEOUT=12 NCCL_IB_RETRY_CNT=2 \
    timeout --kill-after=10 150 "$BUILD/bin/all_reduce_perf" -P "$np" -b 16M -e 16M -n 100000 \
    -w 1 -c 0 >"$log" 2>&1 &
  pid=$!
  sleep $FAULT_AT
  t0=$SECONDS
  case $action in
    kill)
      main=$(pgrep -P "$pid" -x all_reduce_perf | head -n 1)
      victim=$(pgrep -P "${main:-0}" -x all_reduce_perf | head -n 1)
      if [[ -z $victim ]]; then
        fail "fault $name: no rank process to kill (is the run alive? $(tail -n 3 "$log"))"
        kill -9 "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; return
      fi
      kill -9 "$victim" ;;
    lodown) ip link set lo down ;;
  esac
  wait "$pid"
  rc=$?
  [[ $action == lodown ]] && ip link set lo up
  local took=$((SECONDS - t0)) ok=1 n
  echo "  exit $rc, $took s after the fault"
  [[ $rc -ne 0 && $rc -ne 124 && $rc -ne 137 ]] || { echo "  $name: exit $rc (want an error, not 0 or the timeout's)"; ok=0; }
  ((took <= 35)) || { echo "  $name: $took s after the fault (want <= 35)"; ok=0; }
  # Ranks are processes: count the distinct pids (host:pid:tid) that WARNed the cause.
  n=$(grep -E 'NCCL WARN' "$log" | grep -E "$pattern" |
    sed -nE 's/^.* [^ :]+:([0-9]+):[0-9]+ \[.*$/\1/p' | sort -u | wc -l)
  local want=$np
  [[ $action == kill ]] && want=$((np - 1))
  ((n >= want)) || { echo "  $name: $n processes WARNed a line matching '$pattern' (want $want: every rank left)"; ok=0; }
  # What each rank's program got from ncclGetLastError (the perf tool prints it).
  n=$(grep -E 'Test NCCL failure' "$log" | grep -cE "$last")
  ((n >= want)) || { echo "  $name: $n ranks' last errors match '$last' (want $want)"; ok=0; }
  grep -E 'WARN' "$log" | sed -E 's/^.*NCCL WARN //' | cut -c1-300 | sort | uniq -c | head -n 8 |
    sed 's/^/    /'
  if [[ $ok -eq 1 ]]; then pass "fault $name: every rank left failed within the deadline naming the cause"
  else tail -n 20 "$log" | sed 's/^/    | /'; fail "fault $name"; fi
}
if want fault; then
  fault_run peer_killed 3 kill 'connection to rank [0-9]+|lost rank [0-9]+|rank [0-9]+ .*(is gone|left)' \
    'connection to rank [0-9]+|lost rank [0-9]+|rank [0-9]+ .*(is gone|left)'
  fault_run port_down 2 lodown 'IBV_EVENT_PORT_ERR' 'IBV_EVENT_PORT_ERR'
fi

echo "== summary"
cat "$SUM"
finish $failed
