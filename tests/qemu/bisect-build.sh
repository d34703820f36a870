#!/usr/bin/env bash
# bisect-build.sh -- every patch of qemu-patches/series builds on its own:
# on a clean copy of the pinned QEMU source, build it unpatched, then apply
# the series one patch at a time (git am) and build after each, with the
# flags ./configure builds QEMU with (--enable-werror).  A table at the end.
set -uo pipefail

usage() {
    cat <<'EOF'
Usage: tests/qemu/bisect-build.sh --qemu-src DIR --flags FILE [OPTION]...

Check that the series bisects: clone the pristine QEMU tree DIR (the git
repository ./configure keeps in its cache, tag "pristine") into a fresh
work directory, build it, then apply each patch of qemu-patches/series with
git am and build again.  Stops at the first patch that does not apply or
build, and exits 1; prints a table of the steps and their times.

Options:
  --qemu-src DIR   the pristine QEMU git tree (make bisect-qemu: $(QEMU_SRC))
  --flags FILE     QEMU's configure flags, one line (the cache's
                   build/.vgmig-flags, which ./configure writes)
  --work DIR       the scratch directory, emptied first
                   [default: build/bisect-qemu]
  --targets LIST   ninja targets built after each step
                   [default: qemu-system-x86_64 and the check-qemu qtests]
  -j N             parallel jobs [default: nproc]
  -h, --help       show this text and exit
EOF
}

die() { printf 'bisect-build: %s\n' "$*" >&2; exit 2; }

src= flags= work=build/bisect-qemu jobs=$(nproc) targets=
while [ $# -gt 0 ]; do
    case $1 in
    --qemu-src | --flags | --work | --targets | -j)
        [ $# -ge 2 ] || die "$1 needs a value (see --help)"
        case $1 in
        --qemu-src) src=$2 ;;
        --flags) flags=$2 ;;
        --work) work=$2 ;;
        --targets) targets=$2 ;;
        -j) jobs=$2 ;;
        esac
        shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (see --help)" ;;
    esac
    shift
done
[ -n "$src" ] || die "--qemu-src is required (see --help)"
git -C "$src" rev-parse -q --verify pristine >/dev/null 2>&1 ||
    die "'$src' is not ./configure's pristine QEMU tree (no tag 'pristine')"
[ -r "$flags" ] || die "cannot read the configure flags file '$flags'"
case $jobs in '' | *[!0-9]*) die "-j must be a number, not '$jobs'" ;; esac
top=$(pwd)
[ -n "$targets" ] || targets="qemu-system-x86_64 $(awk '!/^[[:space:]]*(#|$)/ && !/^skip:/ {sub(/^each: */, ""); print "tests/qtest/" $1}' tests/qemu/subset | sort -u | tr '\n' ' ')"
mapfile -t patches < <(grep -v '^[[:space:]]*\(#\|$\)' qemu-patches/series)

rm -rf "$work" && mkdir -p "$work" || die "cannot create '$work'"
work=$(cd "$work" && pwd)
git clone -q --branch pristine "$src" "$work/src" 2>"$work/clone.log" ||
    git clone -q "$src" "$work/src" >>"$work/clone.log" 2>&1 ||
    die "git clone of '$src' failed (log: $work/clone.log)"
git -C "$work/src" checkout -q pristine || die "no commit 'pristine' in the clone"
mkdir -p "$work/build"
# shellcheck disable=SC2046 # the flags are words
(cd "$work/build" && "$work/src/configure" $(cat "$flags")) >"$work/configure.log" 2>&1 ||
    die "QEMU's configure failed (log: $work/configure.log)"

declare -a rows
failed=0
step() { # NAME: build the tree as it stands; record a row
    local t0=$SECONDS log=$work/build-$1.log
    if ninja -C "$work/build" -j"$jobs" $targets >"$log" 2>&1; then
        rows+=("| $1 | builds | $((SECONDS - t0)) |")
        echo "bisect-build: $1 builds ($((SECONDS - t0)) s)"
    else
        rows+=("| $1 | **does not build** (log: $log) | $((SECONDS - t0)) |")
        echo "bisect-build: $1 does not build; log: $log" >&2
        tail -n 20 "$log" >&2
        failed=1
    fi
}

start=$SECONDS
step pristine
for p in "${patches[@]}"; do
    [ $failed -eq 0 ] || break
    if ! git -C "$work/src" -c user.name=vgmig -c user.email=vgmig@localhost \
        am -q "$top/qemu-patches/$p" >"$work/am-$p.log" 2>&1; then
        rows+=("| $p | **does not apply** (log: $work/am-$p.log) | 0 |")
        echo "bisect-build: $p does not apply; log: $work/am-$p.log" >&2
        failed=1
        break
    fi
    step "$p"
done

echo "| step | result | seconds |"
echo "|---|---|---:|"
printf '%s\n' "${rows[@]}"
echo "bisect-build: ${#rows[@]} steps of $((${#patches[@]} + 1)) in $((SECONDS - start)) s with -j$jobs; targets: $targets"
exit $failed
