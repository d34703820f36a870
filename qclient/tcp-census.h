/*
 * tcp-census.h -- the TCP sockets another process holds on a port, and
 * whether Nagle's algorithm is off on them.
 *
 * vg_tcp_census() looks at every socket in /proc/PID/fd, takes a copy of
 * it with pidfd_getfd() (so the caller needs the right to ptrace @pid: its
 * parent, or root), and counts the connected IPv4/IPv6 TCP sockets whose
 * local or remote port is @port, and among them those with TCP_NODELAY
 * set.  A migration test uses it to see how QEMU set up its channels.
 */
#ifndef VG_QCLIENT_TCP_CENSUS_H
#define VG_QCLIENT_TCP_CENSUS_H

#include <stdbool.h>
#include <sys/types.h>

#include "common/error.h"

struct vg_tcp_census {
    unsigned sockets; /* connected TCP sockets on the port */
    unsigned nodelay; /* those with TCP_NODELAY set */
};

/* Count @pid's connected TCP sockets whose remote port (@remote) or local
 * port (!@remote) is @port.  0, or a negative errno with @err set. */
int vg_tcp_census(pid_t pid, int port, bool remote, struct vg_tcp_census *c,
                  struct vg_error *err);

#endif
