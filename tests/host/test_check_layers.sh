#!/usr/bin/env bash
# scripts/check-layers: the real tree has no upward include, and each kind
# of break planted into a copy of it is found and named (an include that
# points up, one that names no layer, one into a layer that does not exist).
set -uo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
tool=$here/scripts/check-layers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0

if out=$("$tool" "$here/src" 2>&1); then
  echo "PASS the tree's includes point down"
else
  echo "FAIL the tree has upward includes:"; echo "$out"; fail=1
fi

plant() { # name, file (relative to src), line to add, text the report must hold
  local name=$1 file=$2 line=$3 want=$4
  rm -rf "$tmp/src"; cp -r "$here/src" "$tmp/src"
  printf '%s\n' "$line" >>"$tmp/src/$file"
  local o rc
  o=$("$tool" "$tmp/src" 2>&1); rc=$?
  if [[ $rc -ne 0 ]] && grep -qF "$file" <<<"$o" && grep -qF "$want" <<<"$o"; then
    echo "PASS $name is refused"
  else
    echo "FAIL $name: exit $rc, report:"; echo "$o" | head -5; fail=1
  fi
}
plant "base -> core"        base/debug.c      '#include "core/comm.h"'   "points up"
plant "device -> plan"      device/ir.h       '#include "plan/plan.h"'   "points up"
plant "transport -> algos"  transport/host.c  '#include "algos/algos.h"' "points up"
plant "plan -> core"        plan/verify.c     '#include "core/group.h"'  "points up"
plant "algos -> core"       algos/generate.c  '#include "core/comm.h"'   "points up"
plant "device -> transport" device/exec_host.c '#include "transport/transport.h"' "points up"
plant "a bare include"      plan/topo.c       '#include "tune.h"'        "names no layer"
plant "an unknown layer"    algos/generate.c  '#include "misc/x.h"'      "no layer called"
exit $fail
