#!/usr/bin/env bash
# The plan language (tools/braid_lang): its unit tests of the lowering;
# for every example (ring, one-shot, two-shot all-reduce, all-gather, each
# Simple and LL; an all-reduce over a switch channel, NVLS on; 2 and 4
# ranks; the two-shot also with two thread blocks per rank, the ring and
# the all-gather as two instances) `python3 -m braid_lang check` writes the plan and the verifier
# accepts it, and the plan, dropped in a BRAID_PLAN_DIR, runs in host mode
# through the benchmark (small buffers: larger calls take several windows,
# so scratch slots are reused), exactly (#wrong 0, in and out of place),
# with every rank's INFO line naming the file; and two programs with
# planted bugs (a missing signal, a wrong chunk) are refused by `check`,
# the verifier naming rank, block and op.
set -uo pipefail
BUILD=${BUILD:-build}
export BRAID_PLAN_TOOL=${BRAID_PLAN_TOOL:-$BUILD/bin/braid-plan}
export PYTHONPATH=tools/braid_lang${PYTHONPATH:+:$PYTHONPATH}
export BRAID_DEVICE=host
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
for t in "$BRAID_PLAN_TOOL" "$BUILD/bin/all_reduce_perf" "$BUILD/bin/all_gather_perf"; do
  [[ -x $t ]] || { echo "SKIP: $t not built (make tools)"; exit 77; }
done

if python3 -m unittest discover -s tools/braid_lang/tests >"$tmp/unit.txt" 2>&1; then
  echo "PASS unit tests of the lowering ($(grep -o 'Ran [0-9]* tests' "$tmp/unit.txt"))"
else
  echo "FAIL unit tests of the lowering:"; tail -n 20 "$tmp/unit.txt"; fail=1
fi

run() { # example proto nranks perf sizes(-b -e)
  local ex=$1 proto=$2 n=$3 perf=$4 b=$5 e=$6
  local name=$ex-$proto-$n${DEFS:+-${DEFS//[ =]/}}
  local dir=$tmp/$name
  mkdir -p "$dir"
  local plan=$dir/$name.json
  if ! python3 -m braid_lang check "tools/braid_lang/examples/$ex.py" -o "$plan" \
       -D ranks="$n" -D proto="$proto" ${DEFS:+-D $DEFS} >"$tmp/check.txt" 2>&1; then
    echo "FAIL $name: check refuses the example: $(cat "$tmp/check.txt")"; fail=1; return
  fi
  grep -q "verifier: plan is correct" "$tmp/check.txt" ||
    { echo "FAIL $name: no verdict: $(cat "$tmp/check.txt")"; fail=1; return; }
  local out=$tmp/perf.txt rc
  env ${RUN_ENV:-} BRAID_PLAN_DIR=$dir NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING,INIT,COLL \
    NCCL_DEBUG_FILE="$dir/info.%p" NCCL_BUFFSIZE=65536 NCCL_LL_BUFFSIZE=16384 \
    timeout 60 "$BUILD/bin/$perf" -t "$n" -g 1 -b "$b" -e "$e" -f 8 -c 1 -n 2 -w 1 >"$out" 2>&1
  rc=$?
  if [[ $rc -ne 0 ]]; then echo "FAIL $name: $perf exit $rc: $(tail -n 5 "$out")"; fail=1; return; fi
  # every size row: out-of-place and in-place #wrong (columns 9 and 13) are 0
  local rows bad
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13' "$out" | wc -l)
  bad=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0)' "$out" | wc -l)
  if [[ $rows -eq 0 || $bad -ne 0 ]] || ! grep -q "Out of bounds values : 0 OK" "$out"; then
    echo "FAIL $name: $rows sizes, $bad with wrong values:"; cat "$out"; fail=1; return
  fi
  cat "$dir"/info.* >"$tmp/info.txt" 2>/dev/null
  local r
  for ((r = 0; r < n; r++)); do
    for how in "out of place" "in place"; do
      if ! grep -q "rank $r: plan library: $plan runs ([0-9]* bytes per rank, $how)" "$tmp/info.txt"; then
        echo "FAIL $name: no INFO line names $plan running on rank $r $how:"
        grep "plan library" "$tmp/info.txt" | head -n 5; fail=1; return
      fi
    done
  done
  echo "PASS $name: verified, ran on $n ranks ($rows sizes $b..$e, in and out of place, #wrong 0)"
}

for n in 2 4; do
  for proto in Simple LL; do
    run ring_allreduce $proto $n all_reduce_perf 1K 256K
    run twoshot_allreduce $proto $n all_reduce_perf 1K 256K
    run oneshot_allreduce $proto $n all_reduce_perf 1K 256K
    run allgather $proto $n all_gather_perf $((n * 1024)) $((n * 262144))
  done
  # switch channels run where NVLS is on (host mode: on request)
  RUN_ENV=NCCL_NVLS_ENABLE=1 run switch_allreduce Simple $n all_reduce_perf 1K 256K
done
# two thread blocks per rank (rank barriers, credits from block 0)
# and the program replicated on two thread blocks (instances)
for proto in Simple LL; do
  DEFS=blocks=2 run twoshot_allreduce $proto 4 all_reduce_perf 1K 256K
  DEFS=instances=2 run ring_allreduce $proto 4 all_reduce_perf 1K 256K
  DEFS=instances=2 run allgather $proto 4 all_gather_perf 4096 1048576
done

for bug in missing_signal wrong_chunk; do
  python3 -m braid_lang check "tools/braid_lang/tests/bad_$bug.py" -o "$tmp/bad.json" >"$tmp/bad.txt" 2>&1
  rc=$?
  if [[ $rc -eq 1 ]] && grep -q "verifier refused the plan" "$tmp/bad.txt" &&
     grep -Eq "rank [0-9]+ block [0-9]+ op [0-9]+" "$tmp/bad.txt"; then
    echo "PASS bad_$bug: refused ($(grep -o 'verifier refused the plan ([a-z ]*)' "$tmp/bad.txt"))"
  else
    echo "FAIL bad_$bug: check exit $rc (want 1, with rank/block/op): $(cat "$tmp/bad.txt")"; fail=1
  fi
done
exit $fail
