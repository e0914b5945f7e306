#!/usr/bin/env bash
# braid-plan prints and draws plans: for every collective it knows, the
# text lists one section per (rank, block) whose op counts add up to the
# header's total, the verifier accepts the plan, and the SVG is well-formed
# with one lane per (rank, block) and an arrow per peer write or signal.
# JSON: -J writes a document Python's json module reads, -f loads it back
# (verified) and prints the same listing, and -f -J writes it unchanged; a
# document with a dropped signal or a typo is refused, naming what.
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
  # JSON round trip through the tool.
  "$tool" -c "$c" -a "$a" -p "$p" -n "$n" -b "$b" -r $((n - 1)) -J >"$tmp/plan.json"
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["ranks"]) == int(sys.argv[2])' \
    "$tmp/plan.json" "$n" || { echo "FAIL $c/$a/$p: -J is not JSON with $n ranks"; fail=1; return; }
  if ! "$tool" -f "$tmp/plan.json" -s 65536 >"$tmp/loaded.txt" 2>&1 ||
     ! diff <(grep -v '^verifier' "$out") <(grep -v '^verifier' "$tmp/loaded.txt") >/dev/null ||
     ! "$tool" -f "$tmp/plan.json" -J | cmp -s - "$tmp/plan.json"; then
    echo "FAIL $c/$a/$p: -f does not give back the plan -J wrote"; fail=1; return
  fi
  echo "PASS $c/$a/$p n=$n b=$b ($total ops, $arrows arrows, JSON round trip)"
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
# A loaded plan with the last signal of rank 1 dropped deadlocks; the
# verifier says so and names the op; a typo names the JSON path.
"$tool" -c allreduce -a ring -n 3 -J >"$tmp/r3.json"
python3 - "$tmp/r3.json" "$tmp/bad.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
ops = d["ranks"][1]["blocks"][0]["ops"]
last = max(i for i, o in enumerate(ops) if o["op"] == "signal" and o["refs"][0]["index"] == 0)
del ops[last]
json.dump(d, open(sys.argv[2], "w"))
PY
if "$tool" -f "$tmp/bad.json" >"$tmp/bad.txt" 2>&1 || ! grep -q "deadlock: rank [0-9] block 0 op [0-9]" "$tmp/bad.txt"; then
  echo "FAIL dropped signal not refused: $(cat "$tmp/bad.txt" | head -n 3)"; fail=1
else
  echo "PASS dropped signal refused by the verifier"
fi
sed 's/"op": "put"/"op": "putt"/' "$tmp/r3.json" >"$tmp/typo.json"
if "$tool" -f "$tmp/typo.json" >"$tmp/typo.txt" 2>&1 ||
   ! grep -q 'typo.json: ranks\[0\].blocks\[0\].ops\[1\].op: unknown name "putt"' "$tmp/typo.txt"; then
  echo "FAIL unknown op not named: $(cat "$tmp/typo.txt")"; fail=1
else
  echo "PASS unknown op named with its JSON path"
fi
# A bad request fails with usage.
if "$tool" -c nosuch >/dev/null 2>&1; then echo "FAIL unknown collective accepted"; fail=1; fi
exit $fail
