#!/usr/bin/env bash
# End-to-end check of the nccl-tests-compatible benchmarks in host mode.
#
# Runs every build/bin/*_perf tool in the launch modes it supports (threads,
# ranks per thread, forked processes) and checks its output against
# nccl-tests' layout and arithmetic, computed here independently: one
# "Using devices" line per rank, 13 columns per row, count = size / type
# size (per collective), busbw = algbw x the collective's factor, no wrong
# values, the OK footer, exit 0. Also validates the -J file with python3's
# json module and that tools/plot draws a PNG.
#
# A tool whose collective the library does not implement yet fails with
# "... is not implemented"; that run is reported as SKIP, any other failure
# as FAIL. Environment: BUILD (build directory, default build).
set -uo pipefail

BUILD=${BUILD:-build}
BIN=$BUILD/bin
export BRAID_DEVICE=${BRAID_DEVICE:-host}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/braid-perf-test.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
# The tools' private log directories go here, so leftovers can be spotted.
mkdir -p "$WORK/tmp"

failures=0
pass() { echo "PASS $*"; }
skip() { echo "SKIP $*"; }
fail() { echo "FAIL $*"; failures=$((failures + 1)); }

if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP perf output checks: python3 is needed to parse the output"
  exit 0
fi

# Checks one run's text output. Arguments: tool nranks minbytes maxbytes
# stepfactor outfile [expected-rows]. Prints problems, exits non-zero on any.
check_output() {
  python3 - "$@" <<'PY'
import re, sys

tool, nranks, minb, maxb, factor, path = sys.argv[1:7]
expect_rows = int(sys.argv[7]) if len(sys.argv) > 7 else None
n, minb, maxb, factor = int(nranks), int(minb), int(maxb), int(factor)
lines = open(path).read().splitlines()
problems = []

# Bus-bandwidth factor and count rule per collective (nccl-tests').
split = tool in ("all_gather", "reduce_scatter", "alltoall", "gather", "scatter")
busf = {"all_reduce": 2.0 * (n - 1) / n}.get(tool, (n - 1) / n if split else 1.0)
tsize = {"int8": 1, "uint8": 1, "int32": 4, "uint32": 4, "int64": 8, "uint64": 8,
         "half": 2, "float": 4, "double": 8, "bfloat16": 2, "f8e4m3": 1, "f8e5m2": 1}

if not lines or not re.match(r"^# Braid %s_perf version \S+ " % tool, lines[0]):
    problems.append("first line is not the '# Braid <tool> version' line")

rank_re = re.compile(r"^#  Rank +(\d+) Group +(\d+) Pid +(\d+) on +(\S+) device +(\d+) "
                     r"\[[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\] \S.*$")
ranks = [int(m.group(1)) for m in map(rank_re.match, lines) if m]
if ranks != list(range(n)):
    problems.append(f"'#  Rank' lines name ranks {ranks}, expected 0..{n - 1}")
if sum(1 for l in lines if l.startswith("#  Rank")) != n:
    problems.append("a '#  Rank' line does not have nccl-tests' layout")

hdr = [l for l in lines if re.match(r"^#\s+size\s+count\s+type\s+redop\s+root\s+time\s+algbw\s+busbw\s+#wrong\s+time\s+algbw\s+busbw\s+#wrong\s*$", l)]
units = [l for l in lines if re.match(r"^#\s+\(B\)\s+\(elements\)\s+\(us\)\s+\(GB/s\)\s+\(GB/s\)\s+\(us\)\s+\(GB/s\)\s+\(GB/s\)\s*$", l)]
if len(hdr) != 1 or len(units) != 1:
    problems.append("column header lines missing")

def prec(s):
    """Half of the last printed digit: what rounding may have cost."""
    if "e" in s:
        mant, exp = s.split("e")
        d = len(mant.split(".")[1]) if "." in mant else 0
        return 0.5 * 10 ** (int(exp) - d)
    return 0.5 * 10 ** -(len(s.split(".")[1]) if "." in s else 0)

rows = [l for l in lines if l and not l.startswith("#") and re.match(r"^\s+\d", l)]
sizes = []
for l in rows:
    f = l.split()
    if len(f) != 13:
        problems.append(f"row has {len(f)} columns, not 13: {l!r}")
        continue
    size, count, typ, op, root = int(f[0]), int(f[1]), f[2], f[3], int(f[4])
    sizes.append(size)
    ts = tsize.get(typ)
    if ts is None:
        problems.append(f"unknown type {typ!r}")
        continue
    want = count * ts * (n if split else 1)
    if size != want:
        problems.append(f"size {size} != count {count} x {ts}{' x ' + str(n) if split else ''}")
    if tool in ("all_gather", "alltoall", "broadcast", "gather", "scatter") and op != "none":
        problems.append(f"redop column should say none: {l!r}")
    if tool not in ("broadcast", "reduce", "gather", "scatter") and root != -1:
        problems.append(f"root column should be -1: {l!r}")
    for half, (t, a, b, w) in (("out-of-place", f[5:9]), ("in-place", f[9:13])):
        if t == "N/A":
            if not (tool == "alltoall" and half == "in-place"):
                problems.append(f"{half} unexpectedly N/A: {l!r}")
            continue
        ta, tb, tt = float(a), float(b), float(t)
        if abs(tb - ta * busf) > prec(b) + busf * prec(a) + 1e-9:
            problems.append(f"{half} busbw {b} != algbw {a} x {busf:.4f}: {l!r}")
        if tt > 0 and ta >= 1.0:
            alg = size / 1e3 / tt
            if abs(alg - ta) > prec(a) + alg * prec(t) / tt + 1e-9:
                problems.append(f"{half} algbw {a} != size/time {alg:.4f}: {l!r}")
        if w == "N/A":
            if not (tool == "sendrecv" and half == "in-place"):
                problems.append(f"{half} #wrong unexpectedly N/A: {l!r}")
        elif w != "0":
            problems.append(f"{half} has {w} wrong values: {l!r}")

# The sizes nccl-tests visits: min, then x factor, up to max.
expected, s = [], minb
while s <= maxb:
    c = s // 4  # every run here uses float unless it sweeps types
    if split:
        c = (c // n) & ~3
        expected.append(c * 4 * n)
    else:
        expected.append(c * 4)
    s *= factor
if expect_rows is not None:
    if len(rows) != expect_rows:
        problems.append(f"{len(rows)} rows, expected {expect_rows}")
elif sizes != expected:
    problems.append(f"row sizes {sizes}, expected {expected}")

if not any(re.match(r"^# Out of bounds values : 0 OK$", l) for l in lines):
    problems.append("footer '# Out of bounds values : 0 OK' missing")
if not any(re.match(r"^# Avg bus bandwidth    : [0-9.e+-]+ ?$", l) for l in lines):
    problems.append("footer '# Avg bus bandwidth' missing")
if not any(l == "# Collective test concluded: %s_perf" % tool for l in lines):
    problems.append("'# Collective test concluded' line missing")
if "#" not in lines[-3:]:
    problems.append("trailing '#' line missing")
for p in problems[:12]:
    print("    " + p)
sys.exit(1 if problems else 0)
PY
}

# Validates the -J file against the text rows. Arguments: json outfile nranks.
check_json() {
  python3 - "$@" <<'PY'
import json, sys
path, text, nranks = sys.argv[1], sys.argv[2], int(sys.argv[3])
problems = []
try:
    doc = json.load(open(path))
except (OSError, ValueError) as e:
    print(f"    cannot parse {path}: {e}")
    sys.exit(1)
for key in ("version", "tool", "device", "nranks", "mode", "commit", "date", "config", "results"):
    if key not in doc:
        problems.append(f"top-level key {key!r} missing")
if doc.get("nranks") != nranks:
    problems.append(f"nranks {doc.get('nranks')} != {nranks}")
if doc.get("mode") != "host":
    problems.append(f"mode {doc.get('mode')!r}, expected 'host'")
if len(doc.get("config", {}).get("devices", [])) != nranks:
    problems.append("config.devices does not list every rank")
rows = [l.split() for l in open(text) if l.strip() and l[0] != "#" and l.split()[0].isdigit()]
res = doc.get("results", [])
if len(res) != len(rows):
    problems.append(f"{len(res)} JSON rows for {len(rows)} text rows")
named = 0
for r, t in zip(res, rows):
    for key in ("size", "count", "type", "redop", "op", "root", "algo", "proto",
                "out_of_place", "in_place"):
        if key not in r:
            problems.append(f"row key {key!r} missing")
    if (r.get("size"), r.get("count")) != (int(t[0]), int(t[1])):
        problems.append(f"JSON row {r.get('size')}/{r.get('count')} != text {t[0]}/{t[1]}")
    for half in ("out_of_place", "in_place"):
        h = r.get(half) or {}
        for key in ("time", "alg_bw", "bus_bw", "nwrong"):
            if key not in h:
                problems.append(f"{half}.{key} missing")
        if h.get("nwrong") not in (0, None):
            problems.append(f"{half}.nwrong is {h.get('nwrong')}")
    named += r.get("algo") is not None and r.get("proto") is not None
if res and not any(r.get("count", 0) == 0 for r in res) and named == 0:
    problems.append("no row names the algorithm/protocol the tuner chose")
print(f"    {named}/{len(res)} rows name the algorithm and protocol")
for p in problems[:12]:
    print("    " + p)
sys.exit(1 if problems else 0)
PY
}

# run NAME NRANKS MINB MAXB FACTOR ROWS TOOL ARGS... -- runs and checks one
# configuration; ROWS is "" to derive the sizes from MINB/MAXB/FACTOR.
last_out=
last_ok=0
run() {
  local name=$1 nranks=$2 minb=$3 maxb=$4 factor=$5 rows=$6 tool=$7
  shift 7
  local out=$WORK/$name.out
  last_out=$out
  last_ok=0
  if [[ ! -x $BIN/${tool}_perf ]]; then
    fail "$name: $BIN/${tool}_perf was not built"
    return
  fi
  TMPDIR=$WORK/tmp timeout --kill-after=10 120 "$BIN/${tool}_perf" "$@" >"$out" 2>&1
  local rc=$?
  if [[ $rc -ne 0 ]] && grep -q "is not implemented" "$out"; then
    skip "$name: $(grep -o '[A-Za-z]* is not implemented' "$out" | head -1) yet (exit $rc)"
    return
  fi
  if [[ $rc -ne 0 ]]; then
    fail "$name: exit status $rc"
    tail -n 15 "$out" | sed 's/^/    | /'
    return
  fi
  if check_output "$tool" "$nranks" "$minb" "$maxb" "$factor" "$out" $rows; then
    pass "$name"
    last_ok=1
  else
    fail "$name: output does not match nccl-tests' format or arithmetic"
    sed -n '1,40p' "$out" | sed 's/^/    | /'
  fi
}

K=1024
M=$((1024 * 1024))

# all_reduce in the three launch modes; the -P run also writes JSON.
json=$WORK/all_reduce.json
run "all_reduce -P 2" 2 8 $M 4 "" all_reduce -b 8 -e 1M -f 4 -P 2 -J "$json"
if [[ $last_ok == 1 ]]; then
  if check_json "$json" "$last_out" 2; then pass "all_reduce -J"; else fail "all_reduce -J: JSON file incomplete"; fi
  leftovers=$(ls -A "$WORK/tmp")
  if [[ -n $leftovers ]]; then fail "all_reduce -J left files behind: $leftovers"; else pass "all_reduce -J cleans up its log"; fi
else
  skip "all_reduce -J: the run it checks did not complete"
fi
run "all_reduce -t 2" 2 8 $((256 * K)) 4 "" all_reduce -b 8 -e 256K -f 4 -t 2 -n 5
run "all_reduce -g 3" 3 8 $((256 * K)) 4 "" all_reduce -b 8 -e 256K -f 4 -g 3 -n 5
# Registered buffers (-R): symmetric windows registered inside a group by
# one thread for every rank, and ncclCommRegister with the symmetric
# promise; the results are checked (-c 1) on the in-place path.
run "all_reduce -g 2 -R 2" 2 8 $((4 * M)) 8 "" all_reduce -b 8 -e 4M -f 8 -g 2 -R 2 -n 3
BRAID_REGISTER_SYMMETRIC=1 run "all_reduce -P 2 -R 1" 2 8 $((4 * M)) 8 "" all_reduce -b 8 -e 4M -f 8 -P 2 -R 1 -n 3
# Every type and op, 3 ranks on one thread: 12 types x 6 ops, one size.
run "all_reduce -d all -o all" 3 1000 1000 2 72 all_reduce -b 1000 -e 1000 -d all -o all -g 3 -n 1 -w 1

# The other collectives at small sizes: 3 processes (a rank count that is
# not a power of two), a non-zero root where there is one.
for tool in all_gather reduce_scatter broadcast reduce alltoall gather scatter sendrecv; do
  case $tool in
    broadcast | reduce | gather | scatter) extra=(-r 1) ;;
    *) extra=() ;;
  esac
  run "$tool -P 3" 3 8 $((64 * K)) 8 "" "$tool" -b 8 -e 64K -f 8 -n 3 -P 3 "${extra[@]}"
done
run "reduce_scatter -t 2 -g 2 -d all" 4 4096 4096 2 12 reduce_scatter -b 4K -e 4K -t 2 -g 2 -d all -n 1

# tools/plot, on a file written here so it does not depend on the library.
if ! command -v gnuplot >/dev/null 2>&1; then
  skip "tools/plot: gnuplot is not installed (Debian: gnuplot-nox)"
else
  cat >"$WORK/a.json" <<'EOF'
{"version": 3, "tool": "all_reduce_perf", "device": "test device", "nranks": 4, "mode": "host",
 "commit": "0123abc", "date": "2025-01-01T00:00:00Z",
 "results": [
  {"size": 0, "count": 0, "algo": null, "proto": null, "out_of_place": {"time": 1.0, "alg_bw": 0, "bus_bw": 0, "nwrong": 0}, "in_place": null},
  {"size": 1024, "count": 256, "algo": "Ring", "proto": "LL", "out_of_place": {"time": 10.5, "alg_bw": 0.1, "bus_bw": 0.15, "nwrong": 0}, "in_place": null},
  {"size": 1048576, "count": 262144, "algo": "Tree", "proto": "Simple", "out_of_place": {"time": 100.0, "alg_bw": 10.4, "bus_bw": 15.7, "nwrong": 0}, "in_place": null}]}
EOF
  sed 's/"0123abc"/"4567def"/; s/15.7/12.1/' "$WORK/a.json" >"$WORK/b.json"
  ok=1
  for mode in "" --by-algo; do
    rm -f "$WORK/plot.png"
    if ! tools/plot -o "$WORK/plot.png" $mode "$WORK/a.json" "$WORK/b.json" >"$WORK/plot.log" 2>&1; then
      fail "tools/plot $mode: $(tail -n 3 "$WORK/plot.log")"
      ok=0
    elif [[ ! -s $WORK/plot.png ]] || [[ $(head -c 4 "$WORK/plot.png" | od -An -tx1 | tr -d ' ') != 89504e47 ]]; then
      fail "tools/plot $mode: $WORK/plot.png is not a PNG"
      ok=0
    fi
  done
  [[ $ok == 1 ]] && pass "tools/plot draws PNGs (per file and --by-algo)"
  if [[ -f $json ]] && tools/plot -o "$WORK/real.png" "$json" >/dev/null 2>&1 && [[ -s $WORK/real.png ]]; then
    pass "tools/plot on the all_reduce -J file"
  fi
fi

# A wrong option must not pass silently.
"$BIN/all_reduce_perf" -b 2M -e 1M >"$WORK/bad.out" 2>&1
rc=$?
if [[ $rc -ne 0 ]] && grep -q "invalid sizes for 'minbytes' and 'maxbytes'" "$WORK/bad.out"; then
  pass "minbytes > maxbytes is rejected (exit $rc)"
else
  fail "minbytes > maxbytes was accepted (exit $rc)"
fi

[[ $failures -eq 0 ]]
