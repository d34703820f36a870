#!/bin/bash
# thread-cpu.sh -- which thread of the servers and QEMUs is busy while a
# command runs (docs/data-path.md uses it to tell a saturated stage from
# a latency-bound pipeline).
usage() {
    cat <<'EOF'
Usage: bench/thread-cpu.sh [--pattern REGEX] [--interval S] [--top N]
                           -- COMMAND [ARG]...

Runs COMMAND and samples /proc every S seconds (default 0.5) for every
thread of the processes whose command line matches REGEX (default
'vgpu-server|qemu-system').  When COMMAND ends it prints, for the N
busiest threads (default 20), the CPU each used while it existed, in
percent of one core over the window from the first to the last sample
its process was seen in: total, user, system, the thread's name and
the first 60 characters of its process's command line.  A stage that
limits a pipeline shows near 100 %; a pipeline whose threads are all
well below it waits on round trips instead.

Exit status: COMMAND's, or 2 on bad usage.
EOF
}

pattern='vgpu-server|qemu-system'
interval=0.5
top=20
while [ $# -gt 0 ]; do
    case $1 in
    --pattern) pattern=$2; shift 2 ;;
    --interval) interval=$2; shift 2 ;;
    --top) top=$2; shift 2 ;;
    -h | --help) usage; exit 0 ;;
    --) shift; break ;;
    *) echo "thread-cpu.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
    esac
done
if [ $# -eq 0 ]; then
    echo "thread-cpu.sh: no COMMAND given" >&2
    usage >&2
    exit 2
fi
case $interval in
'' | *[!0-9.]*) echo "thread-cpu.sh: --interval: '$interval' is not a number" >&2; exit 2 ;;
esac
case $top in
'' | *[!0-9]*) echo "thread-cpu.sh: --top: '$top' is not a number" >&2; exit 2 ;;
esac

samples=$(mktemp)
trap 'rm -f "$samples"' EXIT
hz=$(getconf CLK_TCK)

# The pids whose command line matches $pattern, in one grep over
# /proc/*/cmdline (without pgrep: a bare GPU machine may lack procps;
# and not a process per pid: where forks are slow a scan would take
# longer than the interval).
procs() {
    local f
    grep -a -l -E -- "$pattern" /proc/[0-9]*/cmdline 2>/dev/null |
        while read -r f; do
            f=${f#/proc/}
            echo "${f%/cmdline}"
        done
}

# One line per thread: time pid tid utime stime name | cmdline.  Bash
# builtins read /proc, so that a sample costs two processes (date, grep).
sample() {
    local now p t stat comm cmd
    local -a args f
    now=$(date +%s.%N)
    for p in $(procs); do
        [ "$p" = "$$" ] && continue
        mapfile -d '' -t args 2>/dev/null <"/proc/$p/cmdline" || continue
        cmd="${args[*]}"
        cmd=${cmd:0:60}
        for t in /proc/"$p"/task/*; do
            read -r stat 2>/dev/null <"$t/stat" || continue
            read -r comm 2>/dev/null <"$t/comm" || continue
            # Fields after the ")" that closes the name: 12 utime, 13 stime.
            read -r -a f <<<"${stat##*) }"
            echo "$now $p ${t##*/} ${f[11]} ${f[12]} $comm | $cmd"
        done
    done >>"$samples"
}

"$@" &
child=$!
while kill -0 "$child" 2>/dev/null; do
    sample
    sleep "$interval"
done
wait "$child"
rc=$?

awk -v hz="$hz" -v top="$top" '
{
    split($0, half, " [|] ")
    n = split(half[1], f, " ")
    t = f[1]; pid = f[2]; tid = f[3]; u = f[4]; s = f[5]
    name = f[6]; for (i = 7; i <= n; i++) name = name " " f[i]
    if (!(pid in pfirst) || t < pfirst[pid]) pfirst[pid] = t
    if (!(pid in plast) || t > plast[pid]) plast[pid] = t
    k = pid "/" tid
    if (!(k in tfirst)) { tfirst[k] = t; u0[k] = u; s0[k] = s }
    u1[k] = u; s1[k] = s; tname[k] = name; tpid[k] = pid
    if (half[2] != "") cmd[k] = half[2]
}
END {
    for (k in tfirst) {
        p = tpid[k]; w = plast[p] - pfirst[p]
        if (w <= 0) continue
        # A thread born after its process was first seen started from 0.
        if (tfirst[k] > pfirst[p]) { u0[k] = 0; s0[k] = 0 }
        du = (u1[k] - u0[k]) / hz / w * 100
        ds = (s1[k] - s0[k]) / hz / w * 100
        printf "%6.1f %6.1f %6.1f  %-8s %-16s %s\n", du + ds, du, ds, k,
            tname[k], cmd[k]
    }
}' "$samples" | sort -rn | head -n "$top" |
    awk 'BEGIN { print "  cpu%  user%  sys%  pid/tid  thread           process" } { print }'
exit $rc
