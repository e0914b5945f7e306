#!/usr/bin/env bash
# tools/timeline end to end in host mode: runs build/bin/all_reduce_perf
# with 4 ranks (threads) at 8 bytes under the timeline profiler and checks
# the merged trace with python3's json module: 4 ranks, the same number of
# AllReduce events on each (at least the 3 timed iterations), each of
# 8 bytes with an algorithm and protocol, the sequence numbers 0 .. n-1 on
# every rank, kernel-channel events on every rank; and that the PNG is
# written when gnuplot is installed (else the tool says why and skips it).
# Environment: BUILD (build directory, default build).
set -uo pipefail

BUILD=${BUILD:-build}
export BRAID_DEVICE=${BRAID_DEVICE:-host}
PLUGIN=$BUILD/plugins/libnccl-profiler-timeline.so
if [[ ! -f $PLUGIN || ! -x $BUILD/bin/all_reduce_perf ]]; then
  echo "SKIP: $PLUGIN or $BUILD/bin/all_reduce_perf not built (run make)"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not found"
  exit 77
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/braid-timeline-tool.XXXXXX")
trap 'rm -rf "$WORK"' EXIT

if ! BUILD=$BUILD python3 tools/timeline --plugin "$PLUGIN" -o "$WORK/ar" -- \
     "$BUILD/bin/all_reduce_perf" -t 4 -b 8 -e 8 -n 3 -w 1 >"$WORK/log" 2>&1; then
  echo "FAIL: tools/timeline exited non-zero"
  cat "$WORK/log"
  exit 1
fi
python3 - "$WORK/ar.json" <<'PY' || { cat "$WORK/log"; exit 1; }
import json, sys
doc = json.load(open(sys.argv[1]))
ev = doc["traceEvents"]
coll = {}
chans = set()
for e in ev:
    if e.get("ph") != "X":
        continue
    if e.get("cat") == "coll":
        a = e["args"]
        assert e["name"] == "AllReduce", e
        assert a["bytes"] == 8 and a["count"] == 2 and a["datatype"] == "ncclFloat32", e
        assert a["algo"] not in ("", "Unknown") and a["proto"] in ("LL", "LL128", "Simple"), e
        assert a["nChannels"] >= 1 and e["dur"] >= 0, e
        coll.setdefault(e["pid"], []).append(a["seq"])
    elif e.get("cat") == "channel":
        chans.add(e["pid"])
assert sorted(coll) == [0, 1, 2, 3], sorted(coll)
n = len(coll[0])
assert n >= 3, n
for pid, seqs in coll.items():
    assert sorted(seqs) == list(range(n)), (pid, sorted(seqs))
assert chans == {0, 1, 2, 3}, chans
print(f"PASS trace: 4 ranks x {n} AllReduce events of 8 bytes")
PY
if command -v gnuplot >/dev/null 2>&1; then
  if [[ ! -s $WORK/ar.png ]]; then
    echo "FAIL: gnuplot is installed but no PNG was written"
    cat "$WORK/log"
    exit 1
  fi
  echo "PASS png"
else
  grep -q "gnuplot is not installed" "$WORK/log" || { echo "FAIL: no message about the PNG"; exit 1; }
  echo "SKIP png: gnuplot not installed"
fi
