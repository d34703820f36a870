#!/bin/sh
# test-server-cli.sh -- vgpu-server's command line: --help documents
# --migration-threads, bad values exit 2 naming the option and the range,
# and a good value reaches the server (its start-up log line says how
# many migration threads it runs); --prealloc backs all of VRAM with
# memory (the server's RssShmem), which a server without it does not;
# --stream-version is documented and bad values exit 2 naming the range
# (a good one is migrated with by /mig/basic/stream-v1); so do bad
# --data-slots values (2 is used by /mig/multifd/two-data-slots); without
# --migration-threads the server runs a quarter of its CPUs' worth, 2 to 4;
# a temporary statistics file that a killed server left (<file>.tmp.XXXXXX)
# is removed when the next server starts, and other names are kept.
# TAP output for
# prove; run from the top of the tree after `make all` ($VGMIG_SERVER, as
# make check sets it, or build/vgpu-server).
set -u
srv=${VGMIG_SERVER:-build/vgpu-server}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgmig-cli-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
echo "1..20"

if "$srv" --help | grep -q -- "--migration-threads N"; then
    echo "ok 1 - --help documents --migration-threads"
else
    echo "not ok 1 - --help does not document --migration-threads"
fi

# Tests $n+1.. : option $1 with each bad value that follows $2 (the text
# after "'VALUE' ") must exit 2 with that message.
bad_values() {
    opt=$1 what=$2
    shift 2
    for bad in "$@"; do
        n=$((n + 1))
        "$srv" --socket "$tmp/s" --vram 1M "$opt" "$bad" >"$tmp/out" 2>&1
        rc=$?
        if [ "$rc" = 2 ] && grep -q -- "$opt: '$bad' $what" "$tmp/out"; then
            echo "ok $n - $opt $bad: exit 2, names the range"
        else
            echo "not ok $n - $opt $bad: exit $rc:"
            sed 's/^/# /' "$tmp/out"
        fi
    done
}

n=1
bad_values --migration-threads "is not a number from 1 to 64" 0 65 4x

# Wait up to $3 tenths of a second for $2 in the log file $1.
wait_log() {
    i=0
    while [ "$i" -lt "$3" ] && ! grep -q "$2" "$1"; do
        sleep 0.1
        i=$((i + 1))
    done
}

# A good value: the server starts, says so, and stops on SIGTERM.
"$srv" --socket "$tmp/s" --vram 1M --migration-threads 3 >"$tmp/log" 2>&1 &
pid=$!
wait_log "$tmp/log" "listening on" 50
kill "$pid" 2>/dev/null
wait "$pid"
rc=$?
if grep -q "listening on $tmp/s (VRAM 1 MiB, page 64 KiB, 3 migration threads)" \
    "$tmp/log"; then
    echo "ok 5 - --migration-threads 3 reaches the server"
else
    echo "not ok 5 - --migration-threads 3: no such start-up line:"
    sed 's/^/# /' "$tmp/log"
fi
if [ "$rc" = 0 ]; then
    echo "ok 6 - the server exits 0 on SIGTERM"
else
    echo "not ok 6 - the server exited $rc on SIGTERM"
fi

if "$srv" --help | grep -q -- "--prealloc"; then
    echo "ok 7 - --help documents --prealloc"
else
    echo "not ok 7 - --help does not document --prealloc"
fi

# RssShmem (kB) of a 64 MiB server started with $1 (or nothing), once it
# has logged $2 (or only that it listens).
shmem_kb() {
    "$srv" --socket "$tmp/p" --vram 64M $1 >"$tmp/plog" 2>&1 &
    pid=$!
    wait_log "$tmp/plog" "${2:-listening on}" 100
    awk '/^RssShmem:/ {print $2}' "/proc/$pid/status"
    kill "$pid" 2>/dev/null
    wait "$pid"
}
with=$(shmem_kb --prealloc "VRAM preallocated: 64 MiB")
if [ "${with:-0}" -ge 65536 ]; then
    echo "ok 8 - --prealloc: 64 MiB of VRAM resident ($with kB)"
else
    echo "not ok 8 - --prealloc: ${with:-?} kB of VRAM resident, want 65536:"
    sed 's/^/# /' "$tmp/plog"
fi
without=$(shmem_kb "")
if [ "${without:-65536}" -lt 65536 ]; then
    echo "ok 9 - without --prealloc: VRAM not resident ($without kB)"
else
    echo "not ok 9 - without --prealloc: ${without:-?} kB resident"
fi

if "$srv" --help | grep -q -- "--stream-version N"; then
    echo "ok 10 - --help documents --stream-version"
else
    echo "not ok 10 - --help does not document --stream-version"
fi
n=10
bad_values --stream-version "is not a version from 1 to 6" 0 7 6x
bad_values --data-slots "is not a number from 2 to 64" 1 65 8x

# Without --migration-threads: a quarter of the CPUs the server may run
# on, 2 to 4 ($1: nothing, or a taskset prefix limiting it to CPU 0).
default_threads() {
    $1 "$srv" --socket "$tmp/d" --vram 1M >"$tmp/dlog" 2>&1 &
    pid=$!
    wait_log "$tmp/dlog" "listening on" 50
    kill "$pid" 2>/dev/null
    wait "$pid"
    sed -n 's/.*page 64 KiB, \([0-9]*\) migration threads.*/\1/p' "$tmp/dlog"
}
cpus=$(nproc)
want=$((cpus / 4 < 2 ? 2 : cpus / 4 > 4 ? 4 : cpus / 4))
got=$(default_threads "")
if [ "$got" = "$want" ]; then
    echo "ok 17 - default: $got migration threads on $cpus CPUs"
else
    echo "not ok 17 - default: ${got:-no} migration threads on $cpus CPUs, want $want:"
    sed 's/^/# /' "$tmp/dlog"
fi
got=$(default_threads "taskset -c 0")
if [ "$got" = 2 ]; then
    echo "ok 18 - default under taskset -c 0 (the affinity counts): 2 migration threads"
else
    echo "not ok 18 - default on one CPU: ${got:-no} migration threads, want 2:"
    sed 's/^/# /' "$tmp/dlog"
fi

# A server killed between creating its statistics' temporary file and
# renaming it leaves <file>.tmp.XXXXXX behind: the next one removes it.
echo stale >"$tmp/st.json.tmp.Ab3xY9"
echo mine >"$tmp/st.json.tmp.keep-me"
"$srv" --socket "$tmp/t" --vram 1M --stats-file "$tmp/st.json" >"$tmp/tlog" 2>&1 &
pid=$!
wait_log "$tmp/tlog" "listening on" 50
kill "$pid" 2>/dev/null
wait "$pid"
if [ ! -e "$tmp/st.json.tmp.Ab3xY9" ] && [ -s "$tmp/st.json" ] &&
    grep -q "removed 1 temporary file left by a server that was killed" "$tmp/tlog"; then
    echo "ok 19 - a killed server's temporary statistics file is removed, and said"
else
    echo "not ok 19 - stale temporary statistics file:"
    ls "$tmp" | sed 's/^/# /'
    sed 's/^/# /' "$tmp/tlog"
fi
if [ "$(cat "$tmp/st.json.tmp.keep-me" 2>/dev/null)" = mine ]; then
    echo "ok 20 - a file of another name beside it is kept"
else
    echo "not ok 20 - $tmp/st.json.tmp.keep-me was touched"
fi
