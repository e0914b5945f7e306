#!/usr/bin/env python3
"""Turns the raw outputs of scripts/bench-gpu into a markdown record.

    tools/compare/gpu_report.py DIR        writes DIR/report.md and DIR/summary.json

DIR holds what scripts/bench-gpu saved:
  meta.txt          key=value lines (date, commit, device, driver, command, ...)
  compare.json      nccl-compare --json: Braid and NVIDIA's NCCL, one rank
  ar-<N>.txt        all_reduce_perf, N ranks (N > 1: sharing the one GPU)
  ar-8-graph.txt    all_reduce_perf, 8 ranks sharing the GPU, small sizes, -G
  check-<N>.txt     all_reduce_perf, N ranks, values checked (-c 1)
  reg-<N>.txt       all_reduce_perf, N ranks sharing the GPU, symmetric windows
                    (-R 2), 256 MiB, values checked
  ar-1-nvidia.txt   all_reduce_perf, one rank, against NVIDIA's library
Each ar-*.txt ends with the line "# bench-gpu: exit RC after S s: COMMAND".
A missing file becomes "not measured" in the report, never an error.

The HBM bound: with N ranks on one GPU an all-reduce reads N inputs and
writes N outputs, so algbw = size / time <= B / (2N), B the device-to-device
copy bandwidth counting bytes read plus bytes written (nccl-compare's
figure; the larger of the libraries' runs). Standard library only.
"""
import json
import os
import sys

MIB256 = 256 << 20
SHARED_RANKS = (2, 4, 8)
SWEEP_RANKS = (1, 2, 4, 8)
GRAPH_TARGET_US = 15.0
HBM_FRACTION = 0.5
INIT_FACTOR = 5.0
MEM_FACTOR = 4.0
COMPARE_SIZES = ((8, "8 B"), (64 << 10, "64 KiB"), (MIB256, "256 MiB"))


def read_meta(path):
    meta = {}
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                line = line.rstrip("\n")
                if "=" in line and not line.startswith("#"):
                    k, v = line.split("=", 1)
                    meta[k.strip()] = v.strip()
    except OSError:
        pass
    return meta


def parse_float(s):
    try:
        return float(s)
    except ValueError:
        return None


def parse_perf(path):
    """Rows, exit status and notes of one all_reduce_perf log, or None."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    run = {"rows": {}, "rc": None, "secs": None, "cmd": None, "shared": False,
           "oob": None, "devices": [], "errors": [], "library": None}
    for line in lines:
        if line.startswith("# bench-gpu: exit "):
            # "# bench-gpu: exit RC after S s: COMMAND"
            rest = line[len("# bench-gpu: exit "):]
            parts = rest.split(" ", 4)
            try:
                run["rc"] = int(parts[0])
                run["secs"] = float(parts[2])
            except (ValueError, IndexError):
                pass
            if ": " in rest:
                run["cmd"] = rest.split(": ", 1)[1]
            continue
        if line.startswith("# several ranks share a GPU"):
            run["shared"] = True
        if line.startswith("# Out of bounds values"):
            v = line.split(":", 1)[1].split()
            if v:
                run["oob"] = int(v[0]) if v[0].isdigit() else None
        if line.startswith("#  Rank") and " device " in line:
            run["devices"].append(line.split("]", 1)[-1].strip())
        if "NCCL version " in line and run["library"] is None:
            run["library"] = line.split("NCCL version ", 1)[1].split()[0]
        if "Test NCCL failure" in line or "Test CUDA failure" in line:
            run["errors"].append(line.strip())
        if line.startswith("#"):
            continue
        f = line.split()
        if len(f) != 13 or not f[0].isdigit() or not f[1].isdigit():
            continue
        size = int(f[0])

        def half(t, alg, bus, wrong):
            tv = parse_float(t)
            return {"time_us": tv,
                    "algbw": size / tv / 1e3 if tv else None,
                    "busbw": parse_float(bus),
                    "wrong": None if wrong == "N/A" else parse_float(wrong)}
        run["rows"][size] = {"count": int(f[1]), "oop": half(*f[5:9]), "ip": half(*f[9:13])}
    return run


def read_compare(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def fmt(v, digits=2, unit=""):
    if v is None:
        return "n/a"
    return f"{v:.{digits}f}{unit}"


def size_name(b):
    if b >= 1 << 30 and b % (1 << 30) == 0:
        return f"{b >> 30} GiB"
    if b >= 1 << 20 and b % (1 << 20) == 0:
        return f"{b >> 20} MiB"
    if b >= 1 << 10 and b % (1 << 10) == 0:
        return f"{b >> 10} KiB"
    return f"{b} B"


def verdict(ok):
    return "n/a" if ok is None else ("PASS" if ok else "**FAIL**")


def main(argv):
    if len(argv) != 2 or argv[1] in ("-h", "--help"):
        print("usage: gpu_report.py DIR  (writes DIR/report.md and DIR/summary.json)",
              file=sys.stderr)
        return 2
    d = argv[1]
    if not os.path.isdir(d):
        print(f"gpu_report.py: {d} is not a directory of bench-gpu results", file=sys.stderr)
        return 2
    meta = read_meta(os.path.join(d, "meta.txt"))
    cmp_ = read_compare(os.path.join(d, "compare.json"))
    runs = {n: parse_perf(os.path.join(d, f"ar-{n}.txt")) for n in SWEEP_RANKS}
    graph = parse_perf(os.path.join(d, "ar-8-graph.txt"))
    nv_sweep = parse_perf(os.path.join(d, "ar-1-nvidia.txt"))
    check_runs = {n: parse_perf(os.path.join(d, f"check-{n}.txt")) for n in SWEEP_RANKS}
    # Registered buffers (-R 2, symmetric windows): the zero-copy all-reduce.
    reg_runs = {n: parse_perf(os.path.join(d, f"reg-{n}.txt")) for n in SHARED_RANKS}
    # More blocks per rank (NCCL_MAX_CTAS), staged buffers, 256 MiB.
    ctas_runs = {n: parse_perf(os.path.join(d, f"ctas-{n}.txt")) for n in SHARED_RANKS}

    # nccl-compare: Braid is the library whose path meta names, else the first.
    libs = (cmp_ or {}).get("libraries", [])
    braid_path = meta.get("braid_lib")
    braid = next((l for l in libs if braid_path and l.get("path") == braid_path), None)
    if braid is None and libs:
        braid = libs[0]
    nvidia = next((l for l in libs if l is not braid), None)

    def ok_lib(l):
        return l is not None and l.get("status") == "ok"

    bs = [l["d2d"]["gbps"] for l in libs if ok_lib(l) and l.get("d2d", {}).get("gbps")]
    B = max(bs) if bs else None

    targets = []  # (name, braid value, nvidia value, limit text, pass or None, unit)

    def add(name, value, ref, limit, ok, unit, limit_value=None):
        targets.append({"target": name, "braid": value, "nvidia": ref, "limit": limit,
                        "limit_value": limit_value, "pass": ok, "unit": unit})

    def ar_of(l, size):
        if not ok_lib(l):
            return None
        return next((a for a in l.get("allreduce", []) if a.get("bytes") == size), None)

    for size, name in COMPARE_SIZES:
        for how in ("stream", "graph"):
            a, n = ar_of(braid, size), ar_of(nvidia, size)
            bv = a.get(f"{how}_us") if a else None
            nv = n.get(f"{how}_us") if n else None
            ok = None if bv is None or nv is None else bv <= nv
            add(f"1 rank, time per all-reduce, {name} ({how})", bv, nv,
                "<= NCCL", ok, "us", nv)

    def init_of(l, key):
        return l["init_ms"].get(key) if ok_lib(l) else None

    bi, ni = init_of(braid, "median"), init_of(nvidia, "median")
    lim = ni / INIT_FACTOR if ni is not None else None
    add("ncclCommInitRank, 1 rank, median of fresh comms", bi, ni, "<= NCCL / 5",
        None if bi is None or lim is None else bi <= lim, "ms", lim)
    bf, nf = init_of(braid, "first"), init_of(nvidia, "first")
    lim = nf / INIT_FACTOR if nf is not None else None
    add("ncclCommInitRank, 1 rank, first comm of the process", bf, nf, "<= NCCL / 5",
        None if bf is None or lim is None else bf <= lim, "ms", lim)

    def mem_of(l):
        return l["comm_mem_bytes"] / (1 << 20) if ok_lib(l) else None

    bm, nm = mem_of(braid), mem_of(nvidia)
    lim = nm / MEM_FACTOR if nm is not None else None
    add("device memory per communicator (cudaMemGetInfo)", bm, nm, "<= NCCL / 4",
        None if bm is None or lim is None else bm <= lim, "MiB", lim)

    def at_bound(run, n):
        # The 256 MiB row of a run, its algbw, the bound B/(2N) and their ratio.
        row = run["rows"].get(MIB256) if run else None
        alg = row["oop"]["algbw"] if row else None
        bound = B / (2 * n) if B else None
        frac = alg / bound if alg is not None and bound else None
        return row, alg, bound, frac

    bound_rows = []
    for n in SWEEP_RANKS:
        row, alg, bound, frac = at_bound(runs[n], n)
        bound_rows.append((n, row, alg, bound, frac))
        if n in SHARED_RANKS:
            lim = HBM_FRACTION * bound if bound else None
            add(f"{n} ranks sharing the GPU, algbw at 256 MiB", alg, None,
                ">= 50% of B/(2N)", None if alg is None or lim is None else alg >= lim,
                "GB/s", lim)

    for n in SHARED_RANKS:
        if ctas_runs[n] is None:
            continue
        row, alg, bound, frac = at_bound(ctas_runs[n], n)
        lim = HBM_FRACTION * bound if bound else None
        add(f"{n} ranks sharing the GPU, algbw at 256 MiB, NCCL_MAX_CTAS={32 if n < 4 else 16}",
            alg, None, ">= 50% of B/(2N)", None if alg is None or lim is None else alg >= lim,
            "GB/s", lim)

    g8 = graph["rows"].get(8) if graph else None
    gt = g8["oop"]["time_us"] if g8 else None
    add("8 ranks sharing the GPU, 8 B all-reduce from a CUDA graph (-G)", gt, None,
        "<= 15 us", None if gt is None else gt <= GRAPH_TARGET_US, "us", GRAPH_TARGET_US)

    # Correctness: every run exited 0 and found no wrong values.
    checks = []
    for label, run in ([(f"ar-{n}", runs[n]) for n in SWEEP_RANKS] +
                       [("ar-8-graph", graph)] +
                       [(f"check-{n}", check_runs[n]) for n in SWEEP_RANKS] +
                       [(f"reg-{n}", reg_runs[n]) for n in SHARED_RANKS] +
                       [(f"ctas-{n}", ctas_runs[n]) for n in SHARED_RANKS
                        if ctas_runs[n] is not None] +
                       [("ar-1-nvidia", nv_sweep)]):
        if run is None:
            checks.append((label, None, "not run"))
            continue
        halves = [r[h] for r in run["rows"].values() for h in ("oop", "ip")]
        wrong = sum(h["wrong"] or 0 for h in halves)
        checked = sum(h["wrong"] is not None for h in halves)
        ok = run["rc"] == 0 and wrong == 0 and bool(run["rows"])
        why = (f"exit {run['rc']}" if run["rc"] is not None else "no exit status (cut off?)")
        why += f", {len(run['rows'])} sizes"
        why += (f", {checked} results checked, {int(wrong)} wrong values" if checked
                else ", values not checked (timing only)")
        if run["library"]:
            why += f", library {run['library']}"
        if label == "ar-1-nvidia" and run["library"] and "braid" in run["library"]:
            ok = False
            why += " (LD_PRELOAD did not take: this run used Braid)"
        if run["errors"]:
            why += "; " + run["errors"][0]
        checks.append((label, ok, why))
    for l in libs:
        st = l.get("status")
        checks.append((f"nccl-compare {l.get('path')}",
                       None if st == "skip" else st == "ok",
                       st + ("" if st == "ok" else f": {l.get('error')}")))
    if cmp_ is None:
        checks.append(("nccl-compare", None, "no compare.json (not run, or it failed "
                       "before writing it: see compare-log.txt)"))

    out = []
    w = out.append
    device = meta.get("device") or (braid or {}).get("device") or "unknown"
    w("# Braid on one GPU: all-reduce benchmark record")
    w("")
    w(f"- device: {device}; driver {meta.get('driver', 'unknown')}"
      + (f"; CUDA runtime {braid['runtime']}, driver API {braid['driver']}"
         if ok_lib(braid) else ""))
    w(f"- date: {meta.get('date', 'unknown')}; commit: `{meta.get('commit', 'unknown')}`")
    w(f"- command: `{meta.get('command', 'scripts/bench-gpu')}`"
      + (" (**quick smoke run: few iterations, not a record**)"
         if meta.get("quick") == "1" else ""))
    w(f"- Braid: `{meta.get('braid_lib', (braid or {}).get('path', 'n/a'))}`"
      + (f" (ncclGetVersion {braid['version']})" if ok_lib(braid) else ""))
    w(f"- NVIDIA NCCL: `{meta.get('nvidia_lib') or (nvidia or {}).get('path') or 'not found'}`"
      + (f" (ncclGetVersion {nvidia['version']})" if ok_lib(nvidia) else ""))
    w(f"- ranks sharing the GPU launched as: {meta.get('launch', 'threads')}")
    bs_txt = ", ".join(f"{fmt(l['d2d']['gbps'], 0)}" for l in libs
                       if ok_lib(l) and l.get("d2d"))
    w(f"- B, device-to-device copy bandwidth (1 GiB cudaMemcpyAsync, bytes read + written): "
      f"{fmt(B, 0, ' GB/s')}" + (f" (runs: {bs_txt})" if bs_txt else ""))
    w("")
    w("## Targets")
    w("")
    judged = [t for t in targets if t["pass"] is not None]
    met = sum(1 for t in judged if t["pass"])
    bad_runs = [l for l, ok, _ in checks if ok is False]
    w(f"{met} of {len(targets)} targets met"
      + (f", {len(targets) - len(judged)} not measured" if len(judged) < len(targets) else "")
      + "; " + (f"runs that failed: {', '.join(bad_runs)}" if bad_runs
                else "every run that ran exited 0 with no wrong values") + ".")
    w("")
    w("| target | Braid | NVIDIA NCCL | limit | result |")
    w("| --- | ---: | ---: | --- | --- |")
    for t in targets:
        digits = 1 if t["unit"] in ("MiB", "GB/s") else 2
        lim = t["limit"]
        if t["limit_value"] is not None and not lim.startswith("<= 15"):
            lim += f" = {fmt(t['limit_value'], digits)} {t['unit']}"
        w(f"| {t['target']} | {fmt(t['braid'], digits, ' ' + t['unit'])} | "
          f"{fmt(t['nvidia'], digits, ' ' + t['unit']) if t['nvidia'] is not None else '-'} | "
          f"{lim} | {verdict(t['pass'])} |")
    w("")
    w("## algbw against the HBM bound at 256 MiB (out of place)")
    w("")
    w("N ranks on one GPU read N inputs and write N outputs: algbw <= B/(2N).")
    w("")
    w("| ranks | time (us) | algbw (GB/s) | busbw (GB/s) | bound B/(2N) (GB/s) | algbw / bound |")
    w("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, row, alg, bound, frac in bound_rows:
        t = row["oop"]["time_us"] if row else None
        bus = row["oop"]["busbw"] if row else None
        w(f"| {n} | {fmt(t)} | {fmt(alg, 1)} | {fmt(bus, 1)} | {fmt(bound, 1)} | "
          f"{fmt(frac * 100 if frac is not None else None, 1, '%')} |")
    w("")
    w("## Registered buffers (-R 2): the zero-copy all-reduce at 256 MiB")
    w("")
    w("Symmetric windows: every rank reads its shard of every input and writes it "
      "into every output in place, without scratch (docs/architecture.md).")
    w("")
    w("| ranks | time (us) | algbw (GB/s) | bound B/(2N) (GB/s) | algbw / bound | "
      "wrong values |")
    w("| ---: | ---: | ---: | ---: | ---: | ---: |")
    reg_rows = []
    for n in SHARED_RANKS:
        run = reg_runs[n]
        row, alg, bound, frac = at_bound(run, n)
        wrong = row["oop"]["wrong"] if row else None
        reg_rows.append({"ranks": n, "algbw": alg, "bound": bound, "fraction": frac})
        w(f"| {n} | {fmt(row['oop']['time_us'] if row else None)} | {fmt(alg, 1)} | "
          f"{fmt(bound, 1)} | {fmt(frac * 100 if frac is not None else None, 1, '%')} | "
          f"{'not run' if run is None else fmt(wrong, 0)} |")
    w("")
    w("## Sweep: time per all-reduce (us), float sum, out of place")
    w("")
    cols = [(f"{n} rank{'s' if n > 1 else ''}", runs[n]) for n in SWEEP_RANKS]
    cols.insert(1, ("1 rank, NVIDIA", nv_sweep))
    cols.append(("8 ranks, graph", graph))
    sizes = sorted({s for _, r in cols if r for s in r["rows"]})
    w("| size | " + " | ".join(c for c, _ in cols) + " |")
    w("| ---: |" + " ---: |" * len(cols))
    for s in sizes:
        cells = []
        for _, r in cols:
            row = r["rows"].get(s) if r else None
            cells.append(fmt(row["oop"]["time_us"]) if row else "")
        w(f"| {size_name(s)} | " + " | ".join(cells) + " |")
    w("")
    w("## Sweep: algbw (GB/s), out of place")
    w("")
    w("| size | " + " | ".join(c for c, _ in cols[:-1]) + " |")
    w("| ---: |" + " ---: |" * (len(cols) - 1))
    for s in sizes:
        cells = []
        for _, r in cols[:-1]:
            row = r["rows"].get(s) if r else None
            cells.append(fmt(row["oop"]["algbw"]) if row else "")
        w(f"| {size_name(s)} | " + " | ".join(cells) + " |")
    w("")
    w("## Runs")
    w("")
    w("| run | result | detail |")
    w("| --- | --- | --- |")
    for label, ok, why in checks:
        w(f"| {label} | {verdict(ok)} | {why} |")
    w("")
    for n in SHARED_RANKS:
        if runs[n] and runs[n]["rows"] and not runs[n]["shared"]:
            w(f"Note: ar-{n}.txt does not say that ranks shared a GPU; check its preamble.")
    report = "\n".join(out) + "\n"
    with open(os.path.join(d, "report.md"), "w", encoding="utf-8") as f:
        f.write(report)
    summary = {"B_gbps": B, "targets_met": met, "targets": targets,
               "runs": [{"run": l, "pass": ok, "detail": why} for l, ok, why in checks],
               "bound": [{"ranks": n, "algbw": alg, "bound": bound, "fraction": frac}
                         for n, _, alg, bound, frac in bound_rows],
               "registered": reg_rows}
    with open(os.path.join(d, "summary.json"), "w", encoding="utf-8") as f:
        json.dump(summary, f, indent=1)
        f.write("\n")
    sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
