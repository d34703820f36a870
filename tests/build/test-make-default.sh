#!/bin/sh
# test-make-default.sh -- `make` with no target builds everything: its
# default goal is `all`, not config.mak (the first rule of the Makefile).
# Dry runs (make -n) into an empty build directory; TAP output for prove.
# Run from the top of the tree.
set -u
out=$(mktemp -d "${TMPDIR:-/tmp}/vgmig-make-XXXXXX") || exit 1
trap 'rm -rf "$out"' EXIT
echo "1..3"
plan=$(make -n O="$out" 2>&1)
case $plan in
*"'config.mak' is up to date"*) echo "not ok 1 - make alone only checks config.mak" ;;
*) echo "ok 1 - make alone does more than check config.mak" ;;
esac
n=1
for prog in vgpu-server vgmig-demo; do
    n=$((n + 1))
    if printf '%s\n' "$plan" | grep -q -- "-o $out/$prog "; then
        echo "ok $n - make alone links $prog"
    else
        echo "not ok $n - make alone does not link $prog"
    fi
done
