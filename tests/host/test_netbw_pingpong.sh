#!/usr/bin/env bash
# braid-netbw's latency mode (tools/braid-netbw.c, what test-rxe runs beside
# ib_write_lat): ping and pong bounce an 8-byte message 2000 times through
# a net alone, with 4 receives posted and each posted again after its
# answer, and ping checks that every round trip brings back its own
# number. Over the socket net on the loopback, then over the IB net on the
# verbs mock: both sides exit 0, and ping prints a positive one-way time.
set -uo pipefail
BUILD=${BUILD:-build}
bin=$BUILD/bin/braid-netbw
mock=$PWD/$BUILD/tests/mock/libibverbs-mock.so
if [[ ! -x $bin ]]; then
  echo "SKIP: $bin is not built (make tools)"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

# pingpong NAME [VAR=value ...]: one ping-pong with the environment given.
pingpong() {
  local name=$1
  shift
  env "$@" timeout 120 "$bin" pong "$work/$name.h" 2000 >"$work/$name.pong" 2>&1 &
  local p=$!
  env "$@" timeout 120 "$bin" ping "$work/$name.h" 2000 >"$work/$name.ping" 2>&1
  local s=$?
  wait $p
  local r=$?
  local us
  us=$(awk '/^ping 8 B:/ {print $4}' "$work/$name.ping")
  if [[ $s -ne 0 || $r -ne 0 ]] || ! awk -v u="$us" 'BEGIN {exit !(u > 0)}'; then
    echo "FAIL: $name: ping exit $s, pong exit $r"
    tail -n 5 "$work/$name.ping" "$work/$name.pong" | sed 's/^/    | /'
    fails=$((fails + 1))
  else
    echo "PASS: $name: $us us one way"
  fi
}

pingpong socket NCCL_SOCKET_IFNAME=lo
if [[ -f $mock ]]; then
  pingpong ib BRAID_NETBW_NET=ib BRAID_IBVERBS_LIB="$mock" BRAID_MOCK_IB_DEVICES=mlx5_0:1:IB
else
  echo "SKIP: the verbs mock ($mock) is not built"
fi
exit $((fails > 0))
