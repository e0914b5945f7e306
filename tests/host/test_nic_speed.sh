#!/usr/bin/env bash
# The tuner's bandwidth between hosts comes from the NICs the ranks'
# proxies use, agreed by every rank at the first collective: the slowest
# one. test_multinode (quick) runs ranks staged on 2 and 3 hosts over the
# IB net of the verbs mock, whose ports are EDR 4x (100 Gbit/s), with the
# third staged host's ports FDR 4x (56 Gbit/s, BRAID_MOCK_IB_SLOW_HOST):
# the ranks of 3-host communicators log the slowest NIC as 56000 Mbit/s,
# those of 2-host ones 100000, and no other value; then over the socket
# net every rank logs one same positive speed.
set -uo pipefail
BUILD=${BUILD:-build}
prog=$BUILD/tests/host/test_multinode
mock=$PWD/$BUILD/tests/mock/libibverbs-mock.so
if [[ ! -x $prog || ! -f $mock ]]; then
  echo "SKIP: $prog or $mock is not built"
  exit 77
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

mkdir -p "$work/ib"
BRAID_DEVICE=host BRAID_TEST_QUICK=1 BRAID_IBVERBS_LIB="$mock" BRAID_MOCK_IB_DEVICES=mlx5_0:1:IB \
  BRAID_MOCK_IB_SLOW_HOST=multinode-2 NCCL_NET=IB NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
  NCCL_DEBUG_FILE="$work/ib/log.%p" timeout 300 "$prog" >"$work/ib.out" 2>&1 ||
  fail "test_multinode over the IB mock: $(tail -n 3 "$work/ib.out")"
lines=$(cat "$work"/ib/log.* 2>/dev/null | grep -h 'slowest NIC [0-9]' | sed 's/.*INFO //')
slow=$(grep -c 'slowest NIC 56000 Mbit/s' <<<"$lines")
fast=$(grep -c 'slowest NIC 100000 Mbit/s' <<<"$lines")
other=$(grep -vc 'slowest NIC \(56000\|100000\) Mbit/s' <<<"$lines")
[[ $slow -gt 0 ]] || fail "no rank saw the FDR host's 56000 Mbit/s NIC as the slowest"
[[ $fast -gt 0 ]] || fail "no rank of a communicator on EDR hosts only saw 100000 Mbit/s"
[[ $other -eq 0 ]] || fail "slowest-NIC lines other than 56000 or 100000: $(grep -v 'slowest NIC \(56000\|100000\)' <<<"$lines" | head -3)"
# Per process (one rank each): every rank of a 3-host communicator, its
# own NIC EDR or FDR, takes the FDR host's; of a 2-host one, EDR.
bad=0
for f in "$work"/ib/log.*; do
  nodes=$(grep -ho 'nodes [0-9]*' "$f" | head -n 1 | cut -d' ' -f2)
  want=$([[ $nodes == 3 ]] && echo 56000 || echo 100000)
  got=$(grep -ho 'slowest NIC [0-9]* Mbit/s' "$f" | sort -u | cut -d' ' -f3 | tr '\n' ' ')
  [[ -z $nodes || $got == "$want " ]] || bad=$((bad + 1))
done
[[ $bad -eq 0 ]] || fail "$bad rank(s) did not take the slowest NIC of their communicator's hosts"
echo "IB mock: $slow lines with the FDR host's NIC slowest, $fast with EDR only"
[[ $(grep -h 'between hosts the tuner takes' "$work"/ib/log.* | grep -c 'no NIC speed known') -eq 0 ]] ||
  fail "some rank had no NIC speed over the IB mock"

mkdir -p "$work/sock"
BRAID_DEVICE=host BRAID_TEST_QUICK=1 NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,TUNING \
  NCCL_DEBUG_FILE="$work/sock/log.%p" timeout 300 "$prog" >"$work/sock.out" 2>&1 ||
  fail "test_multinode over sockets: $(tail -n 3 "$work/sock.out")"
vals=$(cat "$work"/sock/log.* 2>/dev/null | grep -ho 'slowest NIC [0-9]* Mbit/s' | sort -u)
[[ $(wc -l <<<"$vals") -eq 1 && -n $vals && $vals != "slowest NIC 0 Mbit/s" ]] ||
  fail "over sockets the ranks did not log one positive slowest NIC: ${vals:-none}"
echo "sockets: ${vals:-none}"

if [[ $fails -gt 0 ]]; then
  echo "FAIL: $fails check(s) failed"
  exit 1
fi
echo "PASS: every rank took the slowest NIC between its hosts"
