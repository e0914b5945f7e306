#!/usr/bin/env bash
# calibrate-host.sh: the host-mode cost model against measurements.
#
#   tools/calibrate-host.sh [-d DIR] [-r REPS] [-n ITERS] [-R "4 8"]
#                           [-a "Ring Tree OneShot TwoShot"] [-p "LL Simple"] [-P]
#
# Measures AllReduce (float sum, out-of-place) in host mode with
# build/bin/all_reduce_perf (what `make bench` runs), each rank a process,
# one (algorithm, protocol) at a time forced with NCCL_ALGO / NCCL_PROTO,
# sizes 8 B to 16 MiB by x8 and 64 MiB, ITERS timed calls after 5 warm-up
# calls per size up to 256 KiB (40 by default: a call there takes
# microseconds, and one descheduled thread moves a mean of 5 by tens of
# percent), 5 after 2 from 2 MiB (LL from 16 MiB: 1 after 1, as at 8 ranks
# on two cores one LL call of 64 MiB takes about 10 s), REPS runs of each
# (3 by default). The JSON of every run goes to DIR (build/calib-host/ by
# default); a run whose JSON is already there is not repeated, so -r 5
# after -r 3 adds two runs of each.
#
# Then it prints, per (algorithm, protocol, ranks, size), the median over
# the runs of each run's mean time per call, the spread of those runs
# ((max - min) / median), and the model's prediction for the same call:
# build/bin/calibrate-host asks ncclGroupSimulateEnd on a clique of host-
# mode ranks with the same NCCL_ALGO / NCCL_PROTO, before the first launch
# (the tuner's formula, src/plan/tune.c: what picks the plan) and after it
# (the plan's own ops priced by src/plan/plan_cost.c). The error is
# (predicted - measured) / measured.
#
# -P skips the measuring and prints the table from the JSON already in DIR
# (after a change of the model, say), or from CSV files of runs there
# (algorithm,protocol,ranks,size,run,time_us: the form of
# docs/perf/host-calib-2026-11-26-quiet.csv). tools/calibrate-host-fit.py DIR fits
# the host-mode figures (src/plan/tune_hw.c) to the same runs. Needs
# python3 (standard library). docs/perf/cost-model.md has a full run.
set -euo pipefail

BUILD=${BUILD:-build}
dir=$BUILD/calib-host
reps=3
iters=40
ranks="4 8"
algos="Ring Tree OneShot TwoShot"
protos="LL Simple"
measure=1
while getopts "d:r:n:R:a:p:Ph" opt; do
  case $opt in
    d) dir=$OPTARG ;;
    r) reps=$OPTARG ;;
    n) iters=$OPTARG ;;
    R) ranks=$OPTARG ;;
    a) algos=$OPTARG ;;
    p) protos=$OPTARG ;;
    P) measure=0 ;;
    *) sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//'; exit 2 ;;
  esac
done
need() {
  if [[ ! -x $BUILD/bin/$1 ]]; then
    echo "calibrate-host.sh: $BUILD/bin/$1 is missing; build it first" \
         "(make $BUILD/bin/$1, or make tools)" >&2
    exit 1
  fi
}
(( measure )) && need all_reduce_perf
need calibrate-host
mkdir -p "$dir"

if (( measure )); then
  for rep in $(seq 1 "$reps"); do
    for n in $ranks; do
      for a in $algos; do
        for p in $protos; do
          # Each range with its iterations: LL from 16 MiB up runs one timed
          # call after one warm-up (one LL call of 64 MiB on 8 ranks here: ~10 s).
          small="-b 8 -e 256K -f 8 -n $iters -w 5"
          if [[ $p == LL ]]; then
            ranges=("$small" "-b 2M -e 2M -n 5 -w 2" "-b 16M -e 64M -f 4 -n 1 -w 1")
          else
            ranges=("$small" "-b 2M -e 16M -f 8 -n 5 -w 2" "-b 64M -e 64M -n 5 -w 2")
          fi
          k=0
          for r in "${ranges[@]}"; do
            k=$((k + 1))
            out=$dir/$a-$p-$n-$rep-$k.json
            [[ -s $out ]] && continue # measured before: -r 5 after -r 3 adds two runs
            # shellcheck disable=SC2086
            BRAID_DEVICE=host NCCL_ALGO=$a NCCL_PROTO=$p timeout 600 \
              "$BUILD/bin/all_reduce_perf" $r -P "$n" -c 0 -J "$out" >/dev/null 2>&1 ||
              echo "calibrate-host.sh: $a/$p on $n ranks ($r) failed; see $out" >&2
          done
        done
      done
    done
    echo "calibrate-host.sh: run $rep of $reps done ($(date -u +%H:%M:%S))" >&2
  done
fi

# Predictions: one clique per (ranks, algorithm, protocol), every size.
pred=$dir/predicted.txt
: >"$pred"
for n in $ranks; do
  for a in $algos; do
    for p in $protos; do
      BRAID_DEVICE=host NCCL_ALGO=$a NCCL_PROTO=$p "$BUILD/bin/calibrate-host" -n "$n" \
        -b 8 -e 64M -f 8 -x 64M | sed "s/^/$a $p $n /" >>"$pred"
    done
  done
done

python3 - "$dir" "$pred" <<'EOF'
import glob, json, os, statistics, sys
d, pred = sys.argv[1], sys.argv[2]
meas = {}
for f in glob.glob(os.path.join(d, "*.json")):
    a, p, n = os.path.basename(f).split("-")[:3]
    try:
        j = json.load(open(f))
    except (OSError, ValueError):
        continue
    for r in j.get("results", []):
        if r.get("algo") != a or r.get("proto") != p:
            print(f"warning: {f}: size {r['size']} ran {r.get('algo')}/{r.get('proto')}",
                  file=sys.stderr)
            continue
        meas.setdefault((a, p, int(n), int(r["size"])), []).append(r["out_of_place"]["time"])
# Or the runs as CSV (algorithm,protocol,ranks,size,run,time_us), as
# docs/perf/host-calib-2026-11-26-quiet.csv keeps them.
for f in glob.glob(os.path.join(d, "*.csv")):
    for line in open(f).read().splitlines()[1:]:
        a, p, n, size, _, t = line.split(",")
        meas.setdefault((a, p, int(n), int(size)), []).append(float(t))
model = {}
for line in open(pred):
    a, p, n, size, formula, plan = line.split()
    model[(a, p, int(n), int(size))] = (float(formula), float(plan))
print("| algorithm | protocol | ranks | size (B) | measured (us) | spread | runs "
      "| predicted (us) | error | plan-derived (us) | error |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
order = {"Ring": 0, "Tree": 1, "OneShot": 2, "TwoShot": 3}
errs, spreads, plan_errs = [], [], []
for k in sorted(meas, key=lambda k: (order.get(k[0], 9), k[1], k[2], k[3])):
    t = meas[k]
    m = statistics.median(t)
    spread = (max(t) - min(t)) / m if m > 0 else 0.0
    f, pl = model.get(k, (float("nan"), float("nan")))
    e1, e2 = (f - m) / m, (pl - m) / m
    errs.append(abs(e1))
    plan_errs.append(abs(e2))
    if len(t) > 1:
        q = statistics.quantiles(t, n=4, method="inclusive")
        spreads.append((spread, (q[2] - q[0]) / m))
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {m:.1f} | {spread:.0%} | {len(t)} | "
          f"{f:.1f} | {e1:+.0%} | {pl:.1f} | {e2:+.0%} |")
if errs:
    inside = sum(e <= 0.25 for e in errs)
    print(f"\n{inside} of {len(errs)} within +-25% (the tuner's formula); "
          f"median |error| {statistics.median(errs):.0%}, worst {max(errs):.0%}")
    inside = sum(e <= 0.25 for e in plan_errs)
    print(f"{inside} of {len(plan_errs)} within +-25% (plan-derived); "
          f"median |error| {statistics.median(plan_errs):.0%}")
if spreads:
    full = [x for x, _ in spreads]
    iqr = [y for _, y in spreads]
    print(f"noise over the runs of a point: (max - min) / median: median {statistics.median(full):.0%}, "
          f"{sum(x > 0.25 for x in full)} of {len(full)} above 25%; interquartile range / median: "
          f"median {statistics.median(iqr):.0%}, {sum(y > 0.25 for y in iqr)} above 25%")
EOF
