#!/usr/bin/env bash
# braid-plan prints and draws plans: for every collective it knows, the
# text lists one section per (rank, block) whose op counts add up to the
# header's total, the verifier accepts the plan, and the SVG is well-formed
# with one lane per (rank, block) and an arrow per peer write or signal.
set -euo pipefail
BUILD=${BUILD:-build}
tool=$BUILD/bin/braid-plan
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

check() { # coll algo proto nranks blocks
  local c=$1 a=$2 p=$3 n=$4 b=$5 out=$tmp/plan.txt
  if ! "$tool" -c "$c" -a "$a" -p "$p" -n "$n" -b "$b" -r $((n - 1)) -s 65536 -V >"$out" 2>&1; then
    if grep -q "no plan for" "$out"; then echo "SKIP $c/$a/$p: no generator"; return; fi
    echo "FAIL $c/$a/$p n=$n b=$b: $(tail -n 3 "$out")"; fail=1; return
  fi
  local total sections sum
  total=$(sed -n 's/.* ops \([0-9]*\) bytes.*/\1/p' "$out" | head -n1)
  sections=$(grep -c '^rank [0-9]* block [0-9]*:' "$out")
  sum=$(awk '/^rank [0-9]+ block [0-9]+:/ {s += $5} END {print s + 0}' "$out")
  if [[ $sections -ne $((n * b)) || $sum -ne $total ]] || ! grep -q "verifier: plan is correct" "$out"; then
    echo "FAIL $c/$a/$p n=$n b=$b: sections $sections (want $((n * b))), ops $sum (header $total)"
    fail=1; return
  fi
  "$tool" -c "$c" -a "$a" -p "$p" -n "$n" -b "$b" -r $((n - 1)) -o "$tmp/plan.svg" >/dev/null
  local arrows expect
  expect=$(grep -cE '(SIGNAL +peer|@[0-9]+\[)' "$out" || true)
  arrows=$(python3 - "$tmp/plan.svg" "$((n * b))" <<'PY'
import sys, xml.dom.minidom as m
d = m.parse(sys.argv[1])
lanes = sum(1 for t in d.getElementsByTagName('text') if t.firstChild and 'blk' in t.firstChild.data)
assert lanes == int(sys.argv[2]), f"{lanes} lanes"
print(len(d.getElementsByTagName('line')))
PY
) || { echo "FAIL $c/$a/$p: SVG malformed"; fail=1; return; }
  # Every op that names a peer draws at least one arrow.
  if [[ $arrows -lt $expect ]]; then
    echo "FAIL $c/$a/$p: $arrows arrows for $expect peer-writing ops"; fail=1; return
  fi
  echo "PASS $c/$a/$p n=$n b=$b ($total ops, $arrows arrows)"
}

for p in LL Simple; do
  for a in ring tree oneshot twoshot; do check allreduce $a $p 5 2; done
  for c in allgather reducescatter broadcast reduce alltoall gather scatter; do
    for a in ring oneshot; do check $c $a $p 4 1; done
  done
done
check allreduce ring Simple 1 1
for c in allreduce allgather reducescatter; do check $c zerocopy Simple 5 2; done
# The zero-copy plan exists in Simple only.
if "$tool" -c allreduce -a zerocopy -p LL -n 4 >/dev/null 2>&1; then
  echo "FAIL zerocopy with LL accepted"; fail=1
fi
# A bad request fails with usage.
if "$tool" -c nosuch >/dev/null 2>&1; then echo "FAIL unknown collective accepted"; fail=1; fi
exit $fail
