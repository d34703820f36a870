#!/bin/sh
# test-bench-cli.sh -- vgmig-bench's --src-backend and --dst-backend:
# --help documents them; a name that is no backend, an empty list and more
# backends than vGPUs exit 2 naming the option and what is wrong (as do a
# --page-size out of range or not a power of two, and a --downtime-limit
# out of range); with --page-size 16K and --downtime-limit 120
# a cpu-writes cell verifies, which it can only where both servers track
# 16 KiB pages (the guest's writes are checked against the destination's
# VRAM checksum, a hash per page); and a
# VM's vGPUs take the list's entries in turn: with --src-backend
# cpu,cuda:999 the one-vGPU cell runs on the CPU backend and verifies,
# while the two-vGPU cell fails starting its second server (vgpu-src-1),
# which refuses that backend; the one-vGPU cell has both QEMUs' downtime
# checkpoints in results-multi.json, in order; --log-level debug reaches
# the servers (the kept cell's logs).  TAP output for prove; run
# from the top of the tree after `make all build/vgmig-bench`
# ($VGMIG_QEMU and $VGMIG_SERVER as make check sets them).
set -u
bench=${VGMIG_BENCH:-build/vgmig-bench}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgmig-bench-cli-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
echo "1..14"

if "$bench" --help | grep -q -- "--src-backend LIST, --dst-backend LIST"; then
    echo "ok 1 - --help documents --src-backend and --dst-backend"
else
    echo "not ok 1 - --help does not document the backend lists"
fi

n=1
# Option $1 with value $2 must exit 2 saying $3.
bad() {
    n=$((n + 1))
    "$bench" "$1" "$2" --out "$tmp/bad" >"$tmp/out" 2>&1
    rc=$?
    if [ "$rc" = 2 ] && grep -qF -- "$3" "$tmp/out"; then
        echo "ok $n - $1 '$2': exit 2, $3"
    else
        echo "not ok $n - $1 '$2': exit $rc:"
        sed 's/^/# /' "$tmp/out"
    fi
}
bad --src-backend cpu,gpu "--src-backend: 'gpu' is not cpu, cuda or cuda:N"
bad --dst-backend , "--dst-backend: no backend in ','"
bad --dst-backend cpu,cpu,cpu,cpu,cpu "--dst-backend: more than 4 backends"
bad --page-size 24K "--page-size: 24576 is not a power of two"
bad --page-size 1K "--page-size: '1K' is out of range"
bad --downtime-limit 0 "--downtime-limit: '0' is not 1 to 60000"
bad --downtime-limit 70000 "--downtime-limit: '70000' is not 1 to 60000"

timeout 300 "$bench" --sizes 256M --workloads idle --modes ours \
    --no-ram-anchor --multi-vgpu 256M --multi-rounds 1 \
    --src-backend cpu,cuda:999 --out "$tmp/run" >"$tmp/run.log" 2>&1
rc=$?
if [ "$rc" = 1 ] &&
    grep -q "start vgpu-src-1: vgpu-src-1 exited with status 1" "$tmp/run.log" &&
    grep -q "unknown VRAM backend 'cuda:999'" "$tmp/run.log"; then
    echo "ok 9 - the second vGPU's server took the second backend, and failed"
else
    echo "not ok 9 - exit $rc, second vGPU's failure not reported:"
    sed 's/^/# /' "$tmp/run.log"
fi
if grep -qE '^\| idle \| 256 MiB \| 1 \| [0-9]+ \| [0-9.]+ \|.*\| no \|$' \
    "$tmp/run.log" &&
    grep -qE '^\| idle \| 256 MiB \| 2 \|.*\| failed \|$' "$tmp/run.log"; then
    echo "ok 10 - the one-vGPU cell ran on the first backend and verified"
else
    echo "not ok 10 - cells not as expected:"
    grep '^| idle' "$tmp/run.log" | sed 's/^/# /'
fi
# Both QEMUs' downtime checkpoints in the one-vGPU cell: the destination's
# start comes after its load and before the source's end.
if python3 - "$tmp/run/results-multi.json" <<'P'; then
import json, sys
cell = [c for c in json.load(open(sys.argv[1])) if c["vgpus"] == 1][0]
p = cell["downtime_points_ms"]
order = ["src-downtime-start", "src-vm-stopped",
         "dst-precopy-loadvm-completed", "dst-precopy-bh-vm-started",
         "src-downtime-end"]
t = [p[k] for k in order]
sys.exit(0 if t[0] == 0 and all(0 <= a <= b for a, b in zip(t, t[1:]))
         and abs(t[-1] - cell["downtime_trace_ms"]) < 1e-3 else 1)
P
    echo "ok 11 - both QEMUs' downtime checkpoints, in order"
else
    echo "not ok 11 - downtime checkpoints missing or out of order:"
    grep -o '"downtime_points_ms": {[^}]*}' "$tmp/run/results-multi.json" |
        sed 's/^/# /'
fi

TMPDIR=$tmp timeout 300 "$bench" --sizes 256M --workloads cpu-writes \
    --modes ours --no-ram-anchor --page-size 16K --downtime-limit 120 \
    --log-level debug --keep --out "$tmp/page" --doc "$tmp/page.md" \
    >"$tmp/page.log" 2>&1
rc=$?
if [ "$rc" = 0 ] &&
    grep -q "two vgpu-servers (page size 16 KiB)" "$tmp/page.md" &&
    python3 -c 'import json, sys
cells = json.load(open(sys.argv[1]))
cells = cells["cells"] if isinstance(cells, dict) else cells
sys.exit(0 if cells and all(c["verified"] for c in cells) else 1)' \
        "$tmp/page/results.json"; then
    echo "ok 12 - --page-size 16K: the cpu-writes cell verified"
else
    echo "not ok 12 - --page-size 16K: exit $rc:"
    grep -E '^cpu-writes|page size|error' "$tmp/page.log" | sed 's/^/# /'
fi
# --downtime-limit reaches the report and each cell's record
if grep -q "downtime-limit 120 ms" "$tmp/page.md" &&
    python3 -c 'import json, sys
cells = json.load(open(sys.argv[1]))
cells = cells["cells"] if isinstance(cells, dict) else cells
sys.exit(0 if cells and all(c["downtime_limit_ms"] == 120 for c in cells)
         else 1)' "$tmp/page/results.json"; then
    echo "ok 13 - --downtime-limit 120: in the report and every cell"
else
    echo "not ok 13 - --downtime-limit 120 not in the report or the cells"
fi
# --log-level reaches the servers: the kept cell's logs have debug lines
kept=$(sed -n 's/^vgmig-bench: .*: logs kept in //p' "$tmp/page.log" | head -1)
if [ -n "$kept" ] && grep -q 'debug: migration: arc' "$kept/vgpu-src.log" &&
    grep -q 'debug: migration: arc' "$kept/vgpu-dst.log"; then
    echo "ok 14 - --log-level debug: both servers logged at debug"
else
    echo "not ok 14 - no debug lines in the kept servers' logs ('$kept')"
fi
