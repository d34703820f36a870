#!/bin/sh
# test-check-qemu.sh -- tests/qemu/check-qemu.sh tells a failure of ours from
# upstream's and from a flaky one.  A unit test of the runner alone: the
# "QEMU builds" here are two directories of stand-in qtest programs whose
# result depends on which build runs them (the real runs: make check-qemu).
# TAP output for prove; run from the top of the tree.
set -u
tmp=$(mktemp -d "${TMPDIR:-/tmp}/vgmig-cq-XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# fake_build DIR VARIANT: DIR/qemu-system-x86_64 prints VARIANT; each
# stand-in qtest asks it which build it runs on and answers in glib's TAP.
fake_build() {
    mkdir -p "$1/tests"
    printf '#!/bin/sh\necho %s\n' "$2" >"$1/qemu-system-x86_64"
    # pass: always; ours: fails on patched; upstream: fails on both;
    # flaky: fails on its first run only; skips: every subtest skipped;
    # chatty: passes, then logs far more than a pipe holds (as
    # device-introspect-test does).
    for t in pass ours upstream flaky skips chatty; do
        cat >"$1/tests/$t" <<EOF
#!/bin/sh
v=\$("\$QTEST_QEMU_BINARY") || { echo "not ok 1 no QEMU at \$QTEST_QEMU_BINARY"; exit 1; }
case $t-\$v in
pass-*) echo "ok 1 /x86/$t" ;;
ours-patched | upstream-*) echo "not ok 1 /x86/$t"; exit 1 ;;
ours-*) echo "ok 1 /x86/$t" ;;
flaky-*) if [ -e "$tmp/flaked" ]; then echo "ok 1 /x86/$t"; else
    touch "$tmp/flaked"; echo "not ok 1 /x86/$t"; exit 1; fi ;;
skips-*) echo "ok 1 /x86/$t # SKIP no accelerator" ;;
chatty-*) echo "ok 1 /x86/$t"; seq -f '# property %g of a device' 1 50000 ;;
esac
echo "1..1"
EOF
    done
    # multi: lists two tests with -l and passes whichever it runs.
    cat >"$1/tests/multi" <<'EOF'
#!/bin/sh
[ "${1:-}" = -l ] && { echo /x86/a; echo /x86/b; exit 0; }
echo "ok 1 $2"
echo "1..1"
EOF
    chmod +x "$1/qemu-system-x86_64" "$1"/tests/*
}
fake_build "$tmp/patched" patched
fake_build "$tmp/pristine" pristine
printf 'pass -p /x86/pass\nours\n# a comment\nupstream\nflaky\nskips\n' >"$tmp/subset"

cq() {
    bash tests/qemu/check-qemu.sh --bin "$tmp/patched" --rom-path /nonexistent \
        --subset "$tmp/subset" --out "$tmp/out" "$@" >"$tmp/tap" 2>"$tmp/err"
}

n=0
# status DESCRIPTION COMMAND...: ok if COMMAND succeeds (it tests $rc, the
# runner's exit status); else the status and the runner's stderr.
status() {
    n=$((n + 1))
    d=$1
    shift
    if "$@"; then echo "ok $n - $d"; else
        echo "not ok $n - $d (exit status $rc)"; sed 's/^/# /' "$tmp/err"; fi
}

check() { # DESCRIPTION PATTERN: one line of the runner's TAP matches PATTERN
    n=$((n + 1))
    if grep -q -- "$2" "$tmp/tap"; then echo "ok $n - $1"; else
        echo "not ok $n - $1"; sed 's/^/# /' "$tmp/tap" "$tmp/err"; fi
}

echo "1..16"
cq --baseline-dir "$tmp/pristine"
rc=$?
check "a passing entry is ok, with its arguments and subtest counts" \
    '^ok 1 - pass -p /x86/pass (.*1 passed, 0 skipped, 0 failed)'
check "a failure that passes unpatched is ours" '^not ok 2 - ours (ours: '
check "a failure on both builds is upstream's (TODO)" '^not ok 3 - upstream # TODO upstream'
check "a failure that passes when run again is flaky (TODO)" '^not ok 4 - flaky # TODO flaky'
check "an entry whose subtests all skip is not a pass" '^not ok 5 - skips (every subtest skipped'
check "the summary counts each kind" \
    '^# check-qemu: 5 entries: 1 passed, 1 failed (ours), 1 failed (upstream), 1 flaky, 1 skipped, 0 skipped by the subset, 0 failed (not compared)'
status "a failure of ours makes the exit status non-zero" [ $rc -ne 0 ]

rm -f "$tmp/flaked"
printf 'pass\nupstream\n' >"$tmp/subset"
cq --baseline-dir "$tmp/pristine"
rc=$?
status "upstream failures alone leave the exit status 0" [ $rc -eq 0 ]

printf 'pass\nours\n' >"$tmp/subset"
cq --baseline-dir "$tmp/missing" --build-baseline "cp -r '$tmp/pristine' '$tmp/missing'"
check "a missing baseline is built with --build-baseline when a failure needs it" \
    '^not ok 2 - ours (ours: '

cq --baseline always --baseline-dir "$tmp/pristine"
check "--baseline always prints the comparison table" '^# | pass | pass | pass |'

printf 'each: multi\nskip: /x86/b needs a working KVM guest\n' >"$tmp/subset"
cq --baseline-dir "$tmp/pristine"
rc=$?
check "an each: line runs every test it lists" '^ok 1 - multi -p /x86/a -x /x86/a/ ('
check "a skip: line reports its test skipped, with the reason" \
    '^ok 2 - multi -p /x86/b -x /x86/b/ # SKIP needs a working KVM guest (tests/qemu/subset)'
status "a test skipped by the subset leaves the exit status 0" [ $rc -eq 0 ]

printf 'each: multi\nskip: /x86/b\n' >"$tmp/subset"
cq --baseline-dir "$tmp/pristine"
rc=$?
status "a skip: line without a reason is refused (exit 2)" [ $rc -eq 2 ]
status "... with a message that says why" \
    grep -q "a skip line needs a test path and a reason" "$tmp/err"

printf 'chatty\n' >"$tmp/subset"
cq --baseline-dir "$tmp/pristine"
check "a pass followed by a long log is a pass, not \"every subtest skipped\"" \
    '^ok 1 - chatty ('
