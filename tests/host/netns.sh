#!/usr/bin/env bash
# Two "nodes" in two network namespaces joined by a veth pair, two ranks in
# each, distinct BRAID_HOSTID per node (host mode). Round 1 rendezvous
# through NCCL_COMM_ID (the interface on its subnet is chosen); round 2
# through a unique id passed in a file, with NCCL_SOCKET_IFNAME picking the
# veth. Checks every rank's result (an all-reduce, an all-gather and a
# send/recv ring, whose channels between the nodes cross the veth over the
# socket net), which interface the bootstrap and the net used. Round 3
# takes the veth down while the ranks run all-reduces: every rank must
# fail with an error, none may hang (BRAID_TIMEOUT=5).
# netns_nodes.sh runs every collective on 2 and 3 such nodes, each with its
# own /dev/shm and hostname, and more faults.
#
# Needs root (or CAP_NET_ADMIN) and iproute2; otherwise it says so and
# exits 77 (skipped).
# Environment: BUILD (build directory, default "build").
set -uo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/tests/host/test_init_node
if [[ ! -x $BIN ]]; then
  echo "SKIP: $BIN is not built (make BUILD=$BUILD tests)"
  exit 77
fi
if ! command -v ip >/dev/null 2>&1; then
  echo "SKIP: the ip command (iproute2) is not installed"
  exit 77
fi

tag=$$
NSA=brd${tag}a
NSB=brd${tag}b
IFA=bv${tag}a
IFB=bv${tag}b
work=$(mktemp -d)

cleanup() {
  ip netns del "$NSA" 2>/dev/null
  ip netns del "$NSB" 2>/dev/null
  [[ -n ${KEEP_LOGS:-} ]] && cp -r "$work" /tmp/netns-logs; rm -rf "$work"
}
trap cleanup EXIT

if ! ip netns add "$NSA" 2>/dev/null; then
  echo "SKIP: creating network namespaces is not permitted here (ip netns add failed; needs root)"
  exit 77
fi
if ! ip netns add "$NSB" ||
   ! ip link add "$IFA" type veth peer name "$IFB" ||
   ! ip link set "$IFA" netns "$NSA" || ! ip link set "$IFB" netns "$NSB"; then
  echo "SKIP: cannot create a veth pair between namespaces here"
  exit 77
fi
ip -n "$NSA" addr add 10.77.0.1/24 dev "$IFA"
ip -n "$NSB" addr add 10.77.0.2/24 dev "$IFB"
for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
ip -n "$NSA" link set "$IFA" up
ip -n "$NSB" link set "$IFB" up
# The socket net takes only running interfaces: wait for the carrier.
for _ in $(seq 100); do
  ip -n "$NSA" -o link show "$IFA" | grep -q LOWER_UP &&
    ip -n "$NSB" -o link show "$IFB" | grep -q LOWER_UP && break
  sleep 0.05
done

# Runs rank $1 in namespace $2 as host $3 with expected device $4, plus the
# round's extra environment (the remaining arguments).
run_rank() {
  local rank=$1 ns=$2 host=$3 dev=$4 node=$5
  shift 5
  ip netns exec "$ns" env BRAID_DEVICE=host BRAID_BOOTSTRAP_TIMEOUT=10 \
    BRAID_HOSTID="$host" BRAID_TEST_RANK="$rank" BRAID_TEST_NRANKS=4 \
    BRAID_TEST_EXPECT_DEV="$dev" BRAID_TEST_NODE="$node" BRAID_TEST_NODE_RANKS=2 \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=BOOTSTRAP,NET "$@" "$BIN" >"$work/rank$rank.log" 2>&1
}

round() {
  local name=$1 want_if_a=$2 want_if_b=$3
  shift 3
  local pids=() failed=0
  run_rank 0 "$NSA" node-a 0 0 "$@" & pids+=($!)
  run_rank 1 "$NSA" node-a 1 0 "$@" & pids+=($!)
  run_rank 2 "$NSB" node-b 0 1 "$@" & pids+=($!)
  run_rank 3 "$NSB" node-b 1 1 "$@" & pids+=($!)
  for i in 0 1 2 3; do
    if ! wait "${pids[$i]}"; then
      echo "FAIL: $name: rank $i failed; its log:"
      sed 's/^/    /' "$work/rank$i.log"
      failed=1
    fi
  done
  if ! grep -q "Bootstrap: Using $want_if_a:10.77.0.1" "$work/rank0.log"; then
    echo "FAIL: $name: rank 0 did not bootstrap on $want_if_a:10.77.0.1"
    grep Bootstrap "$work/rank0.log" | sed 's/^/    /'
    failed=1
  fi
  if ! grep -q "Bootstrap: Using $want_if_b:10.77.0.2" "$work/rank2.log"; then
    echo "FAIL: $name: rank 2 did not bootstrap on $want_if_b:10.77.0.2"
    grep Bootstrap "$work/rank2.log" | sed 's/^/    /'
    failed=1
  fi
  if ! grep -q "port channels over net Socket" "$work/rank0.log"; then
    echo "FAIL: $name: rank 0 did not connect port channels over the socket net"
    failed=1
  fi
  if ! grep -q "NET/Socket : Using .*$want_if_a:10.77.0.1" "$work/rank0.log"; then
    echo "FAIL: $name: rank 0's socket net did not use $want_if_a:10.77.0.1"
    grep "NET/Socket" "$work/rank0.log" | sed 's/^/    /'
    failed=1
  fi
  [[ $failed -eq 0 ]] && echo "PASS: $name"
  return $failed
}

# Round 3: the link between the nodes goes down mid-stream.
link_down() {
  local pids=() failed=0 port=$1
  run_rank 0 "$NSA" node-a 0 0 NCCL_COMM_ID="10.77.0.1:$port" BRAID_TIMEOUT=5 BRAID_TEST_LOOP_SECONDS=60 & pids+=($!)
  run_rank 1 "$NSA" node-a 1 0 NCCL_COMM_ID="10.77.0.1:$port" BRAID_TIMEOUT=5 BRAID_TEST_LOOP_SECONDS=60 & pids+=($!)
  run_rank 2 "$NSB" node-b 0 1 NCCL_COMM_ID="10.77.0.1:$port" BRAID_TIMEOUT=5 BRAID_TEST_LOOP_SECONDS=60 & pids+=($!)
  run_rank 3 "$NSB" node-b 1 1 NCCL_COMM_ID="10.77.0.1:$port" BRAID_TIMEOUT=5 BRAID_TEST_LOOP_SECONDS=60 & pids+=($!)
  sleep 4
  ip -n "$NSB" link set "$IFB" down
  local start=$SECONDS
  for i in 0 1 2 3; do
    local rc=0
    wait "${pids[$i]}" || rc=$?
    if [[ $rc -eq 0 ]]; then
      echo "FAIL: link down: rank $i finished its calls although the link went down"
      failed=1
    elif ! grep -q "failed after" "$work/rank$i.log"; then
      echo "FAIL: link down: rank $i exited $rc without reporting a failed call; its log:"
      tail -n 20 "$work/rank$i.log" | sed 's/^/    /'
      failed=1
    fi
  done
  local took=$((SECONDS - start))
  if [[ $took -gt 20 ]]; then
    echo "FAIL: link down: the ranks took ${took}s to give up (BRAID_TIMEOUT=5)"
    failed=1
  fi
  ip -n "$NSB" link set "$IFB" up
  for i in 0 2; do grep -m1 "failed after" "$work/rank$i.log" | cut -c1-240 | sed 's/^/    /'; done
  [[ $failed -eq 0 ]] && echo "PASS: link down mid-stream: every rank failed within ${took}s"
  return $failed
}

status=0
port=$((20000 + tag % 20000))
round "NCCL_COMM_ID across two namespaces" "$IFA" "$IFB" \
  NCCL_COMM_ID="10.77.0.1:$port" || status=1
round "unique id file with NCCL_SOCKET_IFNAME=bv" "$IFA" "$IFB" \
  BRAID_TEST_ID_FILE="$work/id" NCCL_SOCKET_IFNAME=bv || status=1
link_down $((port + 1)) || status=1
exit $status
