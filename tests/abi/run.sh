#!/usr/bin/env bash
# ABI checks: Braid's libnccl.so.2 and nccl.h against NCCL 2.28.9.
#
#   a. exported symbols: the exact list in tools/abi/nccl-2.28.9.syms, with
#      NVIDIA's bindings (nccl* weak, pnccl* strong), SONAME and symlinks;
#      equal to NVIDIA's library where it is installed.
#   b. header: every size, offset, enumerator, macro and initializer value
#      (tests/abi/layout.c) equal to NVIDIA's, as C and C++, with and without
#      CUDA; every prototype identical to NVIDIA's; the device API's types.
#   c. a program built against the header, linked against Braid, run in host
#      mode (tests/abi/link_test.c).
#
# Prints one PASS/FAIL/SKIP line per check and exits non-zero if any failed.
# Environment: BUILD (build dir, default build), NCCL_REF_HEADER (NVIDIA's
# nccl.h; unset: look in $CUDA_HOME/include and /usr/include; empty: none),
# CUDA_HOME (default /usr/local/cuda), CUDA (1: compile with CUDA headers),
# CC, CXX.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA=${CUDA:-1}
CC=${CC:-gcc}
[[ $CC == cc ]] && CC=gcc
CXX=${CXX:-g++}
if [[ -z ${NCCL_REF_HEADER+set} ]]; then
  NCCL_REF_HEADER=
  for h in "$CUDA_HOME/include/nccl.h" /usr/include/nccl.h; do
    if [[ -f $h ]]; then NCCL_REF_HEADER=$h; break; fi
  done
fi

LIBDIR=$BUILD/lib
LIB=$LIBDIR/libnccl.so.2
SYMS=tools/abi/nccl-2.28.9.syms
OUT=$BUILD/tests/abi
mkdir -p "$OUT"

# The C runtime may add these to a shared library's dynamic table.
RUNTIME_SYMS="_init _fini _edata _end __bss_start"
# NVIDIA exports this one strong, without a pnccl twin.
LONE_STRONG=ncclResetDebugInitInternal
NSYMS=105

CFLAGS_STRICT=(-std=c11 -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes
               -Wmissing-prototypes -Wformat=2 -Wvla -pedantic)
# NVIDIA's header declares f() in C, so it cannot take -Wstrict-prototypes.
CFLAGS_REF=(-std=c11 -Wall -Wextra -Werror)
CXXFLAGS_STRICT=(-std=c++11 -Wall -Wextra -Werror -x c++)

CUDA_INC=()
if [[ $CUDA == 1 && -f $CUDA_HOME/include/cuda_runtime.h ]]; then
  CUDA_INC=(-I"$CUDA_HOME/include")
fi
REF_INC=()
REF_DIR=
if [[ -n $NCCL_REF_HEADER ]]; then
  REF_DIR=$(dirname "$NCCL_REF_HEADER")
  REF_INC=(-I"$REF_DIR")
  [[ -f $CUDA_HOME/include/cuda_runtime.h ]] && REF_INC+=(-I"$CUDA_HOME/include")
fi

# The first NVIDIA libnccl.so.2 installed, if any (never Braid's own).
NV_LIB=
for l in "$CUDA_HOME"/lib*/libnccl.so.2 /usr/local/cuda*/lib*/libnccl.so.2; do
  if [[ -f $l && ! $l -ef $LIB ]]; then NV_LIB=$l; break; fi
done

npass=0 nfail=0 nskip=0
SKIP=77

# run_check NAME FUNCTION [ARGS]: the function prints details to its log
# and returns 0 (pass), $SKIP (skip, last log line says why) or anything else.
# It runs where errexit is off, so each step ends in `|| return 1`.
run_check() {
  local name=$1 rc=0
  shift
  local log=$OUT/$name.log
  "$@" >"$log" 2>&1 || rc=$?
  if [[ $rc -eq 0 ]]; then
    echo "PASS  $name"
    npass=$((npass + 1))
  elif [[ $rc -eq $SKIP ]]; then
    echo "SKIP  $name: $(tail -n 1 "$log")"
    nskip=$((nskip + 1))
  else
    echo "FAIL  $name"
    sed -e 's/^/      /' "$log" | head -n 60
    nfail=$((nfail + 1))
  fi
}

syms_list() { sed -e '/^#/d' -e '/^$/d' "$SYMS"; }

# "TYPE NAME" of each defined nccl*/pnccl* dynamic symbol, sorted by name.
exported() {
  nm -D --defined-only "$1" | awk '$3 ~ /^p?nccl/ { print $2, $3 }' | LC_ALL=C sort -k2
}

need_lib() {
  [[ -f $LIB ]] || { echo "$LIB is missing: build the library first (make BUILD=$BUILD lib)"; return 1; }
}

# ---------------------------------------------------------------- a. symbols

check_syms_file() {
  head -n 1 "$SYMS" | grep -q '^#' || { echo "first line must be a # comment"; return 1; }
  local n
  n=$(syms_list | wc -l)
  [[ $n -eq $NSYMS ]] || { echo "$n names, expected $NSYMS"; return 1; }
  syms_list | LC_ALL=C sort -c -u || { echo "names are not sorted and unique"; return 1; }
  if syms_list | grep -Ev '^p?nccl[A-Za-z0-9]+$'; then
    echo "lines above are not nccl*/pnccl* names"; return 1
  fi
}

check_exports() {
  need_lib || return 1
  exported "$LIB" | awk '{ print $2 }' >"$OUT/exports.ours"
  diff -u <(syms_list) "$OUT/exports.ours" || {
    echo "(- listed but not exported, + exported but not listed)"; return 1; }
}

check_no_other_exports() {
  need_lib || return 1
  local extra
  extra=$(nm -D --defined-only "$LIB" | awk '$3 !~ /^p?nccl/ { print $3 }' |
          grep -Fvx -f <(tr ' ' '\n' <<<"$RUNTIME_SYMS") || true)
  [[ -z $extra ]] || { echo "unexpected exported symbols:"; echo "$extra"; return 1; }
}

# pnccl<X> strong (T), nccl<X> weak (W), LONE_STRONG strong: NVIDIA's scheme.
check_bindings() {
  need_lib || return 1
  local bad
  bad=$(exported "$LIB" | awk -v lone="$LONE_STRONG" '
    $2 == lone { if ($1 != "T") print; next }
    $2 ~ /^pnccl/ { if ($1 != "T") print; next }
    { if ($1 != "W") print }')
  [[ -z $bad ]] || { echo "wrong binding (want pnccl* T, nccl* W, $LONE_STRONG T):"; echo "$bad"; return 1; }
}

check_nvidia_exports() {
  [[ -n $NV_LIB ]] || { echo "no NVIDIA libnccl.so.2 installed"; return $SKIP; }
  need_lib || return 1
  echo "NVIDIA library: $NV_LIB"
  exported "$NV_LIB" >"$OUT/exports.nvidia"
  diff -u <(syms_list) <(awk '{ print $2 }' "$OUT/exports.nvidia") || {
    echo "(the syms file differs from NVIDIA's exports)"; return 1; }
  diff -u "$OUT/exports.nvidia" <(exported "$LIB") || {
    echo "(- NVIDIA's binding, + Braid's)"; return 1; }
}

check_soname() {
  need_lib || return 1
  local soname
  soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  [[ $soname == libnccl.so.2 ]] || { echo "SONAME is '$soname', expected libnccl.so.2"; return 1; }
}

check_symlinks() {
  need_lib || return 1
  local l
  for l in libnccl.so libnccl.so.2.28.9; do
    [[ -L $LIBDIR/$l ]] || { echo "$LIBDIR/$l is not a symlink"; return 1; }
    [[ $LIBDIR/$l -ef $LIB ]] || { echo "$LIBDIR/$l does not lead to $LIB"; return 1; }
  done
}

# ----------------------------------------------------------------- b. header

# layout_run NAME COMPILER FLAGS...: builds layout.c and compares its output
# with layout.expected.
layout_run() {
  local name=$1 compiler=$2
  shift 2
  "$compiler" "$@" tests/abi/layout.c -o "$OUT/layout-$name" || return 1
  "$OUT/layout-$name" >"$OUT/layout-$name.txt" || return 1
  diff -u <(sed '/^#/d' tests/abi/layout.expected) "$OUT/layout-$name.txt" || {
    echo "(- NCCL 2.28.9, + this build)"; return 1; }
}

check_layout_c() { layout_run c "$CC" "${CFLAGS_STRICT[@]}" -Iinclude "${CUDA_INC[@]}"; }
check_layout_c_nocuda() { layout_run c-nocuda "$CC" "${CFLAGS_STRICT[@]}" -DBRAID_NO_CUDA -Iinclude; }
check_layout_cxx() { layout_run cxx "$CXX" "${CXXFLAGS_STRICT[@]}" -Iinclude "${CUDA_INC[@]}"; }
check_layout_cxx_nocuda() { layout_run cxx-nocuda "$CXX" "${CXXFLAGS_STRICT[@]}" -DBRAID_NO_CUDA -Iinclude; }

have_ref() {
  [[ -n $NCCL_REF_HEADER ]] || { echo "no NVIDIA nccl.h (NCCL_REF_HEADER is empty)"; return 1; }
  [[ -f $NCCL_REF_HEADER ]] || { echo "NCCL_REF_HEADER=$NCCL_REF_HEADER does not exist"; return 1; }
  echo '#include <nccl.h>' | "$CC" "${CFLAGS_REF[@]}" "${REF_INC[@]}" -x c -fsyntax-only - 2>/dev/null || {
    echo "NVIDIA's nccl.h does not compile here (CUDA headers missing?)"; return 1; }
}

check_layout_nvidia() {
  have_ref || return $SKIP
  layout_run nvidia-c "$CC" "${CFLAGS_REF[@]}" "${REF_INC[@]}" || return 1
  layout_run nvidia-cxx "$CXX" "${CXXFLAGS_STRICT[@]}" "${REF_INC[@]}" || return 1
  # Direct comparison too, in case layout.expected were stale.
  diff -u "$OUT/layout-nvidia-c.txt" "$OUT/layout-c.txt" || return 1
}

# Declarations `RET p?ncclName(ARGS);` of a header, one per line, comments,
# preprocessor lines and attributes removed. With --extern-c only those
# marked NCCL_EXTERN_C __host__ (the device API's host functions).
extract_decls() {
  perl -e '
    my $only_host = ($ARGV[0] eq "--extern-c") ? shift @ARGV : 0;
    my $s = join "", <>;
    $s =~ s{/\*.*?\*/}{ }gs; $s =~ s{//[^\n]*}{}g; $s =~ s{\\\n}{ }g;
    $s =~ s{^[ \t]*#[^\n]*}{}mg;
    $s =~ s{__attribute__\s*\(\((?:[^()]++|\((?:[^()]++|\([^()]*\))*\))*\)\)}{ }g;
    for my $st (split /[;{}]/, $s) {
      $st =~ s/\s+/ /g;
      next if $only_host && $st !~ /NCCL_EXTERN_C __host__/;
      next unless $st =~ /((?:const )?\w+ ?\**) ?\b(p?nccl\w+) ?\(([^()]*)\) ?$/;
      my ($ret, $name, $args) = ($1, $2, $3);
      $args = "void" if $args =~ /^ ?$/;
      print "$ret $name($args);\n";
    }' -- "$@"
}

check_prototypes() {
  have_ref || return $SKIP
  local decls=$OUT/proto-nvidia.h src=$OUT/proto-check.c n
  extract_decls "$NCCL_REF_HEADER" >"$decls"
  n=$(wc -l <"$decls")
  echo "$n declarations in NVIDIA's nccl.h"
  [[ $n -ge 80 ]] || { echo "too few declarations extracted"; return 1; }
  # Braid's header first, then NVIDIA's declarations: any difference in a
  # return or parameter type is a "conflicting types" error.
  { echo '#include <nccl.h>'; cat "$decls"; } >"$src"
  "$CC" "${CFLAGS_REF[@]}" -Wno-deprecated-declarations -Iinclude "${CUDA_INC[@]}" \
    -fsyntax-only "$src" || return 1
  # The check must be able to fail: one changed parameter type is caught.
  { echo '#include <nccl.h>'; sed 's/^\(ncclResult_t  *ncclMemAlloc(void\*\* ptr, \)size_t/\1int/' "$decls"; } >"$OUT/proto-mutant.c"
  if cmp -s "$src" "$OUT/proto-mutant.c"; then echo "self-test mutation did not apply"; return 1; fi
  if "$CC" "${CFLAGS_REF[@]}" -Iinclude "${CUDA_INC[@]}" -fsyntax-only "$OUT/proto-mutant.c" 2>/dev/null; then
    echo "a changed ncclMemAlloc signature was not detected"; return 1
  fi
  # Same set of functions both ways.
  diff -u <(extract_decls "$NCCL_REF_HEADER" | sed 's/.*\b\(p\?nccl[A-Za-z0-9]*\)(.*/\1/' | LC_ALL=C sort -u) \
          <(extract_decls include/nccl.h | sed 's/.*\b\(p\?nccl[A-Za-z0-9]*\)(.*/\1/' | LC_ALL=C sort -u) || {
    echo "(- declared by NVIDIA only, + by Braid only)"; return 1; }
}

# Every exported name is declared by the headers (nccl.h and the device
# API), and every declared name is exported.
check_declared_exported() {
  local names
  if have_ref >/dev/null; then
    names=$( { extract_decls "$NCCL_REF_HEADER"
               extract_decls --extern-c "$REF_DIR"/nccl_device/*.h 2>/dev/null || true; } |
             sed 's/.*\b\(p\?nccl[A-Za-z0-9]*\)(.*/\1/')
    echo "headers: NVIDIA's"
  else
    names=$( { extract_decls include/nccl.h; extract_decls src/core/devapi.h; } |
             sed 's/.*\b\(p\?nccl[A-Za-z0-9]*\)(.*/\1/')
    echo "headers: Braid's"
  fi
  # NVIDIA's device headers declare only nccl<X>; the library adds pnccl<X>.
  diff -u <(syms_list) <( { echo "$names"; echo "$names" | sed 's/^nccl/pnccl/'; echo "$LONE_STRONG"; } |
                          LC_ALL=C sort -u) || {
    echo "(- exported but not declared, + declared but not exported)"; return 1; }
}

check_devapi_layout() {
  "$CC" "${CFLAGS_STRICT[@]}" -Iinclude -Isrc/core "${CUDA_INC[@]}" \
    tests/abi/devapi_layout.c -o "$OUT/devapi-layout" || return 1
  "$OUT/devapi-layout" >"$OUT/devapi-layout.txt" || return 1
  diff -u <(sed '/^#/d' tests/abi/devapi_layout.expected) "$OUT/devapi-layout.txt" || {
    echo "(- NCCL 2.28.9, + Braid's devapi.h)"; return 1; }
  if have_ref >/dev/null && [[ -f $REF_DIR/nccl_device.h ]]; then
    "$CXX" -std=c++17 -Wall -Wextra -Werror -x c++ -DBRAID_REF_DEVICE "${REF_INC[@]}" \
      tests/abi/devapi_layout.c -o "$OUT/devapi-layout-nvidia" || return 1
    "$OUT/devapi-layout-nvidia" >"$OUT/devapi-layout-nvidia.txt" || return 1
    diff -u "$OUT/devapi-layout-nvidia.txt" "$OUT/devapi-layout.txt" || {
      echo "(- NVIDIA's nccl_device.h, + Braid's devapi.h)"; return 1; }
  else
    echo "NVIDIA's nccl_device.h not found: compared with devapi_layout.expected only"
  fi
}

check_devapi_prototypes() {
  have_ref || return $SKIP
  [[ -f $REF_DIR/nccl_device.h ]] || { echo "NVIDIA's nccl_device headers are not installed"; return $SKIP; }
  local decls=$OUT/proto-devapi.h n
  extract_decls --extern-c "$REF_DIR"/nccl_device/*.h >"$decls"
  n=$(wc -l <"$decls")
  echo "$n host declarations in NVIDIA's nccl_device headers"
  [[ $n -ge 11 ]] || { echo "too few declarations extracted"; return 1; }
  { echo '#include "devapi.h"'; cat "$decls"; } >"$OUT/proto-devapi.c"
  "$CC" "${CFLAGS_REF[@]}" -Iinclude -Isrc/core "${CUDA_INC[@]}" -fsyntax-only \
    "$OUT/proto-devapi.c" || return 1
}

# -------------------------------------------------------------- c. link test

# link_run NAME HEADER-FLAGS...: builds link_test.c and runs it on Braid.
link_run() {
  local name=$1
  shift
  need_lib || return 1
  local abs_lib
  abs_lib=$(cd "$LIBDIR" && pwd)
  "$CC" "${CFLAGS_REF[@]}" "$@" tests/abi/link_test.c -o "$OUT/$name" \
    -L"$LIBDIR" -Wl,-rpath,"$abs_lib" -lnccl -ldl || return 1
  BRAID_DEVICE=host timeout 60 "$OUT/$name" "$abs_lib/libnccl.so.2" "$SYMS" || return 1
}

check_link_nvidia_header() {
  have_ref || return $SKIP
  link_run link-test-nvidia "${REF_INC[@]}"
}

check_link_braid_header() {
  link_run link-test-braid -Iinclude "${CUDA_INC[@]}"
}

# ------------------------------------------------------------------- run all

echo "ABI checks: BUILD=$BUILD CUDA=$CUDA NCCL_REF_HEADER=${NCCL_REF_HEADER:-<none>} NVIDIA lib=${NV_LIB:-<none>}"
run_check a-syms-file check_syms_file
run_check a-exports-equal-syms check_exports
run_check a-no-other-exports check_no_other_exports
run_check a-bindings check_bindings
run_check a-nvidia-exports check_nvidia_exports
run_check a-soname check_soname
run_check a-symlinks check_symlinks
run_check b-layout-c check_layout_c
run_check b-layout-c-nocuda check_layout_c_nocuda
run_check b-layout-cxx check_layout_cxx
run_check b-layout-cxx-nocuda check_layout_cxx_nocuda
run_check b-layout-nvidia check_layout_nvidia
run_check b-prototypes check_prototypes
run_check b-declared-exported check_declared_exported
run_check b-devapi-layout check_devapi_layout
run_check b-devapi-prototypes check_devapi_prototypes
run_check c-link-nvidia-header check_link_nvidia_header
run_check c-link-braid-header check_link_braid_header

echo "ABI: $npass passed, $nfail failed, $nskip skipped"
[[ $nfail -eq 0 ]]
