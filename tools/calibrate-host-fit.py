#!/usr/bin/env python3
"""Fit the host-mode cost model's figures to tools/calibrate-host.sh's runs.

    tools/calibrate-host-fit.py [DIR | FILE.csv] [--fix name=value ...] [--free name]

Reads DIR's JSON (build/calib-host/ by default) or a CSV of the runs
(docs/perf/host-calib-2026-11-26-quiet.csv holds the runs the figures come from), takes the median over the runs
of each (algorithm, protocol, ranks, size), and finds the figures of
src/plan/tune_hw.c's host.* entries that minimise the sum of squared
log(predicted / measured): relative error, so 8 B counts as much as 64 MiB.
The formula is tune.c's for AllReduce on one host in host mode (L ranks,
S bytes, h hops and v bytes per rank as in tune.c's table; Tree:
tree_hops per level):

    launch x L^2  (+ block2 x L from 256 KiB, the second block)
    + h x (hop + fan x (L - 1) for OneShot and TwoShot) x L x (ll_step for LL, 1 for Simple)
    + v / (1000 x copy_bw x fit / L x (ll_eff for LL, 1 for Simple))

fit: fit_ring, fit_tree, fit_twoshot, OneShot 1. Tree LL below 4 x 16 bytes
(the tree plan's chunks, each 16-byte aligned) fills k < 4 chunks and
takes (k + 1) / 5 of its hops: LL waits on data, an empty chunk has none.

--fix holds a figure (ll_step and tree_hops are held by default: 1, and
the tree plan's own 7 hops per level), --free lets one go. Prints the
figures and each point's error. It mirrors the formula; the
library's own predictions with the figures written into tune_hw.c are what
tools/calibrate-host.sh -P prints. Python standard library only.
"""
import glob
import json
import math
import os
import statistics
import sys

BLOCK2_BYTES = 256 << 10
NAMES = ["launch", "block2", "hop", "copy_bw", "ll_step", "ll_eff", "tree_hops", "fan",
         "fit_ring", "fit_tree", "fit_twoshot"]
START = {"launch": 5.0, "block2": 100.0, "hop": 1.0, "copy_bw": 3.0, "ll_step": 1.0,
         "ll_eff": 0.1, "tree_hops": 7.0, "fan": 0.1, "fit_ring": 1.0, "fit_tree": 1.0,
         "fit_twoshot": 1.0}
TREE_CHUNKS = 4        # src/algos/allreduce_tree.c's TREE_CHUNKS
TREE_CHUNK_GRAIN = 16  # bytes: the layout's chunk alignment
FIXED_DEFAULT = {"tree_hops": 7.0, "ll_step": 1.0}


def clog2(x):
    r = 0
    while (1 << r) < x:
        r += 1
    return r


def shape(algo, n, size):
    """(hops, bytes over a rank's link) of tune.c's AllReduce on one node."""
    if algo == "Ring":
        return 2 * (n - 1), 2.0 * (n - 1) / n * size
    if algo == "Tree":
        return None, 2.0 * size
    if algo == "OneShot":
        return 1, (n - 1) * size
    if algo == "TwoShot":
        return 2, 2.0 * (n - 1) / n * size
    raise ValueError(algo)


def predict(f, algo, proto, n, size):
    hops, vol = shape(algo, n, size)
    ll = proto == "LL"
    if hops is None:
        hops = f["tree_hops"] * clog2(n)
        k = math.ceil(size / TREE_CHUNK_GRAIN)
        if ll and k < TREE_CHUNKS:  # empty chunks: no LL data to wait for
            hops *= (k + 1.0) / (TREE_CHUNKS + 1.0)
    if algo in ("OneShot", "TwoShot"):
        hops *= 1.0 + f["fan"] * (n - 1) / f["hop"]
    fit = {"Ring": f["fit_ring"], "Tree": f["fit_tree"], "TwoShot": f["fit_twoshot"]}.get(algo, 1.0)
    launch = f["launch"] * n * n + (f["block2"] * n if size >= BLOCK2_BYTES else 0.0)
    lat = hops * f["hop"] * n * (f["ll_step"] if ll else 1.0)
    wire = vol / (1000.0 * f["copy_bw"] * fit / n * (f["ll_eff"] if ll else 1.0))
    return launch + lat + wire


def load_runs(d):
    """{(algorithm, protocol, ranks, size): [time of each run]} from DIR's
    JSON, or from a CSV of them (algorithm,protocol,ranks,size,run,time_us:
    docs/perf/host-calib-2026-11-26-quiet.csv)."""
    runs = {}
    if d.endswith(".csv"):
        with open(d) as fh:
            for line in fh.read().splitlines()[1:]:
                algo, proto, n, size, _, t = line.split(",")
                runs.setdefault((algo, proto, int(n), int(size)), []).append(float(t))
        return runs
    for path in glob.glob(os.path.join(d, "*.json")):
        algo, proto, n = os.path.basename(path).split("-")[:3]
        try:
            with open(path) as fh:
                j = json.load(fh)
        except (OSError, ValueError):
            continue
        for r in j.get("results", []):
            if r.get("algo") == algo and r.get("proto") == proto:
                key = (algo, proto, int(n), int(r["size"]))
                runs.setdefault(key, []).append(r["out_of_place"]["time"])
    return runs


def load(d):
    return {k: statistics.median(v) for k, v in load_runs(d).items()}


def loss(f, pts):
    total = 0.0
    for (algo, proto, n, size), m in pts.items():
        e = predict(f, algo, proto, n, size)
        if not e > 0:
            return float("inf")
        total += math.log(e / m) ** 2
    return total


def fit(pts, fixed):
    f = dict(START)
    f.update(fixed)
    free = [k for k in NAMES if k not in fixed]
    best = loss(f, pts)
    step = {k: 0.5 for k in free}
    for _ in range(2000):
        for k in free:
            moved = False
            for sign in (1.0, -1.0):
                g = dict(f)
                g[k] = f[k] * (1.0 + sign * step[k])
                if g[k] <= 0:
                    continue
                lg = loss(g, pts)
                if lg < best:
                    best, f, moved = lg, g, True
                    break
            step[k] = min(step[k] * 1.5, 0.5) if moved else step[k] * 0.6
        if max(step.values(), default=0.0) < 1e-5:
            break
    return f, best


def main():
    args = sys.argv[1:]
    d = os.path.join(os.environ.get("BUILD", "build"), "calib-host")
    fixed = dict(FIXED_DEFAULT)
    i = 0
    while i < len(args):
        if args[i] == "--fix" and i + 1 < len(args):
            k, v = args[i + 1].split("=")
            if k not in NAMES:
                sys.exit(f"calibrate-host-fit: unknown figure {k}; one of {', '.join(NAMES)}")
            fixed[k] = float(v)
            i += 2
        elif args[i] == "--free" and i + 1 < len(args):
            fixed.pop(args[i + 1], None)
            i += 2
        else:
            d = args[i]
            i += 1
    pts = load(d)
    if not pts:
        sys.exit(f"calibrate-host-fit: no runs in {d}; run tools/calibrate-host.sh first")
    f, best = fit(pts, fixed)
    print(f"{len(pts)} points; rms log error {math.sqrt(best / len(pts)):.3f}")
    print("  ".join(f"{k}={f[k]:.4g}{'' if k not in fixed else ' (fixed)'}" for k in NAMES))
    bad = 0
    for key in sorted(pts):
        algo, proto, n, size = key
        m, e = pts[key], predict(f, *key)
        err = (e - m) / m
        bad += abs(err) > 0.25
        print(f"{algo:8s} {proto:6s} {n:2d} {size:9d}  measured {m:11.1f}  predicted {e:11.1f}"
              f"  {err:+5.0%}{'  *' if abs(err) > 0.25 else ''}")
    print(f"{len(pts) - bad} of {len(pts)} within +-25%")


if __name__ == "__main__":
    main()
