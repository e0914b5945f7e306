#!/usr/bin/env bash
# Braid's network path against the usual yardsticks (docs/perf/net.md).
#
#  1. Point to point between two network namespaces joined by a veth pair:
#     iperf3 (one stream, then --bidir) against build/bin/sendrecv_perf at
#     64 MiB, one rank per namespace (host mode, distinct BRAID_HOSTID, the
#     socket net on the veth, processes meeting through BRAID_PERF_WORLD).
#     sendrecv with two ranks sends both ways at once, so its busbw is per
#     direction; compare it with --bidir's per-direction rate as well as the
#     one-stream rate.
#  2. All-reduce, 4 ranks on this host, every peer over the socket net
#     (NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1), against Open MPI's
#     MPI_Allreduce over TCP (--mca pml ob1 --mca btl tcp,self), float sum,
#     8 B .. 64 MiB; per size the median time of REPS sweeps.
#
# Each part skips, saying why, without what it needs: part 1 root (or
# CAP_NET_ADMIN), iproute2 and iperf3; part 2 mpirun and mpicc.
# Environment: BUILD (default build), REPS (repetitions, default 5),
# PARTS ("1 2" by default), LOGS (keep raw outputs in this folder).
# Not part of make test: it takes a few minutes and wants a quiet machine.
set -uo pipefail

BUILD=${BUILD:-build}
REPS=${REPS:-5}
PARTS=${PARTS:-1 2}
work=$(mktemp -d)
tag=$$
NSA=bnet${tag}a
NSB=bnet${tag}b
IFA=bnv${tag}a
IFB=bnv${tag}b
ns_made=0

cleanup() {
  if [[ $ns_made -eq 1 ]]; then
    ip netns del "$NSA" 2>/dev/null
    ip netns del "$NSB" 2>/dev/null
  fi
  [[ -n ${LOGS:-} ]] && mkdir -p "$LOGS" && cp -r "$work"/. "$LOGS"/
  rm -rf "$work"
}
trap cleanup EXIT

# Median of the numbers on stdin.
median() { sort -g | awk '{v[NR]=$1} END {if (NR==0) print "nan"; else if (NR%2) print v[(NR+1)/2]; else print (v[NR/2]+v[NR/2+1])/2}'; }

echo "# bench-net: $(date -u '+%Y-%m-%d %H:%M UTC'), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"

part1() {
  echo
  echo "## 1. point to point over a veth pair between two namespaces, 64 MiB"
  local bin=$BUILD/bin/sendrecv_perf
  if [[ ! -x $bin ]]; then echo "SKIP: $bin is not built (make tools)"; return 0; fi
  if [[ $(id -u) -ne 0 ]]; then echo "SKIP: needs root to create network namespaces"; return 0; fi
  if ! command -v ip >/dev/null; then echo "SKIP: ip (iproute2) is not installed"; return 0; fi
  if ! command -v iperf3 >/dev/null; then echo "SKIP: iperf3 is not installed (apt-get install -y iperf3)"; return 0; fi
  if ! ip netns add "$NSA" 2>/dev/null; then echo "SKIP: ip netns add is not permitted here"; return 0; fi
  ns_made=1
  if ! ip netns add "$NSB" || ! ip link add "$IFA" type veth peer name "$IFB" ||
     ! ip link set "$IFA" netns "$NSA" || ! ip link set "$IFB" netns "$NSB"; then
    echo "SKIP: cannot create a veth pair between namespaces here"; return 0
  fi
  ip -n "$NSA" addr add 10.79.0.1/24 dev "$IFA"
  ip -n "$NSB" addr add 10.79.0.2/24 dev "$IFB"
  for ns in "$NSA" "$NSB"; do ip -n "$ns" link set lo up; done
  ip -n "$NSA" link set "$IFA" up
  ip -n "$NSB" link set "$IFB" up

  local r uni bid braid ok=1
  : >"$work/uni"; : >"$work/bidir"; : >"$work/braid"; : >"$work/braid_inplace"
  for ((r = 1; r <= REPS; r++)); do
    # iperf3: one stream A -> B, 3 s; the receiver's rate.
    ip netns exec "$NSB" iperf3 -s -1 >/dev/null 2>&1 &
    local srv=$!
    sleep 0.3
    ip netns exec "$NSA" timeout 30 iperf3 -c 10.79.0.2 -t 3 -f g >"$work/iperf-uni-$r.txt" 2>&1
    wait "$srv"
    uni=$(awk '/receiver/ {for (i=1;i<=NF;i++) if ($i=="Gbits/sec") print $(i-1)}' "$work/iperf-uni-$r.txt" | tail -1)
    ip netns exec "$NSB" iperf3 -s -1 >/dev/null 2>&1 &
    srv=$!
    sleep 0.3
    ip netns exec "$NSA" timeout 30 iperf3 -c 10.79.0.2 -t 3 -f g --bidir >"$work/iperf-bidir-$r.txt" 2>&1
    wait "$srv"
    # Mean of the two directions' receiver rates.
    bid=$(awk '/receiver/ {for (i=1;i<=NF;i++) if ($i=="Gbits/sec") {s+=$(i-1); n++}} END {if (n) print s/n}' "$work/iperf-bidir-$r.txt")
    # Braid: one rank per namespace; the first repetition checks values.
    local chk=0; [[ $r -eq 1 ]] && chk=1
    local p pids=()
    for p in 0 1; do
      local ns=$NSA; [[ $p -eq 1 ]] && ns=$NSB
      ip netns exec "$ns" env BRAID_DEVICE=host BRAID_HOSTID="bench-node-$p" \
        NCCL_SOCKET_IFNAME=bnv BRAID_PERF_WORLD="$work/world-$r" BRAID_PERF_NPROCS=2 \
        BRAID_PERF_PROC=$p timeout 120 "$bin" -b 64M -e 64M -n 10 -w 2 -c $chk \
        >"$work/braid-p2p-$r-$p.txt" 2>&1 &
      pids+=($!)
    done
    for p in 0 1; do wait "${pids[$p]}" || { ok=0; echo "FAIL: sendrecv_perf rank $p (repetition $r):"; tail -n 20 "$work/braid-p2p-$r-$p.txt"; }; done
    # Row: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
    braid=$(awk '$1==67108864 {print $8}' "$work/braid-p2p-$r-0.txt")
    local bip; bip=$(awk '$1==67108864 {print $12}' "$work/braid-p2p-$r-0.txt")
    printf '  rep %d: iperf3 %s Gbit/s one way, %s Gbit/s per direction (bidir); Braid sendrecv busbw %s GB/s out of place, %s in place\n' \
      "$r" "${uni:-?}" "${bid:-?}" "${braid:-?}" "${bip:-?}"
    [[ -n $uni ]] && echo "$uni" >>"$work/uni"
    [[ -n $bid ]] && echo "$bid" >>"$work/bidir"
    [[ -n $braid ]] && echo "$braid" >>"$work/braid"
    [[ -n $bip ]] && echo "$bip" >>"$work/braid_inplace"
  done
  # The socket net alone (no executor, no proxy copies), one way, REPS
  # repetitions of 64 MiB in one connection.
  local nb=$BUILD/bin/braid-netbw
  : >"$work/raw"
  if [[ -x $nb ]]; then
    ip netns exec "$NSB" env NCCL_SOCKET_IFNAME=bnv timeout 120 "$nb" recv "$work/netbw-handle" 64 "$REPS" \
      >"$work/netbw-recv.txt" 2>&1 &
    local nbr=$!
    ip netns exec "$NSA" env NCCL_SOCKET_IFNAME=bnv timeout 120 "$nb" send "$work/netbw-handle" 64 "$REPS" \
      >"$work/netbw-send.txt" 2>&1 || { ok=0; echo "FAIL: braid-netbw send:"; cat "$work/netbw-send.txt"; }
    wait "$nbr" || { ok=0; echo "FAIL: braid-netbw recv:"; cat "$work/netbw-recv.txt"; }
    awk '/^recv/ {print $(NF-1)}' "$work/netbw-recv.txt" >"$work/raw"
    echo "  socket net alone (braid-netbw, one way): $(tr '\n' ' ' <"$work/raw")Gbit/s"
  else
    echo "  (socket net alone skipped: $nb is not built)"
  fi
  if [[ $ok -eq 1 ]] && ! grep -q 'Out of bounds values : 0 OK' "$work/braid-p2p-1-0.txt"; then
    echo "FAIL: sendrecv_perf's values did not check out"; ok=0
  fi
  local mu mb mbr mbi
  mu=$(median <"$work/uni"); mb=$(median <"$work/bidir")
  mbr=$(median <"$work/braid"); mbi=$(median <"$work/braid_inplace")
  echo "  median of $REPS: iperf3 $mu Gbit/s one way ($(awk -v g="$mu" 'BEGIN{printf "%.3f", g/8}') GB/s), $mb Gbit/s per direction both ways ($(awk -v g="$mb" 'BEGIN{printf "%.3f", g/8}') GB/s)"
  echo "  median of $REPS: Braid sendrecv 64 MiB busbw $mbr GB/s per direction ($(awk -v b="$mbr" 'BEGIN{printf "%.2f", b*8}') Gbit/s) out of place, $mbi GB/s in place"
  [[ -s $work/raw ]] && echo "  median of $REPS: socket net alone $(median <"$work/raw") Gbit/s one way"
  echo "  Braid / iperf3: $(awk -v b="$mbr" -v g="$mu" 'BEGIN{printf "%.0f%%", 100*b*8/g}') of one way, $(awk -v b="$mbr" -v g="$mb" 'BEGIN{printf "%.0f%%", 100*b*8/g}') of both ways (target >= 80%)"
  ip netns del "$NSA"; ip netns del "$NSB"; ns_made=0
  return $((1 - ok))
}

part2() {
  echo
  echo "## 2. all-reduce, 4 ranks, every peer over the socket net, vs Open MPI over TCP"
  local bin=$BUILD/bin/all_reduce_perf mpibin=$work/mpi_allreduce
  if [[ ! -x $bin ]]; then echo "SKIP: $bin is not built (make tools)"; return 0; fi
  if ! command -v mpirun >/dev/null || ! command -v mpicc >/dev/null; then
    echo "SKIP: mpirun/mpicc are not installed (apt-get install -y openmpi-bin libopenmpi-dev)"; return 0
  fi
  if ! mpicc -O2 -std=c11 -D_GNU_SOURCE -o "$mpibin" tools/compare/mpi_allreduce.c 2>"$work/mpicc.txt"; then
    echo "FAIL: mpicc could not build tools/compare/mpi_allreduce.c:"; cat "$work/mpicc.txt"; return 1
  fi
  local root_flags=()
  [[ $(id -u) -eq 0 ]] && root_flags=(--allow-run-as-root)
  local r ok=1
  for ((r = 1; r <= REPS; r++)); do
    local chk=0; [[ $r -eq 1 ]] && chk=1
    # Two sweeps: many iterations while calls are short, few once they are long.
    { BRAID_DEVICE=host NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 300 \
        "$bin" -P 4 -b 8 -e 512K -f 2 -n 50 -w 5 -c $chk
      BRAID_DEVICE=host NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 timeout 300 \
        "$bin" -P 4 -b 1M -e 64M -f 2 -n 5 -w 1 -c $chk; } >"$work/braid-ar-$r.txt" 2>&1 || ok=0
    timeout 300 mpirun "${root_flags[@]}" --oversubscribe -np 4 --mca pml ob1 --mca btl tcp,self \
      "$mpibin" -b 8 -e 64M -f 2 -n 50 -w 5 -N 5 >"$work/mpi-ar-$r.txt" 2>&1 || ok=0
    echo "  rep $r done"
  done
  if [[ $(grep -c 'Out of bounds values : 0 OK' "$work/braid-ar-1.txt") -ne 2 ]] ||
     ! grep -q 'Out of bounds values : 0 OK' "$work/mpi-ar-1.txt"; then
    echo "FAIL: a run failed or its values did not check out:"; tail -n 20 "$work/braid-ar-1.txt" "$work/mpi-ar-1.txt"; ok=0
  fi
  printf '  %10s  %12s  %12s  %7s  %s\n' "bytes" "Braid (us)" "Open MPI (us)" "ratio" "target"
  local size=8
  while [[ $size -le $((64 << 20)) ]]; do
    local b m
    b=$(cat "$work"/braid-ar-*.txt | awk -v s=$size '$1==s && $3=="float" {print $6}' | median)
    m=$(cat "$work"/mpi-ar-*.txt | awk -v s=$size '$1==s && $3=="float" {print $6}' | median)
    local target="-" verdict=""
    if [[ $size -eq 8 ]]; then target="<= 1.5x"; verdict=$(awk -v b="$b" -v m="$m" 'BEGIN{print (b<=1.5*m)?"met":"missed"}')
    elif [[ $size -ge $((1 << 20)) ]]; then target="<= 1x"; verdict=$(awk -v b="$b" -v m="$m" 'BEGIN{print (b<=m)?"met":"missed"}'); fi
    printf '  %10d  %12s  %12s  %7s  %s %s\n' "$size" "$b" "$m" \
      "$(awk -v b="$b" -v m="$m" 'BEGIN{printf "%.2f", b/m}')" "$target" "$verdict"
    size=$((size * 2))
  done
  return $((1 - ok))
}

status=0
for p in $PARTS; do
  "part$p" || status=1
done
exit $status
