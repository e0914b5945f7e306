#!/usr/bin/env bash
# compute-sanitizer on a small case: test_graph (2 and 4 ranks as threads
# on one GPU, the reduced counts of BRAID_TEST_QUICK, a few replays) under
# memcheck, then under racecheck. Any error the tool reports fails the run
# (--error-exitcode), as does a wrong result the program itself detects.
#
#   BUILD=build tests/gpu/sanitizer.sh
# Environment: BUILD, SANITIZER_PROG (the program, default
# $BUILD/tests/gpu/test_graph), CUDA_HOME (compute-sanitizer is looked for
# on PATH, then in $CUDA_HOME/bin and /usr/local/cuda/bin),
# SANITIZER_TIMEOUT (seconds per tool, default 900).
# A missing program fails even where the run would skip. Exits 77 after
# "SKIP: ..." without compute-sanitizer, a GPU or a CUDA build; a skip is
# never a pass.
set -uo pipefail

BUILD=${BUILD:-build}
LIMIT=${SANITIZER_TIMEOUT:-900}
prog=${SANITIZER_PROG:-$BUILD/tests/gpu/test_graph}

if [[ ${CUDA:-1} != 1 ]]; then
  echo "SKIP: sanitizer: this build has no CUDA (CUDA=0)"
  exit 77
fi
if [[ ! -x $prog ]]; then
  echo "FAIL: sanitizer: $prog is missing; build it first (make BUILD=$BUILD tests)"
  exit 1
fi
san=$(command -v compute-sanitizer 2>/dev/null)
searched="PATH"
for d in ${CUDA_HOME:+"$CUDA_HOME"} /usr/local/cuda; do
  [[ " $searched " == *" $d/bin "* ]] && continue
  searched="$searched $d/bin"
  [[ -z $san && -x $d/bin/compute-sanitizer ]] && san=$d/bin/compute-sanitizer
done
if [[ -z $san ]]; then
  echo "SKIP: sanitizer: compute-sanitizer is not installed (looked in: $searched);" \
       "install the CUDA toolkit's compute-sanitizer or set CUDA_HOME"
  exit 77
fi
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "SKIP: sanitizer: no NVIDIA GPU is visible on this machine (nvidia-smi -L failed)"
  exit 77
fi
# Instrumented kernels run many times slower: a generous hang deadline.
export BRAID_DEVICE=cuda BRAID_TEST_QUICK=1 BRAID_TIMEOUT=${BRAID_TIMEOUT:-240}
failed=0
for tool in memcheck racecheck; do
  replays=3
  [[ $tool == racecheck ]] && replays=2
  echo "-- $san --tool $tool $prog (BRAID_TEST_GRAPH_REPLAYS=$replays)"
  start=$SECONDS
  # Line-buffered, so what a program cut off by the limit printed (a hang
  # report at BRAID_TIMEOUT, NCCL_DEBUG=WARN) reaches the log.
  BRAID_TEST_GRAPH_REPLAYS=$replays timeout --kill-after=10 "$LIMIT" \
    stdbuf -oL -eL "$san" --tool "$tool" --error-exitcode 86 "$prog"
  rc=$?
  secs=$((SECONDS - start))
  case $rc in
    0) echo "PASS: sanitizer: $tool found nothing, results correct (${secs}s)" ;;
    77) echo "SKIP: sanitizer: test_graph skipped under $tool"; exit 77 ;;
    86) echo "FAIL: sanitizer: $tool reported errors (above)"; failed=$((failed + 1)) ;;
    124) echo "FAIL: sanitizer: $tool timed out after ${LIMIT}s"; failed=$((failed + 1)) ;;
    *) echo "FAIL: sanitizer: test_graph under $tool exited $rc (${secs}s)"; failed=$((failed + 1)) ;;
  esac
done
[[ $failed -eq 0 ]] || exit 1
exit 0
