#!/usr/bin/env bash
# The benchmarks' world file mode (BRAID_PERF_WORLD): processes started one
# by one meet through a file. Checks that 3 separately started
# all_reduce_perf processes make one 3-rank run whose values check out,
# that only process 0 prints the table, that the file is gone afterwards,
# that a file left from another run is refused with a message, and that a
# missing BRAID_PERF_PROC is a usage error.
# Environment: BUILD (build directory, default build).
set -uo pipefail

BUILD=${BUILD:-build}
tool=$BUILD/bin/all_reduce_perf
if [[ ! -x $tool ]]; then echo "SKIP: $tool is not built"; exit 0; fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

pids=()
for p in 0 1 2; do
  BRAID_DEVICE=host BRAID_PERF_WORLD="$work/world" BRAID_PERF_NPROCS=3 BRAID_PERF_PROC=$p \
    timeout 120 "$tool" -b 8 -e 64K -f 8 -c 1 -n 2 -w 1 >"$work/out$p" 2>&1 &
  pids+=($!)
done
for p in 0 1 2; do wait "${pids[$p]}" || fail "process $p exited with $?: $(tail -n 5 "$work/out$p")"; done
grep -q '3 processes x 1 thread x 1 rank = 3 ranks (world file)' "$work/out0" ||
  fail "preamble of process 0: $(grep 'Braid launch' "$work/out0")"
[[ $(grep -c '^#  Rank ' "$work/out0") -eq 3 ]] || fail "want one device line per rank"
rows=$(grep -cE '^ +[0-9]+ +[0-9]+ +float' "$work/out0")
[[ $rows -eq 5 ]] || fail "$rows rows for 8..64K by 8 (want 5: 8 64 512 4K 32K)"
grep -q '# Out of bounds values : 0 OK' "$work/out0" || fail "wrong values: $(cat "$work/out0")"
for p in 1 2; do
  [[ ! -s $work/out$p ]] || fail "process $p printed: $(head -n 3 "$work/out$p")"
done
[[ ! -e $work/world ]] || fail "the world file is left behind"

# A file from another run is refused: a lone process-1 run gives up after
# -T 1 s and leaves it (only process 0 deletes it) marked failed; the next
# process to join is refused with a message, whichever index it has.
for k in 1; do
  BRAID_DEVICE=host BRAID_PERF_WORLD="$work/stale" BRAID_PERF_NPROCS=2 BRAID_PERF_PROC=1 \
    timeout 60 "$tool" -b 8 -e 8 -c 0 -n 1 -w 0 -T 1 >"$work/lone$k" 2>&1 &&
    fail "a lone process 1 of 2 succeeded"
done
BRAID_DEVICE=host BRAID_PERF_WORLD="$work/stale" BRAID_PERF_NPROCS=2 BRAID_PERF_PROC=0 \
  timeout 60 "$tool" -b 8 -e 8 -c 0 -n 1 -w 0 -T 1 >"$work/stale-run" 2>&1 &&
  fail "a stale world file was accepted"
grep -q 'left from another run' "$work/stale-run" || fail "no message for a stale file: $(cat "$work/stale-run")"
printf 'junk' >"$work/junk"
BRAID_DEVICE=host BRAID_PERF_WORLD="$work/junk" BRAID_PERF_NPROCS=1 BRAID_PERF_PROC=0 \
  timeout 60 "$tool" -b 8 -e 8 -c 0 -n 1 -w 0 >"$work/junk-run" 2>&1 && fail "a 4-byte world file was accepted"
grep -q 'left from another run' "$work/junk-run" || fail "no message for a wrong-size file: $(cat "$work/junk-run")"

BRAID_DEVICE=host BRAID_PERF_WORLD="$work/w2" BRAID_PERF_NPROCS=2 \
  timeout 60 "$tool" -b 8 -e 8 >"$work/usage" 2>&1
rc=$?
[[ $rc -eq 255 ]] || fail "missing BRAID_PERF_PROC: exit $rc, want 255"
grep -q 'BRAID_PERF_PROC' "$work/usage" || fail "no message naming BRAID_PERF_PROC: $(cat "$work/usage")"

[[ $failures -eq 0 ]] && echo "PASS: world file mode (3 processes, stale and wrong-size files, usage)"
exit $((failures > 0))
