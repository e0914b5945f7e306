#!/usr/bin/env bash
# The GPU benchmark tooling, on a machine without a GPU:
#  - nccl-compare's argument errors (no --lib, an unreadable path, something
#    that is not a shared library, a library missing nccl* symbols, one that
#    hangs, one that crashes) give clear messages and non-zero exits, and
#    without a GPU it prints SKIP and exits 0 (also writing its JSON);
#  - scripts/bench-gpu parses (bash -n), rejects bad arguments, prints SKIP
#    without a GPU, and its --report-only step turns the canned raw outputs
#    in tests/host/data/bench-gpu/ into the table whose verdicts and B/(2N)
#    arithmetic are listed here by hand;
#  - the whole bench-gpu run, in host mode behind a stand-in nvidia-smi,
#    writes every raw output and a report; so does gpu-check's plan
#    (--plan check), whose --strict exits 1 on a failed run.
# nccl-compare exists only in CUDA builds; its checks skip in CUDA=0 builds.
# Environment: BUILD (build directory, default build).
set -uo pipefail

BUILD=${BUILD:-build}
COMPARE=$BUILD/bin/nccl-compare
FIXTURE=tests/host/data/bench-gpu
WORK=$(mktemp -d "${TMPDIR:-/tmp}/braid-bench-gpu-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

failures=0
pass() { echo "PASS $*"; }
skip() { echo "SKIP $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

# expect NAME WANT_RC PATTERN -- COMMAND...: runs COMMAND (stdout and stderr
# to $WORK/out), checks its exit status and that the output matches PATTERN.
expect() {
  local name=$1 want=$2 pattern=$3
  shift 4
  timeout -k 5 60 "$@" >"$WORK/out" 2>&1
  local rc=$?
  if [[ $rc -ne $want ]]; then
    fail "$name: exit $rc, expected $want; output:"
    sed 's/^/    | /' "$WORK/out" | head -20
  elif ! grep -Eq -- "$pattern" "$WORK/out"; then
    fail "$name: output lacks /$pattern/; output:"
    sed 's/^/    | /' "$WORK/out" | head -20
  else
    pass "$name"
  fi
}

gpu_visible() { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }

# ------------------------------------------------------------ nccl-compare
if [[ ! -x $COMPARE ]]; then
  skip "nccl-compare checks: $COMPARE is not built (a CUDA=0 build has no nccl-compare)"
else
  expect "nccl-compare without --lib" 2 "no library given: pass --lib PATH" -- "$COMPARE"
  expect "nccl-compare --lib with no value" 2 "--lib needs a value" -- "$COMPARE" --lib
  expect "nccl-compare unknown option" 2 "unknown option --frobnicate" -- \
    "$COMPARE" --frobnicate
  expect "nccl-compare stray argument" 2 "unexpected argument 'extra'" -- \
    "$COMPARE" --lib "$BUILD/lib/libnccl.so.2" extra
  expect "nccl-compare --init-reps 0" 2 "--init-reps wants an integer from 1 to 32, not '0'" -- \
    "$COMPARE" --lib "$BUILD/lib/libnccl.so.2" --init-reps 0
  expect "nccl-compare missing library" 2 \
    "cannot read --lib $WORK/none/libnccl.so.2: No such file or directory" -- \
    "$COMPARE" --lib "$WORK/none/libnccl.so.2"
  # Root can read anything, so an unreadable file is made by permissions
  # only for other users; as root a file that is no ELF stands in.
  echo "not a library" >"$WORK/unreadable.so"
  chmod 000 "$WORK/unreadable.so"
  if [[ $(id -u) -ne 0 ]]; then
    expect "nccl-compare unreadable library" 2 \
      "cannot read --lib $WORK/unreadable.so: Permission denied" -- \
      "$COMPARE" --lib "$WORK/unreadable.so"
  else
    expect "nccl-compare file that is not a library" 1 \
      "unreadable.so: dlopen failed: .*(invalid ELF header|file too short)" -- \
      "$COMPARE" --lib "$WORK/unreadable.so"
  fi

  CC_=${CC:-cc}
  command -v "$CC_" >/dev/null 2>&1 || CC_=gcc
  if ! command -v "$CC_" >/dev/null 2>&1; then
    skip "nccl-compare stub libraries: no C compiler"
  else
    # A library with ncclGetVersion only; one that hangs in it; one that
    # crashes in it. ncclGetVersion runs before any GPU is looked for.
    cat >"$WORK/stub.c" <<'EOF'
#include <signal.h>
#include <unistd.h>
int ncclGetVersion(int *v);
int ncclGetUniqueId(void *id);
int ncclCommInitRank(void **c, int n, char id[128], int r);
int ncclCommDestroy(void *c);
int ncclAllReduce(const void *s, void *r, unsigned long n, int t, int o, void *c, void *st);
const char *ncclGetErrorString(int r);
int ncclGetVersion(int *v) {
#if defined(STUB_HANG)
  for (;;) pause();
#elif defined(STUB_CRASH)
  raise(SIGSEGV);
#endif
  *v = 22809;
  return 0;
}
#ifndef STUB_PARTIAL
int ncclGetUniqueId(void *id) { (void)id; return 0; }
int ncclCommInitRank(void **c, int n, char id[128], int r) { (void)c; (void)n; (void)id; (void)r; return 0; }
int ncclCommDestroy(void *c) { (void)c; return 0; }
int ncclAllReduce(const void *s, void *r, unsigned long n, int t, int o, void *c, void *st) {
  (void)s; (void)r; (void)n; (void)t; (void)o; (void)c; (void)st; return 0;
}
const char *ncclGetErrorString(int r) { (void)r; return "stub"; }
#endif
EOF
    ok=1
    "$CC_" -shared -fPIC -DSTUB_PARTIAL -o "$WORK/libpartial.so" "$WORK/stub.c" || ok=0
    "$CC_" -shared -fPIC -DSTUB_HANG -o "$WORK/libhang.so" "$WORK/stub.c" || ok=0
    "$CC_" -shared -fPIC -DSTUB_CRASH -o "$WORK/libcrash.so" "$WORK/stub.c" || ok=0
    if [[ $ok -ne 1 ]]; then
      fail "building the stub libraries with $CC_"
    else
      expect "nccl-compare library missing nccl symbols" 1 \
        "libpartial.so: symbol ncclGetUniqueId not found .*not an NCCL library" -- \
        "$COMPARE" --lib "$WORK/libpartial.so"
      start=$SECONDS
      expect "nccl-compare library that hangs (--timeout 2)" 1 \
        "libhang.so: no result after 2 s \(--timeout\): the library hung; the child was killed" -- \
        "$COMPARE" --lib "$WORK/libhang.so" --timeout 2
      if ((SECONDS - start > 20)); then
        fail "nccl-compare --timeout 2 took $((SECONDS - start)) s"
      fi
      expect "nccl-compare library that crashes" 1 \
        "libcrash.so: the child measuring it died of signal 11" -- \
        "$COMPARE" --lib "$WORK/libcrash.so"
      # One bad library does not hide the others: both are reported.
      CUDA_VISIBLE_DEVICES='' expect "nccl-compare one bad library of two" 1 \
        "lib 2: .*libpartial.so FAILED: symbol ncclGetUniqueId not found" -- \
        "$COMPARE" --lib "$BUILD/lib/libnccl.so.2" --lib "$WORK/libpartial.so"
    fi
  fi

  # No GPU: SKIP and exit 0. CUDA_VISIBLE_DEVICES hides any GPU there is.
  CUDA_VISIBLE_DEVICES='' expect "nccl-compare without a GPU" 0 \
    "^SKIP: nccl-compare: no GPU visible \(cudaGetDeviceCount: .*\); nothing measured" -- \
    "$COMPARE" --lib "$BUILD/lib/libnccl.so.2" --json "$WORK/skip.json"
  if python3 -c 'import json, sys
d = json.load(open(sys.argv[1]))
l = d["libraries"]
assert d["tool"] == "nccl-compare" and len(l) == 1, d
assert l[0]["status"] == "skip" and "no GPU visible" in l[0]["error"], l
assert l[0]["path"].endswith("lib/libnccl.so.2"), l' "$WORK/skip.json" 2>"$WORK/err"; then
    pass "nccl-compare --json without a GPU records the skip"
  else
    fail "nccl-compare --json without a GPU: $(cat "$WORK/err")"
  fi
  CUDA_VISIBLE_DEVICES='' expect "nccl-compare --json into a missing directory" 1 \
    "cannot write --json $WORK/none/x.json: No such file or directory" -- \
    "$COMPARE" --lib "$BUILD/lib/libnccl.so.2" --json "$WORK/none/x.json"
fi

# -------------------------------------------------------- scripts/bench-gpu
if bash -n scripts/bench-gpu; then pass "bash -n scripts/bench-gpu"; else fail "bash -n scripts/bench-gpu"; fi
expect "bench-gpu unknown argument" 1 "unknown argument '--frobnicate'" -- \
  scripts/bench-gpu --frobnicate
expect "bench-gpu --launch with a bad mode" 1 "--launch: 'sideways' is not threads, group or procs" -- \
  scripts/bench-gpu --launch sideways
expect "bench-gpu --report-only on a missing directory" 1 "--report-only: $WORK/none is not a directory" -- \
  scripts/bench-gpu --report-only "$WORK/none"
expect "bench-gpu --help" 0 "report-only DIR" -- scripts/bench-gpu --help

if ! command -v python3 >/dev/null 2>&1; then
  skip "bench-gpu report checks: python3 is needed to format the report"
else
  cp -r "$FIXTURE" "$WORK/fixture"
  expect "bench-gpu --report-only on the canned outputs" 0 "^# Braid on one GPU" -- \
    scripts/bench-gpu --report-only "$WORK/fixture"
  # Every verdict and figure below is worked out by hand from the canned
  # numbers (tests/host/data/bench-gpu/README.md), not by the report code:
  # B = max(2980, 3000) = 3000 GB/s; bound B/(2N) = 750, 375, 187.5;
  # algbw = 268435456 B / time: 671.09 us -> 400.0, 1789.57 -> 150.0,
  # 2684.35 -> 100.0 GB/s; init limit 90/5 = 18 ms (15 passes) and
  # 400/5 = 80 ms (120 fails); memory 96 MiB against 300/4 = 75 (fails).
  if python3 - "$WORK/fixture/summary.json" >"$WORK/err" 2>&1 <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
problems = []
def near(a, b, tol=0.02):
    return a is not None and abs(a - b) <= tol
if not near(s["B_gbps"], 3000.0):
    problems.append(f"B = {s['B_gbps']}, expected 3000")
want_bound = {1: (1412.82, 1500.0), 2: (400.0, 750.0), 4: (150.0, 375.0), 8: (100.0, 187.5)}
for b in s["bound"]:
    alg, bound = want_bound[b["ranks"]]
    if not near(b["algbw"], alg) or not near(b["bound"], bound) or \
       not near(b["fraction"], alg / bound, 1e-4):
        problems.append(f"bound row {b}, expected algbw {alg} bound {bound}")
want = {
    "1 rank, time per all-reduce, 8 B (stream)": (5.0, True),
    "1 rank, time per all-reduce, 8 B (graph)": (3.0, False),
    "1 rank, time per all-reduce, 64 KiB (stream)": (7.0, False),
    "1 rank, time per all-reduce, 64 KiB (graph)": (4.5, True),
    "1 rank, time per all-reduce, 256 MiB (stream)": (190.0, True),
    "1 rank, time per all-reduce, 256 MiB (graph)": (189.0, True),
    "ncclCommInitRank, 1 rank, median of fresh comms": (15.0, True),
    "ncclCommInitRank, 1 rank, first comm of the process": (120.0, False),
    "device memory per communicator (cudaMemGetInfo)": (96.0, False),
    "2 ranks sharing the GPU, algbw at 256 MiB": (400.0, True),
    "4 ranks sharing the GPU, algbw at 256 MiB": (150.0, False),
    "8 ranks sharing the GPU, algbw at 256 MiB": (100.0, True),
    "8 ranks sharing the GPU, 8 B all-reduce from a CUDA graph (-G)": (12.5, True),
}
limits = {"ncclCommInitRank, 1 rank, median of fresh comms": 18.0,
          "ncclCommInitRank, 1 rank, first comm of the process": 80.0,
          "device memory per communicator (cudaMemGetInfo)": 75.0,
          "2 ranks sharing the GPU, algbw at 256 MiB": 375.0,
          "4 ranks sharing the GPU, algbw at 256 MiB": 187.5,
          "8 ranks sharing the GPU, algbw at 256 MiB": 93.75}
got = {t["target"]: t for t in s["targets"]}
if set(got) != set(want):
    problems.append(f"targets {sorted(got)} differ from {sorted(want)}")
for name, (value, ok) in want.items():
    t = got.get(name)
    if t is None:
        continue
    if not near(t["braid"], value) or t["pass"] is not ok:
        problems.append(f"{name}: {t['braid']} {t['pass']}, expected {value} {ok}")
    if name in limits and not near(t["limit_value"], limits[name]):
        problems.append(f"{name}: limit {t['limit_value']}, expected {limits[name]}")
if s["targets_met"] != 8:
    problems.append(f"targets_met {s['targets_met']}, expected 8")
runs = {r["run"]: r["pass"] for r in s["runs"]}
want_runs = {"ar-1": True, "ar-2": True, "ar-4": True, "ar-8": True, "ar-8-graph": True,
             "check-1": True, "check-2": False, "check-4": None, "check-8": False,
             "reg-2": None, "reg-4": True, "reg-8": None, "ar-1-nvidia": True}
# reg-4: 268435456 B in 1073.74 us = 250.0 GB/s against 3000/8 = 375.
reg = {r["ranks"]: r for r in s.get("registered", [])}
if set(reg) != {2, 4, 8} or not near(reg[4]["algbw"], 250.0) or \
   not near(reg[4]["fraction"], 250.0 / 375.0, 1e-4) or reg[2]["algbw"] is not None:
    problems.append(f"registered rows {s.get('registered')}")
for k, v in want_runs.items():
    if runs.get(k, "absent") is not v:
        problems.append(f"run {k}: {runs.get(k, 'absent')}, expected {v}")
if problems:
    print("\n".join(problems))
    sys.exit(1)
PY
  then
    pass "bench-gpu report: verdicts, limits and B/(2N) arithmetic"
  else
    fail "bench-gpu report arithmetic:"
    sed 's/^/    | /' "$WORK/err"
  fi
  report=$WORK/fixture/report.md
  for line in \
    '| 4 | 1789.57 | 150.0 | 225.0 | 375.0 | 40.0% |' \
    '| 4 ranks sharing the GPU, algbw at 256 MiB | 150.0 GB/s | - | >= 50% of B/(2N) = 187.5 GB/s | **FAIL** |' \
    '| check-2 | **FAIL** | exit 7, 2 sizes, 4 results checked, 3 wrong values, library 2.28.9+braid0.1.0 |' \
    '8 of 13 targets met; runs that failed: check-2, check-8.' \
    '| 256 MiB | 190.00 | 188.00 | 671.09 | 1789.57 | 2684.35 |  |' \
    '| 4 | 1073.74 | 250.0 | 375.0 | 66.7% | 0 |' \
    '| 8 | n/a | n/a | 187.5 | n/a | not run |' \
    '| reg-4 | PASS | exit 0, 1 sizes, 2 results checked, 0 wrong values, library 2.28.9+braid0.1.0 |'; do
    if grep -qxF -- "$line" "$report"; then
      pass "report.md has: $line"
    else
      fail "report.md lacks: $line"
    fi
  done
fi

# A stand-in nvidia-smi: one that fails (no GPU), one that names a GPU.
mkdir -p "$WORK/nogpu" "$WORK/fakegpu"
printf '#!/bin/sh\necho "NVIDIA-SMI has failed" >&2\nexit 9\n' >"$WORK/nogpu/nvidia-smi"
cat >"$WORK/fakegpu/nvidia-smi" <<'EOF'
#!/bin/sh
case "$1" in
  -L) echo "GPU 0: Stand-in GPU (UUID: GPU-0)" ;;
  --query-gpu=*) echo "Stand-in GPU, 1.0, 1024 MiB" ;;
  *) echo "stand-in nvidia-smi" ;;
esac
EOF
chmod +x "$WORK/nogpu/nvidia-smi" "$WORK/fakegpu/nvidia-smi"

if [[ ! -x $COMPARE || ! -x $BUILD/bin/all_reduce_perf || ! -f $BUILD/lib/libnccl.so.2 ]]; then
  skip "bench-gpu runs: $BUILD lacks nccl-compare or all_reduce_perf (a CUDA=0 build)"
elif ! command -v python3 >/dev/null 2>&1; then
  skip "bench-gpu runs: python3 is needed to format the report"
else
  PATH=$WORK/nogpu:$PATH BUILD=$BUILD expect "bench-gpu without a GPU" 0 \
    "^SKIP: bench-gpu: no GPU visible" -- scripts/bench-gpu --out "$WORK/none-run"
  [[ -e $WORK/none-run ]] && fail "bench-gpu without a GPU created $WORK/none-run"

  # The whole run in host mode: every step runs and leaves its raw output;
  # nccl-compare skips (no GPU); a copy of Braid's library stands in for
  # NVIDIA's, which the report must notice.
  cp "$BUILD/lib/libnccl.so.2" "$WORK/stand-in-libnccl.so.2"
  PATH=$WORK/fakegpu:$PATH BUILD=$BUILD BRAID_DEVICE=host CUDA_VISIBLE_DEVICES='' \
    expect "bench-gpu --quick in host mode" 0 "\[11/17\] all_reduce_perf, 1 rank, NVIDIA's NCCL: exit 0" -- \
    scripts/bench-gpu --quick --sizes "-b 8 -e 4K -f 8" --out "$WORK/run" \
    --nccl "$WORK/stand-in-libnccl.so.2"
  missing=
  for f in meta.txt nvidia-smi.txt compare-log.txt compare.json ar-1.txt ar-2.txt ar-4.txt \
           ar-8.txt ar-8-graph.txt check-1.txt check-2.txt check-4.txt check-8.txt \
           reg-2.txt reg-4.txt reg-8.txt ctas-2.txt ctas-4.txt ctas-8.txt ar-1-nvidia.txt report.md summary.json; do
    [[ -s $WORK/run/$f ]] || missing+=" $f"
  done
  if [[ -z $missing ]]; then pass "bench-gpu wrote every raw output"; else fail "bench-gpu did not write:$missing"; fi
  for line in \
    '| check-8 | PASS | exit 0, 4 sizes, 8 results checked, 0 wrong values, library 2.30.7+braid0.1.0 |' \
    '| ar-1-nvidia | **FAIL** | exit 0, 4 sizes, values not checked (timing only), library 2.30.7+braid0.1.0 (LD_PRELOAD did not take: this run used Braid) |' \
    '| reg-8 | PASS | exit 0, 4 sizes, 8 results checked, 0 wrong values, library 2.30.7+braid0.1.0 |'; do
    if grep -qxF -- "$line" "$WORK/run/report.md" 2>/dev/null; then
      pass "host-mode report.md has: ${line:0:40}..."
    else
      fail "host-mode report.md lacks: $line"
    fi
  done
  if grep -q '^command=scripts/bench-gpu --quick --sizes "-b 8 -e 4K -f 8"$' "$WORK/run/meta.txt"; then
    pass "bench-gpu meta.txt records the command"
  else
    fail "bench-gpu meta.txt: $(grep ^command= "$WORK/run/meta.txt")"
  fi
  PATH=$WORK/fakegpu:$PATH BUILD=$BUILD expect "bench-gpu refuses a non-empty --out" 1 "is not empty; give a new --out" -- \
    scripts/bench-gpu --out "$WORK/run"

  # scripts/gpu-check's plan: nine runs, NVIDIA's third; --strict turns the
  # report's failed run (the stand-in is Braid) into exit 1.
  PATH=$WORK/fakegpu:$PATH BUILD=$BUILD BRAID_DEVICE=host CUDA_VISIBLE_DEVICES='' \
    expect "bench-gpu --plan check --strict" 1 "--strict: runs that failed: ar-1-nvidia$" -- \
    scripts/bench-gpu --plan check --strict --quick --sizes "-b 8 -e 4K -f 8" --out "$WORK/run-check" \
    --nccl "$WORK/stand-in-libnccl.so.2"
  have=$(cd "$WORK/run-check" 2>/dev/null && ls ./*.txt | tr '\n' ' ')
  want="./ar-1-nvidia.txt ./ar-1.txt ./ar-2.txt ./ar-4.txt ./ar-8-graph.txt ./ar-8.txt ./check-4.txt ./compare-log.txt ./ctas-2.txt ./meta.txt ./nvidia-smi.txt ./reg-4.txt "
  if [[ $have == "$want" ]] && grep -q '^\[3/10\] all_reduce_perf, 1 rank, NVIDIA' "$WORK/out"; then
    pass "bench-gpu --plan check ran its ten runs, NVIDIA's third"
  else
    fail "bench-gpu --plan check wrote: $have"
  fi
fi
expect "bench-gpu --plan with a bad plan" 1 "--plan: 'tiny' is not full or check" -- \
  scripts/bench-gpu --plan tiny
expect "bench-gpu --sim with a --perf that is missing" 1 \
  "program given by --perf, --compare or --lib is missing; nothing was run" -- \
  scripts/bench-gpu --sim --perf "$WORK/none/all_reduce_perf" --out "$WORK/sim-none"

if [[ $failures -ne 0 ]]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "all bench-gpu checks passed"
