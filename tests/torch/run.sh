#!/usr/bin/env bash
# PyTorch 2.15.0 on Braid (make test-torch; not part of make test: it
# downloads torch and its CUDA libraries, several GB, once).
#
#  1. A venv with torch 2.15.0 (the default CUDA wheel and its nvidia-*
#     dependencies), made if absent: TORCH_VENV (default $BUILD/torch-venv).
#     TORCH_WHEEL names a local torch wheel to install instead of
#     downloading it; TORCH_INDEX_URL another index (e.g. the CPU wheels,
#     https://download.pytorch.org/whl/cpu, where the CUDA wheel cannot be
#     installed; the import check then says it ran on the CPU wheel).
#  2. With Braid preloaded (LD_PRELOAD=$BUILD/lib/libnccl.so.2,
#     LD_BIND_NOW=1, so every symbol is bound at load):
#       import torch, torch.distributed as d
#       print(torch.cuda.nccl.version(), d.is_nccl_available())
#     must print "(2, 30, 7) True"; ncclGetVersion through the process's
#     global scope must be Braid's 23007.
#  3. LD_DEBUG=bindings: no nccl* symbol that a library of torch imports
#     binds to NVIDIA's libnccl.so.2 (which torch also loads, by path); the
#     counts per target are printed.
#  4. With a GPU: tests/torch/dist_two_ranks.py (two ranks on one GPU,
#     backend nccl: all-reduce, broadcast, all-gather, barrier, checked).
#     Without one it says it skipped.
# Prints the outputs; exits non-zero if a check failed.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
VENV=${TORCH_VENV:-$BUILD/torch-venv}
LIB=$(cd "$BUILD/lib" 2>/dev/null && pwd)/libnccl.so.2
PY=$VENV/bin/python
failed=0

[[ -f $LIB ]] || { echo "test-torch: $BUILD/lib/libnccl.so.2 is missing; build it first (make BUILD=$BUILD lib)"; exit 1; }

if ! "$PY" -c 'import importlib.metadata as m, sys; sys.exit(m.version("torch").split("+")[0] != "2.15.0")' 2>/dev/null; then
  echo "== creating $VENV with torch 2.15.0 (downloads torch and its CUDA libraries once)"
  python3 -m venv "$VENV" || exit 1
  args=()
  [[ -n ${TORCH_INDEX_URL:-} ]] && args+=(--index-url "$TORCH_INDEX_URL" --extra-index-url https://pypi.org/simple)
  "$VENV/bin/pip" install -q "${args[@]}" "${TORCH_WHEEL:-torch==2.15.0}" || {
    echo "test-torch: installing torch 2.15.0 failed"; exit 1; }
fi
TORCH_VER=$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)
WHEEL_KIND=CUDA
case $TORCH_VER in *+cpu*) WHEEL_KIND=CPU ;; esac
echo "torch $TORCH_VER ($WHEEL_KIND wheel) in $VENV; Braid: $LIB"

PROBE='import torch, torch.distributed as d; print(torch.cuda.nccl.version(), d.is_nccl_available())'
echo "== LD_PRELOAD=$LIB LD_BIND_NOW=1 python -c '$PROBE'"
out=$(LD_PRELOAD=$LIB LD_BIND_NOW=1 "$PY" -c "$PROBE" 2>&1)
rc=$?
echo "$out"
if [[ $rc -ne 0 || $(tail -n 1 <<<"$out") != "(2, 30, 7) True" ]]; then
  echo "FAIL  import: expected '(2, 30, 7) True' (exit $rc)"
  failed=1
else
  echo "PASS  import"
fi

RUNTIME='import ctypes, torch
v = ctypes.c_int(0)
ctypes.CDLL(None).ncclGetVersion(ctypes.byref(v))
print(v.value)'
out=$(LD_PRELOAD=$LIB LD_BIND_NOW=1 "$PY" -c "$RUNTIME" 2>&1)
echo "ncclGetVersion in the process's global scope: $(tail -n 1 <<<"$out")"
if [[ $(tail -n 1 <<<"$out") != 23007 ]]; then
  echo "FAIL  runtime version: expected 23007"
  failed=1
else
  echo "PASS  runtime version"
fi

log=$(mktemp -d)
LD_DEBUG=bindings LD_DEBUG_OUTPUT=$log/ld LD_PRELOAD=$LIB LD_BIND_NOW=1 "$PY" -c "$PROBE" >/dev/null 2>&1
# "binding file FROM [0] to TO [0]: normal symbol `NAME'": keep nccl* names
# whose FROM is a library of the torch package.
cat "$log"/ld.* 2>/dev/null |
  sed -n "s/.*binding file \([^ ]*\) \[[0-9]*\] to \([^ ]*\) \[[0-9]*\]: normal symbol \`\(p\?nccl[A-Za-z0-9_]*\)'.*/\1 \2 \3/p" \
  >"$log/nccl"
rm -f "$log"/ld.*
from_torch=$(awk '$1 ~ /\/torch\/lib\//' "$log/nccl")
total=$(grep -c . <<<"$from_torch")
to_braid=$(awk -v b="$LIB" '$2 == b' <<<"$from_torch" | grep -c .)
to_nvidia=$(awk '$2 ~ /nvidia\/nccl\/lib\//' <<<"$from_torch")
echo "LD_DEBUG=bindings: $total nccl* bindings from torch's libraries, $to_braid to Braid"
awk '{ n[$1 " -> " $2]++ } END { for (k in n) print "  " n[k] "  " k }' <<<"$from_torch" | sort
if [[ $total -lt 51 ]]; then
  echo "FAIL  bindings: fewer than torch 2.15.0's 51 imports were seen"
  failed=1
elif [[ -n $to_nvidia ]]; then
  echo "FAIL  bindings: these bind to NVIDIA's libnccl.so.2:"
  echo "$to_nvidia"
  failed=1
else
  echo "PASS  bindings: none binds to NVIDIA's libnccl.so.2"
fi
rm -rf "$log"

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
  echo "== two ranks on one GPU (tests/torch/dist_two_ranks.py)"
  if LD_PRELOAD=$LIB "$PY" tests/torch/dist_two_ranks.py; then
    echo "PASS  distributed"
  else
    echo "FAIL  distributed"
    failed=1
  fi
else
  echo "SKIP  distributed: no NVIDIA GPU is visible (nvidia-smi -L failed); tests/torch/dist_two_ranks.py needs one"
fi
exit $failed
