#!/usr/bin/env bash
# Nodes as namespaces: 2 and 3 "nodes" of 2 ranks each on one machine, each
# node a network, mount and UTS namespace (unshare -n -m -u) with its own
# hostname and a private tmpfs on /dev/shm, so ranks of one node share
# memory (one process per rank) and ranks of different nodes share nothing
# but the socket net. 2 nodes are one veth pair, 3 nodes hang off a bridge
# in a fourth namespace. Ranks bootstrap through NCCL_COMM_ID on node 0's
# veth address with NCCL_SOCKET_IFNAME naming the veth.
#
#   1. host mode: every collective (all-reduce, all-gather, reduce-scatter,
#      broadcast, reduce, all-to-all, send/recv) on 2x2 and 3x2, the
#      benchmarks of $BUILD/bin with -c 1 (every element checked exactly
#      against the CPU reference; the processes meet through a world file
#      for the harness only);
#   2. CUDA mode on the CUDA simulator ($BUILD/cudasim/bin and
#      $BUILD/cudasim-dev/bin, make cudasim): all-reduce and all-gather on
#      2x2 and 3x2, two simulated GPUs per node;
#   3. faults on 3 nodes ($BUILD/tests/host/test_init_node): a node's link
#      taken down while the ranks run all-reduces, and a node whose
#      NCCL_SOCKET_IFNAME matches no interface: every rank fails within the
#      deadline, none hangs; after the link went down every rank reports
#      ncclRemoteError naming the network connection that died; with the
#      bad interface every rank names node 2's first rank and its
#      NCCL_SOCKET_IFNAME (the window records carry each rank's net state;
#      a rank that a ring neighbour left first gets it in that neighbour's
#      leave message, "rank q ... left: <q's error>").
#
# Needs root (namespaces, mounts, veths, a bridge) and iproute2; where they
# are not permitted it says so and exits 77 (skipped).
# Environment: BUILD (build directory, default "build"); NETNS_SIM=0 skips
# part 2; NETNS_ONLY=faults runs part 3 alone, NETNS_ONLY=badif only its
# bad-interface case (both need only $NODEBIN); KEEP_LOGS=dir keeps the
# logs there.
set -uo pipefail

BUILD=${BUILD:-build}
SKIP=77
BIN=$BUILD/bin
NODEBIN=$BUILD/tests/host/test_init_node

# Skips, unless something already failed.
skip() {
  echo "SKIP: $*"
  [[ ${status:-0} -ne 0 ]] && exit 1
  exit $SKIP
}

ONLY=${NETNS_ONLY:-}
[[ -z $ONLY || $ONLY == faults || $ONLY == badif ]] ||
  { echo "FAIL: NETNS_ONLY=$ONLY: use faults or badif"; exit 1; }
[[ -x $NODEBIN && (-n $ONLY || -x $BIN/all_reduce_perf) ]] ||
  skip "$BIN/all_reduce_perf or $NODEBIN is not built (make BUILD=$BUILD tools tests)"
for c in ip unshare nsenter mount; do
  command -v $c >/dev/null 2>&1 || skip "the $c command is not installed"
done
if ! unshare -n -m -u true 2>/dev/null; then
  skip "creating network and mount namespaces is not permitted here (unshare -n -m -u failed; needs root)"
fi

work=$(mktemp -d /tmp/brd-netns.XXXXXX)
holders=() # pids of the processes that hold the namespaces open

cleanup() {
  local p
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${holders[@]}"; do wait "$p" 2>/dev/null; done
  if [[ -n ${KEEP_LOGS:-} ]]; then mkdir -p "$KEEP_LOGS" && cp -r "$work"/. "$KEEP_LOGS"/; fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

# ---- the nodes ---------------------------------------------------------------

# node_pid[i]: a process inside node i's namespaces; sw_pid: the bridge's.
node_pid=()
sw_pid=

# Starts node $1: its namespaces, hostname brd-node$1, a private /dev/shm,
# loopback up. Waits until it is ready.
node_start() {
  local i=$1
  unshare -n -m -u sh -c "mount -t tmpfs -o size=4g,mode=1777 brd-shm$i /dev/shm &&
    echo brd-node$i >/proc/sys/kernel/hostname && ip link set lo up && : >'$work/up$i' && exec sleep 240" \
    >"$work/node$i.log" 2>&1 &
  node_pid[$i]=$!
  holders+=($!)
  for _ in $(seq 100); do
    [[ -e $work/up$i ]] && return 0
    kill -0 "${node_pid[$i]}" 2>/dev/null || break
    sleep 0.05
  done
  skip "cannot set up node $i (a private /dev/shm in a mount namespace): $(cat "$work/node$i.log")"
}

in_node() { # node, command...
  local i=$1
  shift
  nsenter -t "${node_pid[$i]}" -n -m -u --wd="$PWD" "$@"
}

addr() { echo "10.78.0.$(($1 + 1))"; }

# Brings up $1 nodes joined by veths (bv<i> in node i, address addr i):
# two nodes are one veth pair, more hang off a bridge in a namespace of
# its own.
nodes_up() {
  local n=$1 i
  for ((i = 0; i < n; i++)); do node_start "$i"; done
  if [[ $n -eq 2 ]]; then
    in_node 0 ip link add bv0 type veth peer name bv1 netns "${node_pid[1]}" ||
      skip "cannot create a veth pair between namespaces here"
  else
    # The bridge's namespace must exist before anything enters it (else
    # the bridge would land in this namespace).
    unshare -n sh -c ": >'$work/up-sw' && exec sleep 240" &
    sw_pid=$!
    holders+=($!)
    for _ in $(seq 100); do [[ -e $work/up-sw ]] && break; sleep 0.05; done
    [[ -e $work/up-sw ]] || skip "cannot create the bridge's network namespace"
    nsenter -t "$sw_pid" -n ip link add br0 type bridge forward_delay 0 ||
      skip "cannot create a bridge in a namespace here"
    nsenter -t "$sw_pid" -n ip link set br0 up
    for ((i = 0; i < n; i++)); do
      nsenter -t "$sw_pid" -n ip link add "sw$i" type veth peer name "bv$i" netns "${node_pid[$i]}" ||
        skip "cannot create a veth pair between namespaces here"
      nsenter -t "$sw_pid" -n ip link set "sw$i" master br0 up
    done
  fi
  for ((i = 0; i < n; i++)); do
    in_node "$i" ip addr add "$(addr "$i")/24" dev "bv$i"
    in_node "$i" ip link set "bv$i" up
  done
  # The socket net takes only running interfaces: wait for each veth's
  # carrier (the kernel reports it asynchronously, up to a second later).
  for ((i = 0; i < n; i++)); do link_wait "$i" LOWER_UP || skip "node $i's veth never came up"; done
}

link_wait() { # node, flag (LOWER_UP): waits up to 5 s for bv<node> to show it
  local i=$1 want=$2
  for _ in $(seq 100); do
    in_node "$i" ip -o link show "bv$i" | grep -q "[<,]$want[,>]" && return 0
    sleep 0.05
  done
  return 1
}

nodes_down() {
  local p
  for p in "${holders[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${holders[@]}"; do wait "$p" 2>/dev/null; done
  holders=()
  node_pid=()
  sw_pid=
  rm -f "$work"/up*
}

# ---- checked collectives -----------------------------------------------------

status=0
port=29500
fail() { echo "FAIL: $*"; status=1; }

# Runs benchmark $3 ($2: its directory, $1: a label) as $nodes x 2
# processes of one rank, process p on node p/2; args after --.
bench() {
  local label=$1 dir=$2 tool=$3 mode=$4
  shift 4
  local np=$((nodes * 2)) p pids=() rc failed=0 run=$work/$label start=$SECONDS
  mkdir -p "$run"
  port=$((port + 1))
  for ((p = 0; p < np; p++)); do
    in_node $((p / 2)) env BRAID_DEVICE="$mode" BRAID_CUDASIM_DEVICES=2 \
      BRAID_PERF_WORLD="$run/world" BRAID_PERF_NPROCS=$np BRAID_PERF_PROC=$p \
      NCCL_COMM_ID="$(addr 0):$port" NCCL_SOCKET_IFNAME=bv \
      BRAID_TIMEOUT=20 BRAID_BOOTSTRAP_TIMEOUT=20 \
      NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET NCCL_DEBUG_FILE="$run/debug.$p" \
      timeout -k 5 60 "$dir/$tool" -c 1 -w 1 -n 1 -T 30 "$@" >"$run/out.$p" 2>&1 &
    pids+=($!)
  done
  for ((p = 0; p < np; p++)); do
    rc=0
    wait "${pids[$p]}" || rc=$?
    [[ $rc -ne 0 ]] && { fail "$label: process $p exited $rc"; failed=1; }
  done
  # Data rows: the #wrong columns are 9 and 13 (N/A where not checked).
  local out=$run/out.0 rows bad
  rows=$(grep -cE '^ +[0-9]+ +[0-9]+ ' "$out")
  bad=$(awk '/^ +[0-9]+ +[0-9]+ / { if (($9 != "0" && $9 != "N/A") || ($13 != "0" && $13 != "N/A")) print }' "$out")
  if [[ $rows -eq 0 || -n $bad ]] || ! grep -q '^# Out of bounds values : 0 OK' "$out"; then
    fail "$label: $rows checked rows, wrong elements or out-of-bounds values"
    failed=1
  fi
  # Every process: one of $nodes nodes with 2 ranks each, a shared-memory
  # window for its node's other rank (in the node's /dev/shm), its node's
  # veth for the bootstrap and the socket net, port channels to the other
  # nodes over it.
  for ((p = 0; p < np; p++)); do
    local want="bv$((p / 2)):$(addr $((p / 2)))" d=$run/debug.$p
    if ! grep -q "localRanks 2 nodes $nodes .*Init COMPLETE" "$d" ||
       ! grep -q "SHM window of" "$d"; then
      fail "$label: process $p does not see $nodes nodes of 2 ranks sharing memory"
      failed=1
    fi
    if ! grep -q "Bootstrap: Using $want" "$d" || ! grep -q "NET/Socket : Using .*$want" "$d" ||
       ! grep -q "port channels over net Socket" "$d"; then
      fail "$label: process $p did not bootstrap and connect over $want"
      failed=1
    fi
  done
  if [[ $failed -ne 0 ]]; then
    for ((p = 0; p < np; p++)); do
      echo "  process $p:"
      tail -n 15 "$run/out.$p" | sed 's/^/    | /'
      grep -E "WARN|Bootstrap: Using|NET/Socket : Using" "$run/debug.$p" | head -5 | sed 's/^/    : /'
    done
  else
    echo "PASS: $label ($rows sizes checked, $((SECONDS - start)) s)"
  fi
}

# ---- faults on 3 nodes -------------------------------------------------------

# Starts rank $1 of 6 (node $1/2) of test_init_node with the extra
# environment that follows; its output goes to $work/$label/rank$1.
fault_rank() {
  local r=$1 dir=$2
  shift 2
  in_node $((r / 2)) env BRAID_DEVICE=host BRAID_TEST_RANK="$r" BRAID_TEST_NRANKS=6 \
    BRAID_TEST_EXPECT_DEV=$((r % 2)) BRAID_TEST_NODE=$((r / 2)) BRAID_TEST_NODE_RANKS=2 \
    NCCL_COMM_ID="$(addr 0):$port" NCCL_SOCKET_IFNAME=bv BRAID_BOOTSTRAP_TIMEOUT=10 \
    NCCL_DEBUG=WARN "$@" timeout -k 5 60 "$NODEBIN" >"$dir/rank$r" 2>&1
}

# Node 2's veth goes down while every rank runs all-reduces
# (BRAID_TIMEOUT=5): every rank must fail with ncclRemoteError naming the
# network connection that died (the socket net's keepalive and
# TCP_USER_TIMEOUT notice a dead link in about two thirds of
# BRAID_TIMEOUT, before a collective's wait gives up and blames a rank).
fault_link_down() {
  local label="link down on node 2 mid-collective (3x2)" dir=$work/linkdown r pids=() rc failed=0
  mkdir -p "$dir"
  port=$((port + 1))
  for r in 0 1 2 3 4 5; do
    fault_rank "$r" "$dir" BRAID_TIMEOUT=5 BRAID_TEST_LOOP_SECONDS=60 &
    pids+=($!)
  done
  sleep 3
  in_node 2 ip link set bv2 down
  local start=$SECONDS
  for r in 0 1 2 3 4 5; do
    rc=0
    wait "${pids[$r]}" || rc=$?
    if [[ $rc -eq 0 ]]; then
      fail "$label: rank $r finished its calls although the link went down"
      failed=1
    elif ! grep -q "failed after" "$dir/rank$r"; then
      fail "$label: rank $r exited $rc without reporting a failed call"
      failed=1
    elif ! grep "failed after" "$dir/rank$r" |
         grep -qE "remote process exited or there was a network error: .*(network connection to rank [0-9]+ \(host 10\.78\.0\.|10\.78\.0\.[0-9]<[0-9]+> acknowledged nothing|stopped because it lost rank [45]\b)"; then
      fail "$label: rank $r's error is not ncclRemoteError naming the network connection that died"
      failed=1
    fi
  done
  local took=$((SECONDS - start))
  [[ $took -gt 20 ]] && { fail "$label: the ranks took ${took} s to give up (BRAID_TIMEOUT=5)"; failed=1; }
  for r in 0 1 2 3 4 5; do
    echo "  rank $r: $(grep -m1 "failed after" "$dir/rank$r" | cut -c1-400)"
  done
  [[ $failed -eq 0 ]] && echo "PASS: $label: every rank failed within ${took} s"
}

# Node 2's ranks name an interface that does not exist: at the first
# collective every rank must fail naming rank 4 (node 2's first) and its
# NCCL_SOCKET_IFNAME, none waiting past the bootstrap deadline. A rank
# that saw a ring neighbour leave first names it and carries its error
# ("rank q ... left: rank q: rank 4 ... NCCL_SOCKET_IFNAME=nosuch0 ..."),
# so the cause is on every rank's line either way.
fault_bad_ifname() {
  local label="NCCL_SOCKET_IFNAME=nosuch0 on node 2 (3x2)" dir=$work/badif r pids=() rc failed=0
  mkdir -p "$dir"
  port=$((port + 1))
  local start=$SECONDS
  for r in 0 1 2 3; do fault_rank "$r" "$dir" BRAID_TIMEOUT=5 & pids+=($!); done
  for r in 4 5; do fault_rank "$r" "$dir" BRAID_TIMEOUT=5 NCCL_SOCKET_IFNAME=nosuch0 & pids+=($!); done
  for r in 0 1 2 3 4 5; do
    rc=0
    wait "${pids[$r]}" || rc=$?
    if [[ $rc -eq 0 ]]; then
      fail "$label: rank $r succeeded"
      failed=1
    elif [[ $r -ge 4 ]] && ! grep -q "NCCL_SOCKET_IFNAME=nosuch0" "$dir/rank$r"; then
      fail "$label: rank $r (exit $rc) did not name NCCL_SOCKET_IFNAME as the cause"
      failed=1
    elif ! grep -qE "^rank $r: .*rank 4 .*NCCL_SOCKET_IFNAME=nosuch0" "$dir/rank$r"; then
      fail "$label: rank $r did not name rank 4 and its NCCL_SOCKET_IFNAME"
      failed=1
    fi
  done
  local took=$((SECONDS - start))
  [[ $took -gt 20 ]] && { fail "$label: the ranks took ${took} s to give up"; failed=1; }
  for r in 0 1 2 3 4 5; do echo "  rank $r: $(grep -m1 "^rank $r" "$dir/rank$r" | cut -c1-600)"; done
  [[ $failed -eq 0 ]] && echo "PASS: $label: every rank failed within ${took} s"
}

t0=$SECONDS
for nodes in 2 3; do
  [[ -n $ONLY && $nodes -ne 3 ]] && continue
  nodes_up "$nodes"
  if [[ -n $ONLY ]]; then
    fault_bad_ifname
    [[ $ONLY == faults ]] && fault_link_down
    nodes_down
    continue
  fi
  for coll in all_reduce all_gather reduce_scatter broadcast reduce alltoall sendrecv; do
    bench "host ${coll} ${nodes}x2" "$BIN" "${coll}_perf" host -b 8 -e 2M -f 64
  done
  if [[ ${NETNS_SIM:-1} != 0 ]]; then
    for fl in cudasim cudasim-dev; do
      if [[ ! -x $BUILD/$fl/bin/all_reduce_perf ]]; then
        echo "note: $BUILD/$fl/bin is not built (make cudasim); CUDA mode not run on $fl"
        continue
      fi
      for coll in all_reduce all_gather; do
        bench "$fl ${coll} ${nodes}x2" "$BUILD/$fl/bin" "${coll}_perf" cuda -b 8 -e 256K -f 64
      done
    done
  fi
  if [[ $nodes -eq 3 ]]; then
    fault_bad_ifname
    fault_link_down
  fi
  nodes_down
done
echo "took $((SECONDS - t0)) s"
exit $status
