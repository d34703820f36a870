#!/bin/sh
# campaign.sh SECONDS WORKERS -- one leg of a fuzzing campaign on another
# machine: every target for SECONDS with WORKERS forked jobs, continuing
# from corpus/TARGET (new inputs added there); results in $OUT.
D=$(cd "$(dirname "$0")" && pwd)
export LD_LIBRARY_PATH=$D/lib
secs=$1 workers=$2
for t in cmd sock stream vfu; do
    case $t in cmd) ml=4096 ;; *) ml=65536 ;; esac
    (cd "$D" && ./bin/fuzz-$t -fork="$workers" -max_total_time="$secs" \
        -timeout=25 -rss_limit_mb=4096 -max_len=$ml -print_final_stats=1 \
        -artifact_prefix="$OUT/$t-" corpus/$t > "$OUT/fuzz-$t.log" 2>&1;
     echo "$t exit $?" > "$OUT/$t.rc") &
done
wait
cat "$OUT"/*.rc
tar -C "$D" -czf "$OUT/corpus.tgz" corpus
