/*
 * tcp-census.c -- see tcp-census.h.
 */
#include "tcp-census.h"

#include <dirent.h>
#include <errno.h>
#include <glib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/pidfd.h>
#include <sys/socket.h>
#include <unistd.h>

/* The port of @sa, or -1 if it is not an IPv4 or IPv6 address. */
static int sockaddr_port(const struct sockaddr_storage *sa)
{
    if (sa->ss_family == AF_INET) {
        return ntohs(((const struct sockaddr_in *)sa)->sin_port);
    }
    if (sa->ss_family == AF_INET6) {
        return ntohs(((const struct sockaddr_in6 *)sa)->sin6_port);
    }
    return -1;
}

/* Whether @fd is a connected TCP socket whose remote (@remote) or local
 * port is @port. */
static bool on_port(int fd, int port, bool remote)
{
    struct sockaddr_storage sa;
    socklen_t len = sizeof(sa);
    int type = 0;
    socklen_t tlen = sizeof(type);
    struct sockaddr_storage peer;
    socklen_t plen = sizeof(peer);

    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 ||
        type != SOCK_STREAM ||
        getpeername(fd, (struct sockaddr *)&peer, &plen) < 0) {
        return false; /* not a stream socket, or not connected */
    }
    if (remote) {
        return sockaddr_port(&peer) == port;
    }
    return getsockname(fd, (struct sockaddr *)&sa, &len) == 0 &&
           sockaddr_port(&sa) == port;
}

/* Counts @pidfd's descriptor @target into @c. */
static int census_one(int pidfd, int target, int port, bool remote,
                      struct vg_tcp_census *c, struct vg_error *err)
{
    int fd = pidfd_getfd(pidfd, target, 0);
    int nodelay = 0;
    socklen_t len = sizeof(nodelay);

    if (fd < 0) {
        if (errno == EBADF) {
            return 0; /* closed meanwhile */
        }
        return vg_error_set(err, errno, "pidfd_getfd of descriptor %d: %s",
                            target, strerror(errno));
    }
    if (on_port(fd, port, remote)) {
        c->sockets++;
        if (getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len) == 0 &&
            nodelay) {
            c->nodelay++;
        }
    }
    close(fd);
    return 0;
}

int vg_tcp_census(pid_t pid, int port, bool remote, struct vg_tcp_census *c,
                  struct vg_error *err)
{
    g_autofree char *dir = g_strdup_printf("/proc/%d/fd", (int)pid);
    char target[64];
    struct dirent *de;
    int pidfd, ret = 0;
    DIR *d;

    memset(c, 0, sizeof(*c));
    pidfd = pidfd_open(pid, 0);
    if (pidfd < 0) {
        return vg_error_set(err, errno, "pidfd_open of process %d: %s",
                            (int)pid, strerror(errno));
    }
    d = opendir(dir);
    if (!d) {
        ret = vg_error_set(err, errno, "opendir %s: %s", dir, strerror(errno));
    }
    while (ret == 0 && d && (de = readdir(d))) {
        g_autofree char *link = g_strdup_printf("%s/%s", dir, de->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);

        if (de->d_name[0] == '.' || n < 0) {
            continue; /* closed meanwhile */
        }
        target[n] = '\0';
        if (g_str_has_prefix(target, "socket:")) {
            ret = census_one(pidfd, atoi(de->d_name), port, remote, c, err);
        }
    }
    if (d) {
        closedir(d);
    }
    close(pidfd);
    if (ret < 0) {
        vg_error_prefix(err, "TCP sockets of process %d", (int)pid);
    }
    return ret;
}
