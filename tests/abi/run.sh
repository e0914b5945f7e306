#!/usr/bin/env bash
# ABI checks: Braid's libnccl.so.2 and nccl.h against NCCL 2.30.7.
#
#   a. exported symbols: the exact list in tools/abi/nccl-2.30.7.syms, with
#      NVIDIA's bindings (nccl* weak, pnccl* strong), SONAME and symlinks;
#      equal to NVIDIA's 2.30.7 library where it is available; a superset of
#      an installed older NVIDIA library's; every nccl* name PyTorch 2.15.0's
#      libtorch_cuda.so imports (tools/abi/torch-2.15.0.imports).
#   b. header: every size, offset, enumerator, macro and initializer value
#      (tests/abi/layout.c, and a list generated from NVIDIA's header by
#      tests/abi/gen-layout) equal to NVIDIA's 2.30.7, as C and C++, with and
#      without CUDA; every prototype identical to NVIDIA's; the device API's
#      types. Without NVIDIA's 2.30.7 header the outputs are compared with
#      the expected files recorded from it, and the log says so.
#   c. programs built against a header, linked against Braid, run in host
#      mode: tests/abi/link_test.c (Braid's header, NVIDIA's 2.30.7 and
#      NVIDIA's 2.28.9), tests/abi/old_config.c (2.28.9: an 80-byte config).
#
# NVIDIA's 2.30.7 files come from the nvidia-nccl-cu13 wheel, used only when
# it is already here: NCCL_REF_DIR (the unpacked wheel, or its
# nvidia/nccl), else $BUILD/abi-ref/nvidia/nccl, else a wheel file named by
# NCCL_REF_WHEEL or found in $BUILD/abi-ref (unpacked there). Nothing is
# downloaded unless BRAID_ABI_FETCH=1 (then pip downloads the wheel into
# $BUILD/abi-ref). NVIDIA's 2.28.9 header is the installed one
# ($CUDA_HOME/include/nccl.h or /usr/include/nccl.h).
#
# Prints one PASS/FAIL/SKIP line per check and exits non-zero if any failed.
# Environment: BUILD (build dir, default build), NCCL_REF_HEADER (an NVIDIA
# nccl.h: a 2.30.7 one is the reference, an older one the old header; empty:
# none), NCCL_REF_DIR, NCCL_REF_WHEEL, BRAID_ABI_FETCH, CUDA_HOME (default
# /usr/local/cuda), CUDA (1: compile with CUDA headers), CC, CXX.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"

BUILD=${BUILD:-build}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CUDA=${CUDA:-1}
CC=${CC:-gcc}
[[ $CC == cc ]] && CC=gcc
CXX=${CXX:-g++}
NCCL_VER=2.30.7
NCCL_CODE=23007
LIBDIR=$BUILD/lib
LIB=$LIBDIR/libnccl.so.2
SYMS=tools/abi/nccl-$NCCL_VER.syms
TORCH_IMPORTS=tools/abi/torch-2.15.0.imports
OUT=$BUILD/tests/abi
REF_CACHE=$BUILD/abi-ref
mkdir -p "$OUT"

header_code() { sed -n 's/^#define NCCL_VERSION_CODE  *\([0-9]*\).*/\1/p' "$1" | head -n 1; }

# NVIDIA's 2.30.7 wheel contents, if here (see the top of this file).
REF_ROOT= REF_HOW=
find_ref() {
  local d w
  for d in "${NCCL_REF_DIR:-}" "${NCCL_REF_DIR:-}/nvidia/nccl" "$REF_CACHE/nvidia/nccl"; do
    if [[ -n $d && -f $d/include/nccl.h && $(header_code "$d/include/nccl.h") == "$NCCL_CODE" ]]; then
      REF_ROOT=$d REF_HOW="unpacked wheel in $d"; return; fi
  done
  if [[ ${BRAID_ABI_FETCH:-0} == 1 ]] && ! compgen -G "$REF_CACHE/nvidia_nccl_cu13-$NCCL_VER-*.whl" >/dev/null; then
    mkdir -p "$REF_CACHE"
    pip download -q --no-deps "nvidia-nccl-cu13==$NCCL_VER" -d "$REF_CACHE" >&2 || true
  fi
  for w in "${NCCL_REF_WHEEL:-}" "$REF_CACHE"/nvidia_nccl_cu13-"$NCCL_VER"-*.whl; do
    if [[ -n $w && -f $w ]]; then
      mkdir -p "$REF_CACHE"
      unzip -q -o "$w" 'nvidia/nccl/*' -d "$REF_CACHE" >&2 || continue
      if [[ -f $REF_CACHE/nvidia/nccl/include/nccl.h ]]; then
        REF_ROOT=$REF_CACHE/nvidia/nccl REF_HOW="wheel $w"; return; fi
    fi
  done
}
find_ref

# The installed (older) NVIDIA header and library, for the compatibility
# checks, and NCCL_REF_HEADER sorted into one or the other.
OLD_HEADER= OLD_LIB=
for h in "${NCCL_REF_HEADER:-}" "$CUDA_HOME/include/nccl.h" /usr/include/nccl.h; do
  [[ -n $h && -f $h ]] || continue
  if [[ $(header_code "$h") == "$NCCL_CODE" ]]; then
    [[ -z $REF_ROOT ]] && REF_ROOT=$(cd "$(dirname "$h")/.." && pwd) REF_HOW="NCCL_REF_HEADER $h"
  elif [[ -z $OLD_HEADER && $(header_code "$h") -lt $NCCL_CODE ]]; then
    OLD_HEADER=$h
  fi
done
for l in "$CUDA_HOME"/lib*/libnccl.so.2 /usr/local/cuda*/lib*/libnccl.so.2; do
  if [[ -f $l && ! $l -ef $LIB ]]; then OLD_LIB=$l; break; fi
done
NCCL_REF_HEADER=
[[ -n $REF_ROOT && -f $REF_ROOT/include/nccl.h ]] && NCCL_REF_HEADER=$REF_ROOT/include/nccl.h

# The C runtime may add these to a shared library's dynamic table.
RUNTIME_SYMS="_init _fini _edata _end __bss_start"
# NVIDIA exports this one strong, without a pnccl twin.
LONE_STRONG=ncclResetDebugInitInternal
NSYMS=165

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

# NVIDIA's 2.30.7 libnccl.so.2, if here (never Braid's own).
NV_LIB=
if [[ -n $REF_ROOT && -f $REF_ROOT/lib/libnccl.so.2 && ! $REF_ROOT/lib/libnccl.so.2 -ef $LIB ]]; then
  NV_LIB=$REF_ROOT/lib/libnccl.so.2
fi

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
  [[ -n $NV_LIB ]] || { echo "NVIDIA's $NCCL_VER libnccl.so.2 is not here (see tests/abi/run.sh: NCCL_REF_DIR, NCCL_REF_WHEEL, BRAID_ABI_FETCH=1); compared with $SYMS only"; return $SKIP; }
  need_lib || return 1
  echo "NVIDIA library: $NV_LIB"
  exported "$NV_LIB" >"$OUT/exports.nvidia"
  diff -u <(syms_list) <(awk '{ print $2 }' "$OUT/exports.nvidia") || {
    echo "(the syms file differs from NVIDIA's exports)"; return 1; }
  diff -u "$OUT/exports.nvidia" <(exported "$LIB") || {
    echo "(- NVIDIA's binding, + Braid's)"; return 1; }
}

# Nothing an older NVIDIA release exports is missing (no name was ever
# removed between 2.28.9 and 2.30.7).
check_old_exports() {
  [[ -n $OLD_LIB ]] || { echo "no older NVIDIA libnccl.so.2 installed"; return $SKIP; }
  need_lib || return 1
  echo "older NVIDIA library: $OLD_LIB"
  local missing
  missing=$(comm -23 <(exported "$OLD_LIB" | awk '{ print $2 }') <(exported "$LIB" | awk '{ print $2 }'))
  [[ -z $missing ]] || { echo "exported by $OLD_LIB but not by Braid:"; echo "$missing"; return 1; }
}

# Every nccl* name PyTorch 2.15.0's libtorch_cuda.so imports is exported:
# otherwise `import torch` fails with "undefined symbol".
check_torch_imports() {
  need_lib || return 1
  head -n 1 "$TORCH_IMPORTS" | grep -q '^#' || { echo "$TORCH_IMPORTS: first line must be a # comment"; return 1; }
  local n missing
  n=$(sed -e '/^#/d' -e '/^$/d' "$TORCH_IMPORTS" | wc -l)
  [[ $n -ge 51 ]] || { echo "$TORCH_IMPORTS lists $n names; torch 2.15.0 imports 51"; return 1; }
  missing=$(comm -23 <(sed -e '/^#/d' -e '/^$/d' "$TORCH_IMPORTS" | LC_ALL=C sort) \
                     <(exported "$LIB" | awk '{ print $2 }' | LC_ALL=C sort))
  [[ -z $missing ]] || { echo "imported by torch 2.15.0 but not exported by Braid:"; echo "$missing"; return 1; }
  echo "$n names imported by libtorch_cuda.so, all exported"
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
  for l in libnccl.so libnccl.so.$NCCL_VER; do
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
    echo "(- NCCL $NCCL_VER, + this build)"; return 1; }
}

check_layout_c() { layout_run c "$CC" "${CFLAGS_STRICT[@]}" -Iinclude "${CUDA_INC[@]}"; }
check_layout_c_nocuda() { layout_run c-nocuda "$CC" "${CFLAGS_STRICT[@]}" -DBRAID_NO_CUDA -Iinclude; }
check_layout_cxx() { layout_run cxx "$CXX" "${CXXFLAGS_STRICT[@]}" -Iinclude "${CUDA_INC[@]}"; }
check_layout_cxx_nocuda() { layout_run cxx-nocuda "$CXX" "${CXXFLAGS_STRICT[@]}" -DBRAID_NO_CUDA -Iinclude; }

have_ref() {
  [[ -n $NCCL_REF_HEADER ]] || { echo "NVIDIA's $NCCL_VER nccl.h is not here (NCCL_REF_DIR, NCCL_REF_WHEEL or BRAID_ABI_FETCH=1)"; return 1; }
  [[ -f $NCCL_REF_HEADER ]] || { echo "NCCL_REF_HEADER=$NCCL_REF_HEADER does not exist"; return 1; }
  echo '#include <nccl.h>' | "$CC" "${CFLAGS_REF[@]}" "${REF_INC[@]}" -x c -fsyntax-only - 2>/dev/null || {
    echo "NVIDIA's nccl.h does not compile here (CUDA headers missing?)"; return 1; }
}

# The generated comparison: tests/abi/gen-layout lists every struct field,
# enumerator and numeric macro of NVIDIA's header; the probe it writes is
# built against NVIDIA's header and Braid's. Without NVIDIA's header, the
# probe and output recorded from it (layout_gen.c, layout_gen.expected)
# stand in. A mutated copy of Braid's header must be caught.
check_layout_generated() {
  local probe=tests/abi/layout_gen.c
  if have_ref >/dev/null; then
    echo "reference: NVIDIA's $NCCL_VER header ($REF_HOW)"
    python3 tests/abi/gen-layout "$NCCL_REF_HEADER" >"$OUT/layout_gen.c" || return 1
    diff -u "$probe" "$OUT/layout_gen.c" || {
      echo "(tests/abi/layout_gen.c is stale: regenerate it with tests/abi/gen-layout)"; return 1; }
    "$CC" "${CFLAGS_REF[@]}" "${REF_INC[@]}" "$OUT/layout_gen.c" -o "$OUT/layout-gen-nvidia" || return 1
    "$OUT/layout-gen-nvidia" >"$OUT/layout-gen-nvidia.txt" || return 1
    diff -u <(sed '/^#/d' tests/abi/layout_gen.expected) "$OUT/layout-gen-nvidia.txt" || {
      echo "(tests/abi/layout_gen.expected is stale)"; return 1; }
  else
    echo "reference: tests/abi/layout_gen.expected (NVIDIA's $NCCL_VER header is not here)"
  fi
  "$CC" "${CFLAGS_REF[@]}" -Iinclude "${CUDA_INC[@]}" "$probe" -o "$OUT/layout-gen-braid" || return 1
  "$OUT/layout-gen-braid" >"$OUT/layout-gen-braid.txt" || return 1
  echo "$(grep -c . "$OUT/layout-gen-braid.txt") facts compared"
  diff -u <(sed '/^#/d' tests/abi/layout_gen.expected) "$OUT/layout-gen-braid.txt" || {
    echo "(- NVIDIA $NCCL_VER, + Braid)"; return 1; }
  # Self-test: a header with one field widened must differ.
  mkdir -p "$OUT/mutant"
  sed 's/^\(  *\)int maxP2pPeers;/\1long maxP2pPeers;/' include/nccl.h >"$OUT/mutant/nccl.h"
  cmp -s include/nccl.h "$OUT/mutant/nccl.h" && { echo "self-test mutation did not apply"; return 1; }
  "$CC" "${CFLAGS_REF[@]}" -I"$OUT/mutant" "${CUDA_INC[@]}" "$probe" -o "$OUT/layout-gen-mutant" || return 1
  if "$OUT/layout-gen-mutant" | diff -q <(sed '/^#/d' tests/abi/layout_gen.expected) - >/dev/null; then
    echo "a widened ncclConfig_t.maxP2pPeers was not detected"; return 1
  fi
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
  # NCCL_OS_LINUX: both headers declare ncclResetDebugInit only then.
  "$CC" "${CFLAGS_REF[@]}" -DNCCL_OS_LINUX -Wno-deprecated-declarations -Iinclude "${CUDA_INC[@]}" \
    -fsyntax-only "$src" || return 1
  # The check must be able to fail: one changed parameter type is caught.
  { echo '#include <nccl.h>'; sed 's/^\(ncclResult_t  *ncclMemAlloc(void\*\* ptr, \)size_t/\1int/' "$decls"; } >"$OUT/proto-mutant.c"
  if cmp -s "$src" "$OUT/proto-mutant.c"; then echo "self-test mutation did not apply"; return 1; fi
  if "$CC" "${CFLAGS_REF[@]}" -DNCCL_OS_LINUX -Iinclude "${CUDA_INC[@]}" -fsyntax-only "$OUT/proto-mutant.c" 2>/dev/null; then
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
  "$CC" "${CFLAGS_STRICT[@]}" -Iinclude -Isrc "${CUDA_INC[@]}" \
    tests/abi/devapi_layout.c -o "$OUT/devapi-layout" || return 1
  "$OUT/devapi-layout" >"$OUT/devapi-layout.txt" || return 1
  diff -u <(sed '/^#/d' tests/abi/devapi_layout.expected) "$OUT/devapi-layout.txt" || {
    echo "(- NCCL $NCCL_VER, + Braid's devapi.h)"; return 1; }
  if have_ref >/dev/null && [[ -f $REF_DIR/nccl_device.h ]]; then
    "$CXX" -std=c++17 -Wall -Wextra -Werror -Wno-unused-function -x c++ -DBRAID_REF_DEVICE "${REF_INC[@]}" \
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
  { echo '#include "core/devapi.h"'; cat "$decls"; } >"$OUT/proto-devapi.c"
  "$CC" "${CFLAGS_REF[@]}" -Iinclude -Isrc "${CUDA_INC[@]}" -fsyntax-only \
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

old_inc() {
  OLD_INC=(-I"$(dirname "$OLD_HEADER")")
  [[ -f $CUDA_HOME/include/cuda_runtime.h ]] && OLD_INC+=(-I"$CUDA_HOME/include")
}

# A program built against NVIDIA's 2.28.9 header runs unchanged.
check_link_old_header() {
  [[ -n $OLD_HEADER ]] || { echo "no older NVIDIA nccl.h installed"; return $SKIP; }
  echo "old header: $OLD_HEADER (NCCL_VERSION_CODE $(header_code "$OLD_HEADER"))"
  old_inc
  link_run link-test-old "${OLD_INC[@]}"
}

# ... and its 80-byte ncclConfig_t is read as 80 bytes.
check_old_config() {
  [[ -n $OLD_HEADER ]] || { echo "no older NVIDIA nccl.h installed"; return $SKIP; }
  [[ $(header_code "$OLD_HEADER") -lt 22900 ]] || { echo "$OLD_HEADER is not a 2.28 header"; return $SKIP; }
  need_lib || return 1
  old_inc
  local abs_lib
  abs_lib=$(cd "$LIBDIR" && pwd)
  "$CC" "${CFLAGS_REF[@]}" "${OLD_INC[@]}" tests/abi/old_config.c -o "$OUT/old-config" \
    -L"$LIBDIR" -Wl,-rpath,"$abs_lib" -lnccl || return 1
  BRAID_DEVICE=host timeout 60 "$OUT/old-config"
}

# ------------------------------------------------------------------- run all

echo "ABI checks (NCCL $NCCL_VER): BUILD=$BUILD CUDA=$CUDA reference=${REF_HOW:-<none: in-tree expected files>} NVIDIA lib=${NV_LIB:-<none>} old header=${OLD_HEADER:-<none>}"
run_check a-syms-file check_syms_file
run_check a-exports-equal-syms check_exports
run_check a-no-other-exports check_no_other_exports
run_check a-bindings check_bindings
run_check a-nvidia-exports check_nvidia_exports
run_check a-old-exports check_old_exports
run_check a-torch-imports check_torch_imports
run_check a-soname check_soname
run_check a-symlinks check_symlinks
run_check b-layout-c check_layout_c
run_check b-layout-c-nocuda check_layout_c_nocuda
run_check b-layout-cxx check_layout_cxx
run_check b-layout-cxx-nocuda check_layout_cxx_nocuda
run_check b-layout-nvidia check_layout_nvidia
run_check b-layout-generated check_layout_generated
run_check b-prototypes check_prototypes
run_check b-declared-exported check_declared_exported
run_check b-devapi-layout check_devapi_layout
run_check b-devapi-prototypes check_devapi_prototypes
run_check c-link-nvidia-header check_link_nvidia_header
run_check c-link-braid-header check_link_braid_header
run_check c-link-old-header check_link_old_header
run_check c-old-config check_old_config

echo "ABI: $npass passed, $nfail failed, $nskip skipped"
[[ $nfail -eq 0 ]]
