#!/bin/sh
# test-thread-cpu.sh -- bench/thread-cpu.sh: bad usage exits 2 naming
# what was wrong, COMMAND's exit status comes back, and a thread that
# spins reads far busier than one that sleeps.  TAP output for prove; run
# from the top of the tree.
set -u
tool=bench/thread-cpu.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgmig-tcpu-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
echo "1..4"

"$tool" --top many -- true >/dev/null 2>"$tmp/err"
if [ $? = 2 ] && grep -q -- "--top: 'many' is not a number" "$tmp/err"; then
    echo "ok 1 - --top many: exit 2, named"
else
    echo "not ok 1 - --top many: $(cat "$tmp/err")"
fi

"$tool" >/dev/null 2>"$tmp/err"
if [ $? = 2 ] && grep -q "no COMMAND given" "$tmp/err"; then
    echo "ok 2 - no COMMAND: exit 2, named"
else
    echo "not ok 2 - no COMMAND: $(cat "$tmp/err")"
fi

"$tool" --pattern vgmig-none-such -- sh -c 'exit 7' >/dev/null
rc=$?
if [ $rc = 7 ]; then
    echo "ok 3 - COMMAND's exit status comes back"
else
    echo "not ok 3 - exit status $rc, not 7"
fi

# Two processes named by unique words: one spins for 1.5 s, one sleeps.
tag=vgmigtcpu$$
"$tool" --pattern "$tag" --interval 0.2 -- sh -c \
    "timeout 1.5 awk 'BEGIN { for (;;) x++ }' spin-$tag &
     sh -c 'sleep 1.5; :' idle-$tag; wait" >"$tmp/out"
spin=$(awk '/ awk .*spin-/ { print int($1); exit }' "$tmp/out")
idle=$(awk '/ sh -c sleep 1.5; : idle-/ { print int($1); exit }' "$tmp/out")
if [ -n "$spin" ] && [ -n "$idle" ] && [ "$spin" -ge $((idle + 20)) ] &&
    [ "$idle" -le 5 ]; then
    echo "ok 4 - spinning thread $spin %, sleeping $idle %"
else
    echo "not ok 4 - spinning '$spin' %, sleeping '$idle' %:"
    sed 's/^/# /' "$tmp/out"
fi
