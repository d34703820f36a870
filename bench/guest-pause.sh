#!/bin/bash
# guest-pause.sh -- the pause a real guest feels at a switchover, against
# a VM without a vGPU (make bench's real-guest cell).
#
# Runs tests/guest/test-guest-migrate's "all" case (every vGPU engine and
# guest CPU stores to VRAM) and its "no-vgpu" baseline (the same guest and
# QEMU without a vGPU) with --hops migrations each, and prints per case the
# p50/p95 of felt - QEMU downtime and of its parts, then the difference of
# the two p95s: what the vGPU VM, its workload included, feels beyond
# QEMU's downtime more than a VM without one.
# Needs the environment of make check (VGMIG_QEMU, VGMIG_SERVER,
# VGMIG_FIRMWARE, VGMIG_GUEST_DIR).
set -euo pipefail

usage() {
    cat <<USAGE
usage: bench/guest-pause.sh --test PROG [--hops N] [--log FILE]

  --test PROG   the test-guest-migrate program (build/tests/guest/...)
  --hops N      migrations per case, 1 to 1000 [20]
  --log FILE    the test program's whole output [/dev/null]
  -h, --help    show this text

Prints one line per case and a summary line; exit status 1 if a case
failed (its output is in --log).
USAGE
}

prog= hops=20 log=/dev/null
while [ $# -gt 0 ]; do
    case $1 in
    --test) prog=${2:?--test needs a value}; shift 2 ;;
    --hops) hops=${2:?--hops needs a value}; shift 2 ;;
    --log) log=${2:?--log needs a value}; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "guest-pause.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
[ -x "$prog" ] || { echo "guest-pause.sh: --test '$prog' is not a program" >&2; exit 2; }
case $hops in ''|*[!0-9]*) echo "guest-pause.sh: --hops '$hops' is not a number" >&2; exit 2 ;; esac

: > "$log"
# p95 of felt - QEMU downtime of case $1 from its "over N hops" line.
run_case() {
    local out
    out=$(VGMIG_GUEST_HOPS=$hops "$prog" -p "/guest/migrate/$1" 2>&1) || {
        printf '%s\n' "$out" >> "$log"
        echo "guest-pause.sh: case $1 failed (see $log)" >&2
        return 1
    }
    printf '%s\n' "$out" >> "$log"
    printf '%s\n' "$out" | grep " over $hops hops: " | sed 's/^# //'
}

echo "real-guest pause at switchover (TCG, $hops hops per case, pulses every 5 ms):"
vgpu=$(run_case all)
base=$(run_case no-vgpu)
echo "  $vgpu"
echo "  $base"
p95() { sed -n 's/.*felt - QEMU downtime p50 [0-9.-]* \/ p95 \([0-9.-]*\) ms.*/\1/p' <<<"$1"; }
awk -v a="$(p95 "$vgpu")" -v b="$(p95 "$base")" 'BEGIN {
    printf "  felt - QEMU downtime, p95: %.1f ms with the vGPU and its workload, %.1f ms without a vGPU (pulses only): %+.1f ms, %.2fx (target: <= 20 ms with the vGPU)\n", a, b, a - b, (b > 0 ? a / b : 0) }'
