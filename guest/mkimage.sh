#!/bin/sh
# mkimage.sh -- build the vgmig TCG guest image from Debian's packages.
#
# Run by `make guest-image`; see --help and docs/guest.md.
set -eu

out=
cache=
qemu_src=
tool=
busybox=

usage() {
    cat <<EOF
Usage: guest/mkimage.sh --out DIR --cache-dir DIR --qemu-src DIR --tool FILE

Build the guest that the real-guest tests boot under TCG, from Debian's
packages only:

  DIR/vmlinuz      the kernel of Debian's linux-image-*-amd64 package (the
                   one linux-image-amd64 depends on), downloaded with
                   'apt-get download' into the cache directory and unpacked
                   with dpkg-deb; the package is never installed
  DIR/vmlinux      the same kernel decompressed (when it is an ELF with a
                   PVH entry point): QEMU boots it directly, which spares
                   the guest the seconds its decompressor takes under TCG
  DIR/kernel       a link to the one to boot: vmlinux, else vmlinuz
  DIR/initrd.img   a gzip'ed cpio initramfs: the static busybox of Debian's
                   busybox-static package (downloaded and unpacked like the
                   kernel), FILE as /bin/vgpu-guest and guest/init as /init
  DIR/fw/          linuxboot_dma.bin, pvh.bin and kvmvapic.bin, the option
                   ROMs that QEMU's -kernel needs (Debian's QEMU source
                   package ships them as source only), built from QEMU's
                   pc-bios/optionrom in the configured QEMU source tree;
                   pass -L DIR/fw next to the SeaBIOS directory

Options:
  --out DIR          where the image goes (created)
  --cache-dir DIR    where the kernel package is kept between builds
  --qemu-src DIR     the QEMU source tree (config.mak's QEMU_SRC)
  --tool FILE        the statically linked vgpu-guest
  --busybox FILE     use this static busybox instead of the one of
                     busybox-static
  -h, --help         show this text and exit

Boot it with, for example:
  qemu-system-x86_64 -accel tcg -L DIR/fw -L /usr/share/seabios \\
      -kernel DIR/kernel -initrd DIR/initrd.img \\
      -append 'console=ttyS0 quiet vgpu_guest=--profile,all' ...
EOF
}

die() { printf 'mkimage.sh: error: %s\n' "$*" >&2; exit 1; }
note() { printf 'mkimage.sh: %s\n' "$*"; }

while [ $# -gt 0 ]; do
    case $1 in
    --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift ;;
    --cache-dir) [ $# -ge 2 ] || die "--cache-dir needs a directory"; cache=$2; shift ;;
    --qemu-src) [ $# -ge 2 ] || die "--qemu-src needs a directory"; qemu_src=$2; shift ;;
    --tool) [ $# -ge 2 ] || die "--tool needs a file"; tool=$2; shift ;;
    --busybox) [ $# -ge 2 ] || die "--busybox needs a file"; busybox=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown option '$1' (see --help)" ;;
    esac
    shift
done

[ -n "$out" ] || die "--out is required"
[ -n "$cache" ] || die "--cache-dir is required"
[ -x "$tool" ] || die "--tool: '$tool' is not an executable"
[ -f "$qemu_src/pc-bios/optionrom/Makefile" ] ||
    die "--qemu-src: '$qemu_src' has no pc-bios/optionrom (was QEMU configured? run ./configure without --no-qemu)"
for cmd in dpkg-deb cpio gzip apt-get apt-cache objcopy readelf python3; do
    command -v $cmd >/dev/null 2>&1 || die "'$cmd' not found (./configure installs what is needed)"
done
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out" "$cache"
out=$(cd "$out" && pwd)
cache=$(cd "$cache" && pwd)

# Whether file $1 is newer than file $2 (or $2 is missing).
newer() {
    [ ! -e "$2" ] || [ -n "$(find "$1" -prune -newer "$2")" ]
}

# The newest cached .deb of package names matching glob $1.
cached_deb() {
    # shellcheck disable=SC2012,SC2086 # $1 is a glob; names have no spaces
    ls "$cache"/$1_*_amd64.deb 2>/dev/null | sort -V | tail -n 1
}

# Path of a .deb of package $1 (glob $2 for its cached file names) in the
# cache, downloaded with apt-get if none is there; never installed.
fetch_deb() {
    deb=$(cached_deb "$2")
    if [ -z "$deb" ]; then
        note "downloading $1 into $cache (not installed)" >&2
        (cd "$cache" && apt-get -q download "$1") >"$cache/download.log" 2>&1 ||
            die "apt-get download $1 failed (log: $cache/download.log)"
        deb=$(cached_deb "$2")
        [ -n "$deb" ] || die "apt-get download $1 left no .deb in $cache"
    fi
    printf '%s\n' "$deb"
}

# ------------------------------------------------------------------ kernel --
deb=$(cached_deb 'linux-image-*-amd64')
if [ -z "$deb" ]; then
    pkg=$(apt-cache depends linux-image-amd64 2>/dev/null |
        sed -n 's/^ *Depends: \(linux-image-[^ <>]*-amd64\)$/\1/p' | head -n 1)
    [ -n "$pkg" ] || die "cannot tell which kernel package linux-image-amd64 depends on (apt-get update?)"
    deb=$(fetch_deb "$pkg" "$pkg")
fi
if newer "$deb" "$out/vmlinuz"; then
    note "unpacking the kernel of $(basename "$deb")"
    rm -rf "$out/kernel.tmp"
    mkdir -p "$out/kernel.tmp"
    dpkg-deb --fsys-tarfile "$deb" |
        tar -x -C "$out/kernel.tmp" --wildcards './boot/vmlinuz-*' ||
        die "cannot unpack ./boot/vmlinuz-* from $deb"
    mv "$out"/kernel.tmp/boot/vmlinuz-* "$out/vmlinuz"
    touch "$out/vmlinuz"
    rm -rf "$out/kernel.tmp"
fi

# The decompressor of a bzImage takes seconds under TCG: where the kernel
# is a PVH-capable ELF (Debian's are), unpack it here and let QEMU boot
# it directly (-kernel vmlinux, through the pvh.bin option ROM).
if newer "$out/vmlinuz" "$out/kernel"; then
    rm -f "$out/vmlinux" "$out/kernel" "$out/vmlinux.tmp"
    python3 - "$out/vmlinuz" "$out/vmlinux.tmp" <<'PY' || true
import lzma, sys, zlib
data = open(sys.argv[1], "rb").read()
for magic, make in ((b"\xfd7zXZ\x00", lambda: lzma.LZMADecompressor()),
                    (b"\x1f\x8b\x08", lambda: zlib.decompressobj(31))):
    at = data.find(magic)
    while at >= 0:
        try:
            elf = make().decompress(data[at:])
        except (lzma.LZMAError, zlib.error):
            elf = b""
        if elf[:4] == b"\x7fELF":
            open(sys.argv[2], "wb").write(elf)
            sys.exit(0)
        at = data.find(magic, at + 1)
sys.exit(1)
PY
    [ -f "$out/vmlinux.tmp" ] && mv "$out/vmlinux.tmp" "$out/vmlinux"
    # Note type 0x12: XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point.
    if [ -f "$out/vmlinux" ] && readelf -n "$out/vmlinux" 2>/dev/null | grep -q '0x00000012'; then
        ln -sf vmlinux "$out/kernel"
        note "kernel: vmlinux, booted through its PVH entry point"
    else
        rm -f "$out/vmlinux"
        ln -sf vmlinuz "$out/kernel"
        note "kernel: vmlinuz (no PVH entry point found in it)"
    fi
fi

# ------------------------------------------------------------ option ROMs --
mkdir -p "$out/fw"
cat >"$out/fw/config.mak.new" <<EOF
# Written by guest/mkimage.sh: QEMU's pc-bios/optionrom built out of tree.
TOPSRC_DIR=$qemu_src
CC=${CC:-cc}
OBJCOPY=objcopy
PYTHON=python3
TARGET_DIR=
EOF
if cmp -s "$out/fw/config.mak.new" "$out/fw/config.mak"; then
    rm -f "$out/fw/config.mak.new"
else
    mv "$out/fw/config.mak.new" "$out/fw/config.mak"
fi
make -s -C "$out/fw" -f "$qemu_src/pc-bios/optionrom/Makefile" \
    linuxboot_dma.bin pvh.bin kvmvapic.bin >"$out/fw/build.log" 2>&1 ||
    die "building QEMU's option ROMs failed (log: $out/fw/build.log)"

# -------------------------------------------------------------- initramfs --
if [ -z "$busybox" ]; then
    bdeb=$(fetch_deb busybox-static busybox-static)
    if newer "$bdeb" "$out/busybox"; then
        rm -rf "$out/busybox.tmp"
        mkdir -p "$out/busybox.tmp"
        dpkg-deb --fsys-tarfile "$bdeb" | tar -x -C "$out/busybox.tmp" ./bin/busybox ||
            die "cannot unpack ./bin/busybox from $bdeb"
        mv "$out/busybox.tmp/bin/busybox" "$out/busybox"
        touch "$out/busybox"
        rm -rf "$out/busybox.tmp"
    fi
    busybox=$out/busybox
fi
[ -x "$busybox" ] || die "no busybox at $busybox"
root=$out/root
rm -rf "$root"
mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/dev" "$root/tmp"
cp "$busybox" "$root/bin/busybox"
cp "$tool" "$root/bin/vgpu-guest"
cp "$here/init" "$root/init"
chmod 0755 "$root/init" "$root/bin/busybox" "$root/bin/vgpu-guest"
(cd "$root" && find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --quiet) |
    gzip -6n >"$out/initrd.img.tmp"
mv "$out/initrd.img.tmp" "$out/initrd.img"
rm -rf "$root"
note "guest image in $out: vmlinuz ($(basename "$deb")), initrd.img ($(wc -c <"$out/initrd.img") bytes), fw/"
