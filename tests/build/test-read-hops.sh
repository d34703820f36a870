#!/bin/sh
# test-read-hops.sh -- bench/read-hops.py: --help documents the hops; bad
# usage exits 2 naming what was wrong; a directory that is no kept cell
# exits 1 naming the missing log; a traced 256 MiB idle cell finds every
# pre-copy read the source server counted (its precopy_reads), and their
# serve hops hold the time the server counted inside them (precopy_read_ms).
# TAP output for prove; run from the top of the tree after `make all
# build/vgmig-bench` ($VGMIG_QEMU and $VGMIG_SERVER as make check sets).
set -u
tool=bench/read-hops.py
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgmig-hops-XXXXXX") || exit 1
cell=
trap 'rm -rf "$tmp" ${cell:+"$cell"}' EXIT
echo "1..6"

if "$tool" --help | grep -q "queue  the data plane could start it"; then
    echo "ok 1 - --help documents the hops"
else
    echo "not ok 1 - --help does not document the hops"
fi

"$tool" --slow 0 -- --sizes 256M >/dev/null 2>"$tmp/err"
if [ $? = 2 ] && grep -q -- "--slow: 0 is not a positive" "$tmp/err"; then
    echo "ok 2 - --slow 0: exit 2, named"
else
    echo "not ok 2 - --slow 0: $(cat "$tmp/err")"
fi

"$tool" >/dev/null 2>"$tmp/err"
if [ $? = 2 ] && grep -q -- "either --cell DIR or vgmig-bench's options" \
    "$tmp/err"; then
    echo "ok 3 - nothing to do: exit 2, named"
else
    echo "not ok 3 - nothing to do: $(cat "$tmp/err")"
fi

"$tool" --cell "$tmp" >/dev/null 2>"$tmp/err"
if [ $? = 1 ] && grep -q "$tmp/qemu-vgpu-src.log: no such file" "$tmp/err"; then
    echo "ok 4 - --cell of no cell: exit 1, the missing log named"
else
    echo "not ok 4 - --cell of no cell: $(cat "$tmp/err")"
fi

"$tool" -- --sizes 256M --big 256M --workloads idle --modes ours \
    --channels 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
cell=$(sed -n 's/^cell directory: //p' "$tmp/out")
reads=$(sed -n 's/^pre-copy reads: //p' "$tmp/out")
counted=$(sed -n 's/.*"precopy_reads": \([0-9]*\).*/\1/p' \
    "${cell:-/none}/vgpu-src-stats.json" 2>/dev/null)
if [ $rc = 0 ] && [ -n "$reads" ] && [ "$reads" -gt 0 ] &&
    [ "$reads" = "$counted" ]; then
    echo "ok 5 - every pre-copy read matched: $reads of $counted"
else
    echo "not ok 5 - rc $rc, $reads reads matched, the server counted '$counted'"
    sed 's/^/# /' "$tmp/out" "$tmp/err"
fi

serve=$(awk '$1 == "serve" { print $6 }' "$tmp/out")
read_ms=$(sed -n 's/.*"precopy_read_ms": \([0-9.]*\).*/\1/p' \
    "${cell:-/none}/vgpu-src-stats.json" 2>/dev/null)
if [ -n "$serve" ] && [ -n "$read_ms" ] &&
    awk -v s="$serve" -v r="$read_ms" 'BEGIN { exit !(r > 0 && s >= r - 0.1) }'; then
    echo "ok 6 - the reads' serve hops, $serve ms, hold the server's own $read_ms ms"
else
    echo "not ok 6 - serve '$serve' ms, the server's precopy_read_ms '$read_ms'"
fi
