#!/bin/sh
# fuzz-pack.sh FUZZ_DIR OUT_DIR -- pack the libFuzzer binaries of
# `make fuzz` (FUZZ_DIR/fuzz-*), the libraries they load that glibc does
# not provide, their corpora (the checked-in seeds plus FUZZ_DIR's scratch
# corpora) and campaign.sh into OUT_DIR, to run a long campaign on a
# machine with more cores (docs/fuzzing.md).  `make fuzz-pack` calls it.
set -eu
if [ $# -ne 2 ]; then
    echo "usage: $0 FUZZ_DIR OUT_DIR" >&2
    exit 2
fi
fz=$1 out=$2
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/corpus"
for t in cmd sock stream vfu; do
    cp "$fz/fuzz-$t" "$out/bin/"
    mkdir -p "$out/corpus/$t"
    cp tests/fuzz/corpus/$t/* "$out/corpus/$t/"
    if [ -d "$fz/corpus-$t" ]; then
        find "$fz/corpus-$t" -type f -exec cp {} "$out/corpus/$t/" \;
    fi
done
for b in "$out"/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$out/lib/"; done
cp "$(dirname "$0")/campaign.sh" "$out/"
echo "fuzz-pack: $(du -sh "$out" | cut -f1) in $out"
