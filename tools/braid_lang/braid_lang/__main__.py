"""python3 -m braid_lang check prog.py [-o out.json] [-D name=value ...]

Runs the program, writes the plan JSON of the program it builds (the last
one, if several) and has the library's verifier check it through
`braid-plan -f` ($BRAID_PLAN_TOOL, else build/bin/braid-plan). Exits 0 when
the verifier accepts the plan, 1 when it refuses it, 2 on a program error.
"""

import argparse
import os
import runpy
import subprocess
import sys

import braid_lang
from braid_lang import program as _program


def find_tool():
    tool = os.environ.get("BRAID_PLAN_TOOL")
    if tool:
        return tool
    here = os.path.dirname(os.path.abspath(__file__))
    for base in (os.getcwd(), os.path.join(here, "..", "..", "..")):
        cand = os.path.normpath(os.path.join(base, "build", "bin", "braid-plan"))
        if os.access(cand, os.X_OK):
            return cand
    return None


def verify(tool, path):
    """Runs `braid-plan -f path`; returns (accepted, verdict line, text)."""
    res = subprocess.run([tool, "-f", path], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         universal_newlines=True)
    text = res.stdout
    lines = [l for l in text.splitlines() if "verifier" in l]
    verdict = lines[0] if lines else (text.strip().splitlines() or ["(no output)"])[-1]
    ok = res.returncode == 0 and "plan is correct" in verdict and "WRONG" not in verdict
    return ok, verdict, text


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python3 -m braid_lang")
    sub = ap.add_subparsers(dest="cmd")
    c = sub.add_parser("check", help="run a program, write its plan JSON, verify it")
    c.add_argument("program")
    c.add_argument("-o", "--output", help="plan JSON to write (default: PROGRAM with .json)")
    c.add_argument("-D", dest="params", action="append", default=[], metavar="NAME=VALUE",
                   help="program parameter read with braid_lang.param(NAME, default)")
    c.add_argument("-v", "--verbose", action="store_true", help="print braid-plan's listing")
    args = ap.parse_args(argv)
    if args.cmd != "check":
        ap.print_help()
        return 2
    for p in args.params:
        name, sep, value = p.partition("=")
        if not sep:
            print("braid_lang: -D %s: write NAME=VALUE" % p, file=sys.stderr)
            return 2
        braid_lang._params[name] = value
    before = len(_program._programs)
    try:
        runpy.run_path(args.program, run_name="__main__")
    except _program.PlanError as e:
        print("%s: %s" % (args.program, e), file=sys.stderr)
        return 2
    progs = _program._programs[before:]
    if not progs:
        print("%s: the program closed no `with CollectiveProgram(...)` block" % args.program,
              file=sys.stderr)
        return 2
    prog = progs[-1]
    out = args.output or os.path.splitext(args.program)[0] + ".json"
    try:
        text = prog.json()
    except _program.PlanError as e:
        print("%s: %s" % (args.program, e), file=sys.stderr)
        return 2
    with open(out, "w") as f:
        f.write(text)
    tool = find_tool()
    if tool is None:
        print("%s: wrote %s; braid-plan not found (set BRAID_PLAN_TOOL or build "
              "build/bin/braid-plan) so it is not verified" % (args.program, out), file=sys.stderr)
        return 2
    ok, verdict, listing = verify(tool, out)
    print("%s: %s (%s, %d ranks): %s" % (args.program, out, prog.name, prog.num_ranks, verdict))
    if args.verbose or not ok:
        sys.stdout.write(listing if args.verbose else "")
    if not ok:
        rest = [l for l in listing.splitlines() if l and l != verdict]
        for l in rest[:5]:
            print("  " + l)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
