#!/usr/bin/env bash
# Braid's IB verbs net on real verbs: soft-RoCE (rdma_rxe) in a throwaway VM
# (make test-rxe; not part of make test: it installs packages and boots a
# VM under TCG, a few minutes on two cores).
#
#  1. Installs what is missing with apt-get (root; apt-get update first):
#     Debian's kernel image (rdma_rxe is a module of it), qemu-system-x86,
#     busybox-static, rdma-core, ibverbs-utils, ibverbs-providers, perftest,
#     iproute2; and virtme-ng (vng, pinned) from PyPI into a venv,
#     RXE_VENV (default $BUILD/rxe-venv).
#  2. Boots that kernel over a snapshot of this machine's root filesystem
#     (vng --disable-kvm: TCG, since KVM is not dependable on every host),
#     RXE_CPUS vCPUs (2) and RXE_MEM (2G), and runs tests/rxe/guest.sh in
#     it as root: rxe0 on the loopback interface, then Braid's collectives
#     with every peer on the IB net, the net's own test program on real
#     verbs, and the bandwidth of the IB net against ib_write_bw on rxe0
#     (guest.sh's header has the list).
#  3. Prints the guest's log and its summary; RXE_LOGS=<dir> keeps them.
#
# Environment: BUILD (the build folder with the programs, as make's),
# RXE_KERNEL (a vmlinuz to boot; default the newest /boot/vmlinuz-* whose
# modules hold rdma_rxe), RXE_TIMEOUT (seconds for the whole VM run,
# default 2400), RXE_QUICK=1 (skip the conformance programs in the guest),
# RXE_PARTS (the guest's parts, guest.sh's header).
# Exit status: 0 when every check passed, 1 when one failed, 77 (with a
# line saying why) when this machine cannot run it: no root to install, no
# network for the packages, no kernel with rdma_rxe, a VM that does not boot.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
BUILD=${BUILD:-build}
VENV=${RXE_VENV:-$BUILD/rxe-venv}
VNG_VERSION=1.42
SKIP=77

cannot() { echo "SKIP: test-rxe cannot run here: $*"; exit $SKIP; }

for p in lib/libnccl.so.2 bin/all_reduce_perf bin/all_gather_perf bin/sendrecv_perf \
  bin/braid-netbw tests/unit/test_net_ib tests/host/test_allreduce tests/host/test_collectives; do
  [[ -e $BUILD/$p ]] || { echo "test-rxe: $BUILD/$p is missing; build it first (make BUILD=$BUILD test-rxe builds it)"; exit 1; }
done

# ---- 1. packages --------------------------------------------------------------------------------
rxe_kernel() { # the newest /boot/vmlinuz-* whose modules hold rdma_rxe
  local k v
  for k in $(ls -1 /boot/vmlinuz-* 2>/dev/null | sort -V -r); do
    v=${k#/boot/vmlinuz-}
    if compgen -G "/lib/modules/$v/kernel/drivers/infiniband/sw/rxe/rdma_rxe.ko*" >/dev/null; then
      echo "$k"
      return 0
    fi
  done
  return 1
}
have_all() {
  command -v qemu-system-x86_64 >/dev/null && command -v ib_write_bw >/dev/null &&
    command -v rdma >/dev/null && command -v ibv_devinfo >/dev/null &&
    command -v busybox >/dev/null && compgen -G "/usr/lib/*/libibverbs/librxe-rdmav*.so" >/dev/null &&
    { [[ -n ${RXE_KERNEL:-} ]] || rxe_kernel >/dev/null; }
}
if ! have_all; then
  [[ $(id -u) -eq 0 ]] || cannot "packages are missing (qemu-system-x86, perftest, rdma-core, a Debian kernel) and installing them needs root"
  command -v apt-get >/dev/null || cannot "packages are missing and there is no apt-get to install them"
  echo "== apt-get install (kernel image, qemu, rdma-core, perftest; a few minutes once)"
  pkgs=(linux-image-amd64 qemu-system-x86 busybox-static rdma-core ibverbs-utils ibverbs-providers
    perftest iproute2)
  if ! apt-get update -q >/tmp/test-rxe-apt.log 2>&1 ||
    ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" \
      >>/tmp/test-rxe-apt.log 2>&1; then
    tail -n 5 /tmp/test-rxe-apt.log
    cannot "apt-get could not install ${pkgs[*]} (no network or no Debian mirror?); log in /tmp/test-rxe-apt.log"
  fi
  have_all || cannot "after apt-get, still missing one of qemu-system-x86_64, ib_write_bw, rdma, ibv_devinfo, busybox, the rxe provider or a kernel with rdma_rxe"
fi
KERNEL=${RXE_KERNEL:-$(rxe_kernel)}
[[ -f $KERNEL ]] || cannot "no kernel image $KERNEL"

if [[ ! -x $VENV/bin/vng ]] || ! "$VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('virtme-ng') != '$VNG_VERSION')" 2>/dev/null; then
  echo "== creating $VENV with virtme-ng $VNG_VERSION (from PyPI)"
  { python3 -m venv "$VENV" && "$VENV/bin/pip" install -q "virtme-ng==$VNG_VERSION"; } ||
    cannot "installing virtme-ng $VNG_VERSION from PyPI into $VENV failed (no network?)"
fi

# ---- 2. the VM ----------------------------------------------------------------------------------
work=$(mktemp -d /tmp/test-rxe.XXXXXX)
chmod 755 "$work"
cleanup() {
  if [[ -n ${RXE_LOGS:-} ]]; then mkdir -p "$RXE_LOGS" && cp -r "$work"/. "$RXE_LOGS"/; fi
  rm -rf "$work"
}
trap cleanup EXIT
echo "== booting $KERNEL under TCG (vng --disable-kvm, ${RXE_CPUS:-2} vCPUs, ${RXE_MEM:-2G}); guest: tests/rxe/guest.sh"
echo "   host: $(uname -srm), $(nproc) CPUs; commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
start=$SECONDS
cp tests/rxe/guest.sh "$work/guest.sh" # a fixed copy: bash reads a script as it runs
# vng runs its qemu through virtme-run, which it looks up on PATH.
PATH="$ROOT/$VENV/bin:$PATH" timeout --kill-after=20 "${RXE_TIMEOUT:-2400}" \
  "$VENV/bin/vng" -r "$KERNEL" --user root --disable-kvm -p "${RXE_CPUS:-2}" -m "${RXE_MEM:-2G}" \
  --rwdir "$work" --cwd "$ROOT" \
  --exec "BUILD=$BUILD RXE_QUICK=${RXE_QUICK:-0} RXE_PARTS='${RXE_PARTS:-}' bash $work/guest.sh $work" \
  >"$work/vm.log" 2>&1
vrc=$?
echo "== VM done in $((SECONDS - start)) s (exit $vrc)"
if [[ -f $work/guest.log ]]; then
  cat "$work/guest.log"
else
  tail -n 40 "$work/vm.log"
fi
if [[ ! -f $work/status ]]; then
  [[ $vrc -eq 124 || $vrc -eq 137 ]] && echo "test-rxe: the VM run passed RXE_TIMEOUT (${RXE_TIMEOUT:-2400} s)"
  [[ -f $work/guest.log ]] && { echo "FAIL: the guest script stopped before its end"; exit 1; }
  cannot "the VM did not boot or did not run the guest script (vng exit $vrc; the lines above are its output)"
fi
status=$(cat "$work/status")
case $status in
  0) echo "PASS: test-rxe (every check passed on soft-RoCE)"; exit 0 ;;
  77) echo "SKIP: test-rxe: the guest could not set up soft-RoCE (see above)"; exit $SKIP ;;
  *) echo "FAIL: test-rxe ($(grep -c '^FAIL' "$work/guest.log") checks failed)"; exit 1 ;;
esac
