#!/bin/sh
# run-fuzz.sh DIR SECONDS TARGET... -- run the libFuzzer binaries
# DIR/fuzz-TARGET for SECONDS each (`make fuzz`, docs/fuzzing.md).
#
# Each target starts from the checked-in seeds tests/fuzz/corpus/TARGET
# (read only) and the inputs of earlier runs in DIR/corpus-TARGET, where
# new inputs go.  A crash is saved as DIR/TARGET-crash-<sha1>; replay it
# with build/tests/fuzz/replay-TARGET FILE.  Prints, and writes to
# DIR/summary.txt, the executions per target; exits 1 if any crashed.
set -u
if [ $# -lt 3 ]; then
    echo "usage: $0 DIR SECONDS TARGET..." >&2
    exit 2
fi
dir=$1
secs=$2
shift 2
summary=$dir/summary.txt
: >"$summary"
status=0
for t in "$@"; do
    case $t in
    cmd) max_len=4096 ;;
    *) max_len=65536 ;;
    esac
    work=$dir/corpus-$t
    log=$dir/fuzz-$t.log
    mkdir -p "$work"
    echo "fuzz-$t: $secs s (log $log)"
    "$dir/fuzz-$t" -max_total_time="$secs" -timeout=25 -rss_limit_mb=4096 \
        -max_len="$max_len" -print_final_stats=1 \
        -artifact_prefix="$dir/$t-" "$work" "tests/fuzz/corpus/$t" \
        >"$log" 2>&1
    rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
    if [ -z "$execs" ]; then # no final stats after a crash: last status line
        execs=$(grep -o '^#[0-9]*' "$log" | tail -n 1 | tr -d '#')
    fi
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -n 1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 | cut -d' ' -f2)
    if [ $rc -eq 0 ]; then
        result=ok
    else
        status=1
        crash=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
        result="CRASH (exit $rc) ${crash:-see $log}"
    fi
    printf '%-7s %10s executions (%s/s), %s coverage points, corpus %s files: %s\n' \
        "$t" "${execs:-?}" "${rate:-?}" "${cov:-?}" \
        "$(ls "$work" | wc -l)" "$result" | tee -a "$summary"
done
exit $status
