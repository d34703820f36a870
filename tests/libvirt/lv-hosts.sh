#!/bin/sh
# lv-hosts.sh -- two libvirt hosts on this machine, for tests/libvirt.
#
# Usage: lv-hosts.sh DIR          (as root; DIR must exist)
#
# Starts hosts "a" (10.77.0.1, hostname vgmig-a) and "b" (10.77.0.2,
# vgmig-b).  Each is a libvirtd in its own mount, UTS, network and PID
# namespaces: /etc and /var are overlays of the machine's (upper layers in
# DIR/HOST/), /run is a private tmpfs, and the host has its own hostname,
# host_uuid, libvirtd.conf and qemu.conf (TCG, no cgroups, migration on its
# address), the hook $VGMIG_HOOK installed as /etc/libvirt/hooks/qemu and
# /etc/vgmig/hook.conf naming DIR/bin/vgpu-server (a copy of
# $VGMIG_SERVER).  A veth pair joins the two network namespaces; libvirtd
# listens for qemu+tcp (auth none) only on that address.  QEMU
# ($VGMIG_QEMU) is bind-mounted on DIR/bin/qemu-system-x86_64 so the QEMU
# user can run it; $VGMIG_GUEST_DIR (kernel, initrd.img, fw/), if set, is
# copied to DIR/img.  A user libvirt-qemu (uid/gid 64055) exists in the
# hosts' /etc/passwd only.
#
# Once both daemons answer, prints
#   host a PID
#   host b PID
#   ready
# where PID is a process in that host's mount, UTS and network namespaces
# (nsenter -t PID -m -u -n; its files are under /proc/PID/root).  It then
# waits for end of file on standard input (the test closing it, or dying),
# and tears everything down: destroys the hosts' domains (their hooks stop
# the vGPU servers), stops the daemons, kills what is left in the hosts'
# PID namespaces and checks that no process of them remains.  Prints
# "down clean" and exits 0, or names the leftovers and exits 1.  A signal
# tears down the same way.
set -eu

dir=${1:?usage: lv-hosts.sh DIR}
self=$(cd "$(dirname "$0")" && pwd)/$(basename "$0")
hosts="a b"

addr_of() { [ "$1" = a ] && echo 10.77.0.1 || echo 10.77.0.2; }
uuid_of() { [ "$1" = a ] && echo 7a1e5b00-0000-4000-8000-00000000000a || echo 7a1e5b00-0000-4000-8000-00000000000b; }

# ------------------------------------------------------ inside a host --
# lv-hosts.sh --init HOST DIR: PID 1 of the host's PID namespace.
if [ "$1" = --init ]; then
    h=$2
    dir=$3
    hd=$dir/$h
    addr=$(addr_of "$h")
    mount -t overlay overlay -o "lowerdir=/etc,upperdir=$hd/etc-up,workdir=$hd/etc-work" /etc
    mount -t overlay overlay -o "lowerdir=/var,upperdir=$hd/var-up,workdir=$hd/var-work" /var
    mount -t tmpfs -o mode=0755 tmpfs /run
    mount -t sysfs sysfs /sys
    mount --bind "$(readlink -f "$VGMIG_QEMU")" "$dir/bin/qemu-system-x86_64"
    hostname "vgmig-$h"
    {
        echo "10.77.0.1 vgmig-a"
        echo "10.77.0.2 vgmig-b"
    } >>/etc/hosts
    grep -q '^libvirt-qemu:' /etc/passwd ||
        echo 'libvirt-qemu:x:64055:64055:Libvirt Qemu:/var/lib/libvirt:/usr/sbin/nologin' >>/etc/passwd
    grep -q '^libvirt-qemu:' /etc/group || echo 'libvirt-qemu:x:64055:' >>/etc/group
    mkdir -p /etc/libvirt/hooks /etc/vgmig /var/lib/libvirt/qemu \
        /var/log/libvirt/qemu /var/cache/libvirt /run/libvirt
    cp "$VGMIG_HOOK" /etc/libvirt/hooks/qemu
    chmod 0755 /etc/libvirt/hooks/qemu
    cat >/etc/vgmig/hook.conf <<EOF
# written by tests/libvirt/lv-hosts.sh
server = $dir/bin/vgpu-server
start_timeout = 60
postcopy_listen = $addr
EOF
    cat >/etc/libvirt/libvirtd.conf <<EOF
listen_tls = 0
listen_tcp = 1
listen_addr = "$addr"
auth_tcp = "none"
host_uuid = "$(uuid_of "$h")"
log_outputs = "3:file:/var/log/libvirt/libvirtd.log"
EOF
    cat >/etc/libvirt/qemu.conf <<EOF
stdio_handler = "file"
namespaces = [ ]
cgroup_controllers = [ ]
remember_owner = 0
migration_address = "$addr"
migration_host = "$addr"
EOF
    : >"$hd/ns-ready"
    while [ ! -e "$hd/net-ready" ]; do sleep 0.05; done
    /usr/sbin/libvirtd --listen -f /etc/libvirt/libvirtd.conf >"$hd/libvirtd.out" 2>&1 &
    lpid=$!
    # As PID 1, reap every orphan (QEMU and the servers are daemons) while
    # waiting in `wait`.
    while [ ! -e "$hd/stop" ] && kill -0 "$lpid" 2>/dev/null; do
        sleep 0.2 &
        wait $! || true
    done
    kill -TERM "$lpid" 2>/dev/null || true
    i=0
    while kill -0 "$lpid" 2>/dev/null && [ $i -lt 100 ]; do
        sleep 0.1 &
        wait $! || true
        i=$((i + 1))
    done
    exit 0
fi

# ------------------------------------------------------------ outside --
[ "$(id -u)" = 0 ] || { echo "lv-hosts.sh: must run as root" >&2; exit 2; }
: "${VGMIG_HOOK:?}" "${VGMIG_QEMU:?}" "${VGMIG_SERVER:?}"

tag=vgl$$
torn=no

# Output that may find the test gone.
say() { echo "$@" 2>/dev/null || true; }
host_pid() { cat "$dir/$1/pid" 2>/dev/null || true; }
virsh_on() {
    h=$1
    shift
    timeout 60 nsenter -t "$(host_pid "$h")" -m -u -n \
        virsh -q -c "qemu+tcp://$(addr_of "$h")/system" "$@"
}

# The PID namespace of a host's PID 1 (the child of unshare).
pidns_of() {
    p=$(host_pid "$1")
    [ -n "$p" ] || return 0
    c=$(pgrep -P "$p" | head -n 1)
    if [ -n "$c" ]; then readlink "/proc/$c/ns/pid" 2>/dev/null || true; fi
}

teardown() {
    [ "$torn" = yes ] && return 0
    torn=yes
    set +e
    for h in $hosts; do
        p=$(host_pid "$h")
        [ -n "$p" ] && kill -0 "$p" 2>/dev/null || continue
        if [ -e "$dir/$h/net-ready" ]; then
            for d in $(virsh_on "$h" list --name 2>/dev/null); do
                virsh_on "$h" destroy "$d" >/dev/null 2>&1
            done
        fi
        : >"$dir/$h/stop"
    done
    for h in $hosts; do
        p=$(host_pid "$h")
        [ -n "$p" ] || continue
        i=0
        while kill -0 "$p" 2>/dev/null && [ $i -lt 150 ]; do
            sleep 0.1
            i=$((i + 1))
        done
        # unshare --kill-child: its PID 1 dies with it, and the kernel
        # kills every process of that PID namespace.
        kill -KILL "$p" 2>/dev/null
    done
    ip link del "$tag-a" 2>/dev/null
    # Wait for every process of the hosts' namespaces to be gone.
    left=
    i=0
    while [ $i -lt 100 ]; do
        left=
        for ns in $nslist; do
            for f in /proc/[0-9]*/ns/pid; do
                [ "$(readlink "$f" 2>/dev/null)" = "$ns" ] || continue
                q=${f#/proc/}
                left="$left ${q%%/*}"
            done
        done
        [ -z "$left" ] && break
        sleep 0.1
        i=$((i + 1))
    done
    if [ -n "$left" ]; then
        for q in $left; do
            say "leftover: pid $q $(tr '\0' ' ' <"/proc/$q/cmdline" 2>/dev/null)"
        done
        return 1
    fi
    say "down clean"
    return 0
}

nslist=
on_exit() {
    rc=$?
    if ! teardown; then rc=1; fi
    exit $rc
}
trap on_exit EXIT
trap 'exit 1' INT TERM HUP
# A dead test must not stop the teardown midway.
trap '' PIPE

mkdir -p "$dir/bin"
chmod 0755 "$dir" "$dir/bin"
cp "$VGMIG_SERVER" "$dir/bin/vgpu-server"
chmod 0755 "$dir/bin/vgpu-server"
: >"$dir/bin/qemu-system-x86_64"
chmod 0755 "$dir/bin/qemu-system-x86_64"
if [ -n "${VGMIG_GUEST_DIR:-}" ]; then
    mkdir -p "$dir/img"
    cp -L "$VGMIG_GUEST_DIR/kernel" "$VGMIG_GUEST_DIR/initrd.img" "$dir/img/"
    cp -r "$VGMIG_GUEST_DIR/fw" "$dir/img/fw"
    chmod -R a+rX "$dir/img"
fi

for h in $hosts; do
    hd=$dir/$h
    mkdir -p "$hd/etc-up" "$hd/etc-work" "$hd/var-up" "$hd/var-work"
    unshare --mount --uts --net --pid --fork --kill-child --mount-proc \
        --propagation private sh "$self" --init "$h" "$dir" \
        >"$hd/init.out" 2>&1 </dev/null &
    echo $! >"$hd/pid"
done
for h in $hosts; do
    i=0
    while [ ! -e "$dir/$h/ns-ready" ]; do
        kill -0 "$(host_pid "$h")" 2>/dev/null || { echo "host $h failed to start:" >&2; cat "$dir/$h/init.out" >&2; exit 1; }
        [ $i -lt 600 ] || { echo "host $h: namespaces not ready in 30 s" >&2; exit 1; }
        sleep 0.05
        i=$((i + 1))
    done
    nslist="$nslist $(pidns_of "$h")"
done

# The wire between the hosts.
ip link add "$tag-a" type veth peer name "$tag-b"
for h in $hosts; do
    p=$(host_pid "$h")
    ip link set "$tag-$h" netns "$p"
    nsenter -t "$p" -n sh -c "ip link set lo up &&
        ip link set $tag-$h name veth0 &&
        ip addr add $(addr_of "$h")/24 dev veth0 &&
        ip link set veth0 up"
    : >"$dir/$h/net-ready"
done

for h in $hosts; do
    i=0
    until virsh_on "$h" hostname >/dev/null 2>&1; do
        kill -0 "$(host_pid "$h")" 2>/dev/null || { echo "host $h died:" >&2; cat "$dir/$h/init.out" "$dir/$h/libvirtd.out" >&2; exit 1; }
        [ $i -lt 300 ] || { echo "host $h: libvirtd does not answer in 30 s" >&2; exit 1; }
        sleep 0.1
        i=$((i + 1))
    done
done
for h in $hosts; do
    echo "host $h $(host_pid "$h")"
done
echo ready

# Until the test closes our standard input (or dies).
while read -r _; do :; done
exit 0
