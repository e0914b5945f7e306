#!/usr/bin/env bash
# scripts/gpu-check without a GPU, so the device call works the first time:
#  - its arguments: bad ones exit 2 with a message;
#  - --prepare --no-build copies exactly what the run needs from $BUILD into
#    a directory under the 64 MiB a device call carries, every binary loading
#    from there (MANIFEST lists each file);
#  - the run itself on that prepared directory, here: every step finds its
#    files and SKIPs (no GPU), none FAILs, the summary has every step;
#  - --rehearse on $BUILD/cudasim-dev: every step runs on the CUDA simulator
#    and passes (sanitizer and torch may SKIP where their tool is absent),
#    summary.md, summary.json, probe.txt, report.md and logs.tgz are written;
#  - a broken rehearsal fails: a missing program and a program that fails
#    make the summary say FAIL with the first lines of the failure, the exit
#    status is 1, and the steps that work still PASS;
#  - a spent budget leaves the steps NOT RUN;
#  - torch_check.py's verdicts and the torch step's summary, on a stand-in
#    torch (tests/gpu/data/torch-stub): PyTorch and a GPU are not here.
# Skips (77) in a CUDA=0 build or without $BUILD/cudasim-dev (make cudasim).
# Environment: BUILD (default build), CUDA.
set -uo pipefail

cd "$(dirname "$0")/../.." || exit 1
BUILD=${BUILD:-build}
SIM=$BUILD/cudasim-dev
if [[ ${CUDA:-1} != 1 ]]; then
  echo "SKIP: gpu-check: this build has no CUDA (CUDA=0)"
  exit 77
fi
if [[ ! -x $SIM/bin/gpu-probe || ! -x $BUILD/tests/unit/test_exec_cuda ]]; then
  echo "SKIP: gpu-check: $SIM/bin/gpu-probe or $BUILD/tests/unit/test_exec_cuda is not built" \
       "(make CUDA_ARCHS=90 BUILD=$BUILD all cudasim)"
  exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/braid-gpu-check-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

failures=0
pass() { echo "PASS $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# expect NAME WANT_RC PATTERN LIMIT -- COMMAND...
expect() {
  local name=$1 want=$2 pattern=$3 limit=$4
  shift 5
  timeout -k 5 "$limit" "$@" >"$WORK/out" 2>&1
  local rc=$?
  if [[ $rc -ne $want ]]; then
    fail "$name: exit $rc, expected $want; output:"
    tail -n 30 "$WORK/out" | sed 's/^/    | /'
  elif ! grep -Eq -- "$pattern" "$WORK/out"; then
    fail "$name: output lacks /$pattern/; output:"
    tail -n 30 "$WORK/out" | sed 's/^/    | /'
  else
    pass "$name"
  fi
}

# row FILE STEP: the status column of STEP's row in summary.md.
row() { awk -F' [|] ' -v s="$2" '$1 == "| " s {print $2}' "$1"; }

# has_rows NAME SUMMARY WANT...: each "step=STATUS|STATUS" holds.
has_rows() {
  local name=$1 sum=$2 bad= w st
  shift 2
  for w in "$@"; do
    st=$(row "$sum" "${w%%=*}")
    [[ $st =~ ^(${w#*=})$ ]] || bad+=" ${w%%=*}='$st'(want ${w#*=})"
  done
  if [[ -z $bad ]]; then pass "$name"; else fail "$name:$bad"; sed 's/^/    | /' "$sum" | head -30; fi
}

# ------------------------------------------------------------- arguments
if bash -n scripts/gpu-check; then pass "bash -n scripts/gpu-check"; else fail "bash -n scripts/gpu-check"; fi
expect "unknown argument" 2 "unknown argument '--frobnicate'" 20 -- scripts/gpu-check --frobnicate
expect "--steps with a step that does not exist" 2 "--steps: 'warp' is not one of" 20 -- \
  scripts/gpu-check --steps probe,warp
expect "--budget that is not a number" 2 "--budget needs a whole number of seconds" 20 -- \
  scripts/gpu-check --budget soon
expect "--help" 0 "--rehearse" 20 -- scripts/gpu-check --help

# The steps' scripts catch a wrong path even where they would skip.
expect "torch_check.py with a --lib that does not exist" 1 "FAIL: torch_check: --lib .*/none/libnccl.so.2 does not exist" 60 -- \
  python3 tests/gpu/torch_check.py --lib "$WORK/none/libnccl.so.2"
expect "sanitizer.sh with a program that does not exist" 1 "FAIL: sanitizer: .*/none/test_graph is missing" 20 -- \
  env SANITIZER_PROG="$WORK/none/test_graph" CUDA=1 bash tests/gpu/sanitizer.sh
expect "matrix.sh with a program that does not exist" 1 "FAIL: matrix: .*/none/test_allreduce is missing" 20 -- \
  env MATRIX_BIN_DIR="$WORK/none" MATRIX_PROGS=test_allreduce CUDA=1 bash tests/gpu/matrix.sh

# torch_check.py's verdicts, and gpu-check's torch step and summary, on a
# stand-in torch (tests/gpu/data/torch-stub) whose ranks print canned
# results: the real one needs PyTorch and a GPU.
STUB=tests/gpu/data/torch-stub
expect "torch_check.py: two ranks that ran Braid and passed" 0 \
  "rank 1: libnccl mapped: .*libnccl.so.2 \(Braid\).*banner: NCCL version 2.28.9\+stand-in" 60 -- \
  env PYTHONPATH=$STUB STUB_MODE=pass python3 tests/gpu/torch_check.py --lib "$BUILD/lib/libnccl.so.2"
expect "torch_check.py: a rank without Braid and a wrong result fail" 1 \
  "FAIL: rank 1: the process did not map .*LD_PRELOAD did not take" 60 -- \
  env PYTHONPATH=$STUB STUB_MODE=mixed python3 tests/gpu/torch_check.py --lib "$BUILD/lib/libnccl.so.2"
grep -q "FAIL: rank 1: broadcast root 1 (nccl \[1.0\] vs gloo \[2.0\])" "$WORK/out" &&
  pass "torch_check.py: the failed check is named with both results" || fail "torch_check.py: no failed-check line"
expect "torch_check.py: a rank that crashes fails with its traceback" 1 \
  "RuntimeError: ncclInvalidUsage: the stand-in refuses" 60 -- \
  env PYTHONPATH=$STUB STUB_MODE=crash python3 tests/gpu/torch_check.py --lib "$BUILD/lib/libnccl.so.2"
expect "gpu-check's torch step with a failing rank" 1 "failed: torch" 120 -- \
  env PYTHONPATH=$STUB STUB_MODE=mixed scripts/gpu-check --rehearse --build "$BUILD" --steps torch \
  --out "$WORK/torch-out"
if grep -q '^## PyTorch' "$WORK/torch-out/summary.md" &&
   grep -q 'rank 1: libnccl mapped: /elsewhere/libnccl.so.2 (NOT Braid)' "$WORK/torch-out/summary.md" &&
   grep -q '^### torch: exit 1' "$WORK/torch-out/summary.md"; then
  pass "gpu-check's summary shows each rank's library and the torch failure"
else
  fail "gpu-check's summary after a torch failure:"; sed 's/^/    | /' "$WORK/torch-out/summary.md" | tail -25
fi

# ----------------------------------------------------- --prepare, the run
PREP=$WORK/prep
expect "--prepare --no-build from $BUILD" 0 "prepared .*prep: [0-9]+ MiB" 120 -- \
  scripts/gpu-check --prepare "$PREP" --no-build --from "$BUILD"
for f in lib/libnccl.so.2 bin/gpu-probe bin/all_reduce_perf bin/nccl-compare tests/unit/test_exec_cuda \
         tests/host/test_allreduce tests/host/test_collectives tests/host/test_register \
         tests/gpu/test_graph tests/gpu/test_rma_graph tests/gpu/test_abort tests/gpu/nvls_probe; do
  [[ -f $PREP/$f ]] && grep -q "^file=$f " "$PREP/MANIFEST" || fail "--prepare: $f is not in $PREP or its MANIFEST"
done
# The prepared cmocka filter (the sanitizer step's 2-rank case of
# test_graph): preloaded, it leaves exactly the named case.
if [[ -f $PREP/deps/cmocka-filter.so ]]; then
  BRAID_DEVICE=cuda BRAID_TEST_QUICK=1 BRAID_TEST_GRAPH_REPLAYS=1 LD_PRELOAD=$PREP/deps/cmocka-filter.so \
    GPU_CHECK_TEST_FILTER=test_graph_2ranks timeout -k 5 120 "$SIM/tests/test_graph" >"$WORK/filter.out" 2>&1
  if grep -q '^\[ RUN      \] test_graph_2ranks' "$WORK/filter.out" &&
     ! grep -q '^\[ RUN      \] test_graph_4ranks' "$WORK/filter.out" &&
     grep -q '^\[  PASSED  \] 1 test' "$WORK/filter.out"; then
    pass "--prepare's cmocka filter runs test_graph_2ranks alone"
  else
    fail "--prepare's cmocka filter:"; tail -n 20 "$WORK/filter.out" | sed 's/^/    | /'
  fi
else
  fail "--prepare made no deps/cmocka-filter.so"
fi
grep -q "^gpu-check: with the working tree .* carries [0-9]* MiB of 64 MiB" "$WORK/out" &&
  pass "--prepare prints what the device call carries" || fail "--prepare did not print the size it carries"
expect "--prepare from a build that lacks a program" 2 "missing from .*/empty: .*lib/libnccl.so.2" 20 -- \
  scripts/gpu-check --prepare "$WORK/p2" --no-build --from "$WORK/empty"

# The GPU run on the prepared directory, here: no GPU, so every step must
# find its files and skip; a FAIL means a wrong path in the run.
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP the run on the prepared directory without a GPU: this machine has one"
else
  # As if the copy to the GPU machine had lost the execute bits.
  chmod a-x "$PREP/bin/gpu-probe" "$PREP/tests/gpu/test_graph"
  expect "the run on the prepared directory without a GPU" 0 "gpu-check: done in" 300 -- \
    env -u BUILD scripts/gpu-check --build "$PREP" --out "$WORK/run"
  grep -q "bin/gpu-probe was not executable; made it so" "$WORK/out" && [[ -x $PREP/tests/gpu/test_graph ]] &&
    pass "the run restores execute bits lost on the way" || fail "the run left the execute bits off"
  has_rows "the run without a GPU: every step found its files and skipped" "$WORK/run/summary.md" \
    probe=SKIP nvls=SKIP exec=SKIP matrix=SKIP graph=SKIP rma=SKIP abort=SKIP shared=SKIP sanitizer=SKIP torch=SKIP perf=SKIP
fi

# ------------------------------------------------------------ rehearsal
REH=$WORK/reh
expect "--rehearse on $SIM" 0 "gpu-check: done in" 600 -- \
  scripts/gpu-check --rehearse --build "$BUILD" --out "$REH"
has_rows "rehearsal: every step ran" "$REH/summary.md" \
  probe=PASS "nvls=PASS|SKIP" exec=PASS matrix=PASS graph=PASS rma=PASS abort=PASS shared=PASS "sanitizer=PASS|SKIP" "torch=PASS|SKIP" perf=PASS
for f in summary.md summary.json probe.txt report.md logs.tgz; do
  [[ -s $REH/$f ]] || fail "rehearsal did not write $f"
done
n=$(find "$REH" -type f | wc -l)
((n <= 8)) && pass "rehearsal wrote $n files (a device call brings back 8)" || fail "rehearsal wrote $n files (over 8)"
if grep -q '^name=Braid CUDA simulator$' "$REH/probe.txt" && grep -q '^multicast_bind=no' "$REH/probe.txt"; then
  pass "probe.txt names the simulated device and the multicast outcome"
else
  fail "probe.txt:"; sed 's/^/    | /' "$REH/probe.txt"
fi
if python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
assert d["failed"] == [], d["failed"]
assert [s["step"] for s in d["steps"]] == "probe nvls exec matrix graph rma abort shared sanitizer torch latency perf".split(), d["steps"]
assert d["probe"]["compute_capability"] == "9.0"
assert d["bench"] and any(r["run"] == "ar-8" and r["pass"] for r in d["bench"]["runs"])
' "$REH/summary.json" 2>"$WORK/err"; then
  pass "summary.json: every step, no failure, probe and bench figures"
else
  fail "summary.json: $(tail -n 1 "$WORK/err")"
fi
mkdir -p "$WORK/logs" && tar -xzf "$REH/logs.tgz" -C "$WORK/logs" 2>/dev/null
missing=
for f in probe nvls exec matrix graph rma abort shared sanitizer torch latency perf; do
  [[ -s $WORK/logs/logs/$f.log ]] || missing+=" $f.log"
done
for f in ar-1.txt ar-8.txt ar-8-graph.txt compare.json report.md; do
  [[ -s $WORK/logs/logs/bench/$f ]] || missing+=" bench/$f"
done
[[ -z $missing ]] && pass "logs.tgz holds every step's log and bench-gpu's raw outputs" ||
  fail "logs.tgz lacks:$missing"

# --------------------------------------------------- a broken rehearsal
# A build whose test_graph fails and whose test_abort is missing.
BROKEN=$WORK/broken
mkdir -p "$BROKEN/cudasim-dev/bin" "$BROKEN/cudasim-dev/tests"
ln -s "$(cd "$SIM/bin" && pwd -P)/gpu-probe" "$BROKEN/cudasim-dev/bin/gpu-probe"
printf '#!/bin/sh\necho "starting"\necho "test_graph: replay 7, rank 1: wrong value at 3 (want 5, got 0)"\nexit 3\n' \
  >"$BROKEN/cudasim-dev/tests/test_graph"
chmod +x "$BROKEN/cudasim-dev/tests/test_graph"
expect "a broken rehearsal exits 1" 1 "failed: graph abort" 120 -- \
  scripts/gpu-check --rehearse --build "$BROKEN" --steps probe,graph,abort --out "$WORK/broken-out"
has_rows "a broken rehearsal: the summary says FAIL for the broken steps only" \
  "$WORK/broken-out/summary.md" probe=PASS graph=FAIL abort=FAIL
if grep -q 'wrong value at 3' "$WORK/broken-out/summary.md" &&
   grep -q "missing .*cudasim-dev/tests/test_abort" "$WORK/broken-out/summary.md"; then
  pass "a broken rehearsal: the summary quotes the failure and names the missing program"
else
  fail "a broken rehearsal: summary.md lacks the failure's lines:"
  sed 's/^/    | /' "$WORK/broken-out/summary.md" | tail -20
fi

# ------------------------------------------------------------- budget
expect "a spent budget" 0 "NOT RUN" 60 -- \
  scripts/gpu-check --rehearse --build "$BUILD" --budget 2 --steps probe,graph --out "$WORK/budget"
has_rows "a spent budget leaves the steps NOT RUN" "$WORK/budget/summary.md" "probe=NOT RUN" "graph=NOT RUN"

# --full-matrix: matrix.sh without BRAID_TEST_QUICK (cut off by a small
# budget: only how it starts is checked).
scripts/gpu-check --rehearse --build "$BUILD" --full-matrix --steps matrix --budget 8 \
  --out "$WORK/full" >"$WORK/out" 2>&1
mkdir -p "$WORK/full-logs" && tar -xzf "$WORK/full/logs.tgz" -C "$WORK/full-logs" 2>/dev/null
if grep -qx -- "-- test_allreduce, BRAID_DEVICE=cuda" "$WORK/full-logs/logs/matrix.log" 2>/dev/null; then
  pass "--full-matrix runs matrix.sh without BRAID_TEST_QUICK"
else
  fail "--full-matrix: matrix.log:"; sed 's/^/    | /' "$WORK/full-logs/logs/matrix.log" 2>/dev/null | head
fi

if ((failures > 0)); then
  echo "FAIL: gpu-check: $failures check(s) failed"
  exit 1
fi
echo "PASS: gpu-check: prepare, the run without a GPU, the rehearsal and its failures"
