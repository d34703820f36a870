#!/bin/bash
# gpu-pack.sh -- pack what the GPU tests and benchmarks need into one
# directory that runs on a GPU machine without vgmig's build dependencies:
# the programs (built here, stripped), the patched QEMU, the shared
# libraries they load that glibc does not provide, the firmware, and
# gpu-run.sh.  Usage: gpu-pack.sh BUILD_DIR QEMU_BIN FIRMWARE_DIR OUT_DIR
set -euo pipefail

usage() {
    cat <<'USAGE'
Usage: tests/cuda/gpu-pack.sh BUILD_DIR QEMU_BIN FIRMWARE_DIR OUT_DIR

Copy vgpu-server, cuda-bench, vgmig-bench, restore-bench, the CUDA tests
and the qtests named in $GPU_QTESTS (the Makefile's list) from BUILD_DIR, QEMU_BIN, the libraries they need (from
ldd, glibc's own left out) and FIRMWARE_DIR into OUT_DIR, with
gpu-run.sh and bench/read-hops.py.  `make gpu-pack` calls it; docs/cuda.md says how to use it.
USAGE
}
[ "${1:-}" = --help ] || [ "${1:-}" = -h ] && { usage; exit 0; }
[ $# -eq 4 ] || { usage >&2; exit 2; }
build=$1 qemu=$2 fw=$3 out=$4
qtests=${GPU_QTESTS:-test-mig-basic test-mig-active test-mig-cpu-writes}
# shellcheck disable=SC2086 # $qtests is a list of names
progs="vgpu-server cuda-bench vgmig-bench tests/cuda/test-cuda-backend
       tests/cuda/test-cuda-migrate restore-bench
       $(printf 'tests/qtest/%s ' $qtests)"
rm -rf "$out"
mkdir -p "$out/bin" "$out/lib" "$out/fw"
for p in $progs; do
    [ -x "$build/$p" ] || { echo "gpu-pack: $build/$p is missing" >&2; exit 1; }
    cp "$build/$p" "$out/bin/"
done
cp "$qemu" "$out/bin/qemu-system-x86_64"
strip "$out"/bin/*
cp "$fw"/* "$out/fw/"
for b in "$out"/bin/*; do ldd "$b" | awk '/=> \//{print $3}'; done | sort -u |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
    while read -r lib; do cp -L "$lib" "$out/lib/"; done
cp "$(dirname "$0")/gpu-run.sh" "$out/"
cp "$(dirname "$0")/../../bench/read-hops.py" "$out/bin/"
echo "gpu-pack: $(du -sh "$out" | cut -f1) in $out"
