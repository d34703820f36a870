#!/usr/bin/env bash
# check-qemu.sh -- run QEMU's own qtests (the subset in tests/qemu/subset)
# on the patched QEMU and tell our failures from upstream's by running a
# failing test again on the patched QEMU and on the unpatched pinned one.
# TAP on stdout, one line per subset entry; logs under --out.
set -uo pipefail

usage() {
    cat <<'EOF'
Usage: tests/qemu/check-qemu.sh --bin DIR --rom-path PATH [OPTION]...

Run the QEMU qtests listed in the subset file against the patched QEMU in
DIR (DIR/qemu-system-x86_64 and the qtest programs in DIR/tests/) and print
TAP: one line per subset entry, with its time and its log.

A failing entry is run again on the patched QEMU and once on the unpatched
pinned QEMU (the baseline), and is reported as
  not ok ... # TODO flaky       it passed when run again on the patched QEMU;
  not ok ... # TODO upstream    it fails on the unpatched QEMU as well;
  not ok ... (ours)             it fails again and passes unpatched;
  not ok ... (every subtest skipped)  it tests nothing on this machine.
The last two, and a failure with no baseline, make the exit status 1.

Options:
  --bin DIR            the patched build: DIR/qemu-system-x86_64, DIR/tests/
  --baseline-dir DIR   the unpatched build, same layout (see --build-baseline)
  --build-baseline CMD shell command that builds --baseline-dir when a
                       failure needs it and it is missing
                       (make check-qemu: ./configure --qemu-baseline)
  --baseline WHEN      auto (on failures, the default), always (every entry
                       on both builds, with a comparison table) or never
  --rom-path PATH      colon-separated firmware directories (QEMU's -L):
                       Debian's QEMU source carries no ROM blobs
  --scripts DIR        QEMU's scripts/ folder, for the analyze-script test
                       (it runs scripts/analyze-migration.py)
  --subset FILE        the entries [default: tests/qemu/subset]
  --only REGEX         run only the entries that match REGEX (grep -E)
  --timeout SEC        limit for one entry [default: 600]
  --out DIR            logs and the QEMU wrappers [default: build/check-qemu]
  --list               print the entries (with --bin) and exit
  -h, --help           show this text and exit

The subset file has one entry per line: a qtest program and its arguments,
exactly as one would run it by hand with QTEST_QEMU_BINARY set, or
"each: PROGRAM ARGS" for every test that PROGRAM ARGS -l lists, each run
alone (-p PATH -x PATH/), or "skip: PATH REASON" to report the test PATH
of an "each:" line as skipped (TAP "# SKIP REASON") instead of running it;
'#' starts a comment.
EOF
}

die() { printf 'check-qemu: %s\n' "$*" >&2; exit 2; }

bin= baseline_dir= build_baseline_cmd= baseline=auto rom_path= scripts=
subset=tests/qemu/subset only= timeout=600 out=build/check-qemu list=no
while [ $# -gt 0 ]; do
    case $1 in
    --bin | --baseline-dir | --build-baseline | --baseline | --rom-path | \
        --scripts | --subset | --only | --timeout | --out)
        [ $# -ge 2 ] || die "$1 needs a value (see --help)"
        case $1 in
        --bin) bin=$2 ;;
        --baseline-dir) baseline_dir=$2 ;;
        --build-baseline) build_baseline_cmd=$2 ;;
        --baseline) baseline=$2 ;;
        --rom-path) rom_path=$2 ;;
        --scripts) scripts=$2 ;;
        --subset) subset=$2 ;;
        --only) only=$2 ;;
        --timeout) timeout=$2 ;;
        --out) out=$2 ;;
        esac
        shift ;;
    --list) list=yes ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done

case $baseline in auto | always | never) ;; *) die "--baseline must be auto, always or never, not '$baseline'" ;; esac
case $timeout in '' | *[!0-9]*) die "--timeout must be a number of seconds, not '$timeout'" ;; esac
[ -r "$subset" ] || die "cannot read the subset file '$subset'"

mapfile -t all < <(sed -e 's/#.*//' -e 's/[[:space:]]*$//' -e '/^[[:space:]]*$/d' "$subset")
# "skip: PATH REASON" lines: the test PATH (of an "each:" line) is reported
# as skipped, with REASON, instead of being run.
declare -A skip_reason
lines=()
for l in "${all[@]}"; do
    case $l in
    skip:\ *\ *) l=${l#skip: } && skip_reason[${l%% *}]=${l#* } ;;
    skip:*) die "'$l': a skip line needs a test path and a reason" ;;
    *) lines+=("$l") ;;
    esac
done
[ ${#lines[@]} -gt 0 ] || die "no entries in '$subset'"
[ -n "$bin" ] || die "--bin is required (see --help)"
[ -n "$rom_path" ] || die "--rom-path is required (see --help)"
[ $list = yes ] || [ "$baseline" = never ] || [ -n "$baseline_dir" ] ||
    die "--baseline $baseline needs --baseline-dir"
[ -z "$scripts" ] || [ -r "$scripts/analyze-migration.py" ] ||
    die "--scripts: '$scripts' has no analyze-migration.py"

# complete DIR: DIR holds QEMU and every program the subset runs.
complete() {
    local l
    [ -x "$1/qemu-system-x86_64" ] || return 1
    for l in "${lines[@]}"; do
        l=${l#each: }
        [ -x "$1/tests/${l%% *}" ] || return 1
    done
}
complete "$bin" || die "'$bin' lacks qemu-system-x86_64 or a qtest program of the subset; run ./configure"
bin=$(cd "$bin" && pwd)

mkdir -p "$out/run" || die "cannot create '$out'"
out=$(cd "$out" && pwd)
# analyze-script runs scripts/analyze-migration.py from the working directory.
[ -z "$scripts" ] || ln -sfn "$(cd "$scripts" && pwd)" "$out/run/scripts"

# QEMU's qtests take the binary from QTEST_QEMU_BINARY, whose name must end
# in -system-<arch>; a wrapper of that name adds the firmware directories.
make_wrapper() { # DIR VARIANT
    local w=$out/$2/qemu-system-x86_64 l= d
    IFS=: read -r -a dirs <<<"$rom_path"
    for d in "${dirs[@]}"; do l="$l -L '$d'"; done
    mkdir -p "$out/$2/logs"
    printf '#!/bin/sh\nexec %s%s "$@"\n' "'$(cd "$1" && pwd)/qemu-system-x86_64'" "$l" >"$w"
    chmod +x "$w"
}

# run_entry DIR VARIANT INDEX ENTRY: 0 when every subtest passed or was
# skipped and at least one passed, 3 when every one was skipped, else 1;
# the log is $out/VARIANT/logs/INDEX.log.
run_entry() {
    local dir=$1 variant=$2 i=$3 entry=$4 log prog args rc
    log=$out/$variant/logs/$i.log
    prog=${entry%% *}
    args=${entry#"$prog"}
    # shellcheck disable=SC2086 # the entry's arguments are words
    (cd "$out/run" && QTEST_QEMU_BINARY=$out/$variant/qemu-system-x86_64 \
        PYTHON=/usr/bin/python3 timeout -k 10 "$timeout" \
        "$(cd "$dir" && pwd)/tests/$prog" --tap -k $args) >"$log" 2>&1
    rc=$?
    echo "# exit status $rc" >>"$log"
    [ $rc -eq 0 ] && ! grep -q '^not ok' "$log" || return 1
    # One program, not "grep | grep -q": under pipefail the first grep can
    # die of SIGPIPE when the second exits early, which read as "skipped".
    awk '/^ok / && !/# SKIP/ { found = 1 } END { exit !found }' "$log" || return 3
}

sub_counts() { # LOG: "P passed, S skipped, F failed" of the qtest's own TAP
    printf '%s passed, %s skipped, %s failed' \
        "$(grep '^ok ' "$1" | grep -vc '# SKIP')" "$(grep -c '^ok .*# SKIP' "$1")" \
        "$(grep -c '^not ok' "$1")"
}

# have_baseline: the unpatched build is there (built now if need be) and
# its wrapper made.
have_baseline() {
    [ -x "$out/pristine/qemu-system-x86_64" ] && return 0
    if ! complete "$baseline_dir"; then
        [ -n "$build_baseline_cmd" ] || return 1
        echo "# building the unpatched QEMU: $build_baseline_cmd"
        sh -c "$build_baseline_cmd" >"$out/baseline-build.log" 2>&1 ||
            { echo "# building the baseline failed (log: $out/baseline-build.log)"; return 1; }
        complete "$baseline_dir" || return 1
    fi
    make_wrapper "$baseline_dir" pristine
}

# judge I ENTRY: run it, and a failure again and on the baseline; prints
# the TAP line and counts the outcome.
judge() {
    local i=$1 entry=$2 t0=$SECONDS log=$out/patched/logs/$1.log rc
    run_entry "$bin" patched "$i" "$entry"
    rc=$?
    if [ $rc -eq 0 ]; then
        echo "ok $i - $entry ($((SECONDS - t0)) s; $(sub_counts "$log"))"
        passed=$((passed + 1))
        return 0
    fi
    if [ $rc -eq 3 ]; then
        echo "not ok $i - $entry (every subtest skipped, so it tests nothing here; log: $log)"
        skipped=$((skipped + 1))
        return 1
    fi
    cp "$log" "$out/patched/logs/$i.first.log"
    if run_entry "$bin" patched "$i" "$entry"; then
        echo "not ok $i - $entry # TODO flaky: failed, then passed when run again (log: $out/patched/logs/$i.first.log)"
        flaky=$((flaky + 1))
    elif [ "$baseline" != never ] && have_baseline; then
        if run_entry "$baseline_dir" pristine "$i" "$entry"; then
            echo "not ok $i - $entry (ours: it passes on the unpatched QEMU; log: $log)"
            ours=$((ours + 1))
        else
            echo "not ok $i - $entry # TODO upstream: it fails on the unpatched QEMU too (log: $out/pristine/logs/$i.log)"
            upstream=$((upstream + 1))
        fi
    else
        echo "not ok $i - $entry (no baseline to compare with; log: $log)"
        unknown=$((unknown + 1))
    fi
    return 1
}

# compare I ENTRY RESULT: with --baseline always, the entry on the baseline.
compare() {
    local i=$1 entry=$2 base=fail
    have_baseline || { echo "# no baseline to compare with"; return; }
    [ -f "$out/pristine/logs/$i.log" ] || run_entry "$baseline_dir" pristine "$i" "$entry"
    grep -q '^# exit status 0$' "$out/pristine/logs/$i.log" &&
        ! grep -q '^not ok' "$out/pristine/logs/$i.log" && base=pass
    table[i]="| ${entries[i - 1]} | $3 | $base |"
    echo "#   unpatched: $base ($(sub_counts "$out/pristine/logs/$i.log"))"
}

# expand LINE: the entries of one subset line.  "each: PROG ARGS" is every
# test PROG ARGS lists (-l), each run alone: -p PATH -x PATH/ (no children).
expand() {
    local l=${1#each: } path prog
    if [ "$l" = "$1" ]; then
        printf '%s\n' "$l"
        return
    fi
    prog=${l%% *}
    # shellcheck disable=SC2086 # the arguments are words
    (cd "$out/run" && QTEST_QEMU_BINARY=$out/patched/qemu-system-x86_64 \
        "$bin/tests/$prog" ${l#"$prog"} -l) 2>/dev/null | grep '^/' |
        while read -r path; do printf '%s -p %s -x %s/\n' "$l" "$path" "$path"; done
}

rm -rf "$out/patched" "$out/pristine"
make_wrapper "$bin" patched
entries=()
for l in "${lines[@]}"; do
    mapfile -t -O ${#entries[@]} entries < <(expand "$l")
done
if [ -n "$only" ]; then
    mapfile -t entries < <(printf '%s\n' "${entries[@]}" | grep -E -- "$only")
fi
[ ${#entries[@]} -gt 0 ] || die "no entries in '$subset'${only:+ match '$only'}"
if [ $list = yes ]; then
    printf '%s\n' "${entries[@]}"
    exit 0
fi
# subset_skip ENTRY: the reason the subset gives to skip ENTRY's test, if any.
subset_skip() {
    local path
    [[ $1 == *" -p "* ]] || return 1
    path=${1##* -p }
    path=${path%% *}
    [ -n "${skip_reason[$path]+set}" ] || return 1
    printf '%s\n' "${skip_reason[$path]}"
}

n=${#entries[@]} passed=0 ours=0 upstream=0 flaky=0 skipped=0 unknown=0 start=$SECONDS
excluded=0
declare -a table
echo "1..$n"
echo "# patched QEMU: $bin; subset: $subset"
for ((i = 1; i <= n; i++)); do
    if reason=$(subset_skip "${entries[i - 1]}"); then
        echo "ok $i - ${entries[i - 1]} # SKIP $reason (tests/qemu/subset)"
        excluded=$((excluded + 1))
        continue
    fi
    if judge "$i" "${entries[i - 1]}"; then result=pass; else result=fail; fi
    [ "$baseline" = always ] && compare "$i" "${entries[i - 1]}" $result
done
if [ "$baseline" = always ]; then
    echo "# | entry | patched | unpatched |"
    for ((i = 1; i <= n; i++)); do echo "# ${table[i]:-| ${entries[i - 1]} | ? | ? |}"; done
fi
echo "# check-qemu: $n entries: $passed passed, $ours failed (ours), $upstream failed (upstream), $flaky flaky, $skipped skipped, $excluded skipped by the subset, $unknown failed (not compared); $((SECONDS - start)) s"
[ $((ours + skipped + unknown)) -eq 0 ]
