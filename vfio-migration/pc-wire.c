/*
 * pc-wire.c -- whole-message socket I/O of the post-copy page channel.
 */
#include "pc-wire.h"

#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

int pc_send(int fd, struct iovec *iov, int n, struct vg_error *err)
{
    struct msghdr mh = {.msg_iov = iov, .msg_iovlen = (size_t)n};

    while (mh.msg_iovlen > 0) {
        ssize_t w = sendmsg(fd, &mh, MSG_NOSIGNAL);

        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w < 0) {
            return vg_error_set(err, errno, "page channel send: %s",
                                strerror(errno));
        }
        while (mh.msg_iovlen > 0 && (size_t)w >= mh.msg_iov->iov_len) {
            w -= (ssize_t)mh.msg_iov->iov_len;
            mh.msg_iov++;
            mh.msg_iovlen--;
        }
        if (mh.msg_iovlen > 0) {
            mh.msg_iov->iov_base = (uint8_t *)mh.msg_iov->iov_base + w;
            mh.msg_iov->iov_len -= (size_t)w;
        }
    }
    return 0;
}

int pc_recv(int fd, void *buf, uint64_t len, struct vg_error *err)
{
    uint8_t *p = buf;

    while (len > 0) {
        ssize_t r = recv(fd, p, len, 0);

        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r < 0) {
            return vg_error_set(err, errno, "page channel receive: %s",
                                strerror(errno));
        }
        if (r == 0) {
            return vg_error_set(err, EPIPE, "page channel closed by the peer");
        }
        p += r;
        len -= (uint64_t)r;
    }
    return 0;
}

static int connect_unix(const char *path, struct vg_error *err)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    int fd;

    if (n == 0 || n >= sizeof(sa.sun_path)) {
        return vg_error_set(err, EINVAL, "page server address '%s' too long",
                            path);
    }
    memcpy(sa.sun_path, path, n);
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        int e = errno;

        if (fd >= 0) {
            close(fd);
        }
        return vg_error_set(err, e, "page server %s: %s", path, strerror(e));
    }
    return fd;
}

/* "HOST:PORT" (HOST may be a bracketed IPv6 address). */
static int connect_tcp(const char *hostport, struct vg_error *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    const char *colon = strrchr(hostport, ':');
    char host[PC_ADDR_MAX];
    int one = 1, fd = -1, rc;
    size_t hl;

    if (!colon || colon == hostport) {
        return vg_error_set(err, EINVAL, "page server 'tcp:%s': no HOST:PORT",
                            hostport);
    }
    hl = (size_t)(colon - hostport);
    if (hostport[0] == '[' && hl >= 2 && hostport[hl - 1] == ']') {
        hostport++;
        hl -= 2;
    }
    snprintf(host, sizeof(host), "%.*s", (int)hl, hostport);
    rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc) {
        return vg_error_set(err, EINVAL, "page server 'tcp:%s': %s", hostport,
                            gai_strerror(rc));
    }
    for (struct addrinfo *a = ai; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && connect(fd, a->ai_addr, a->ai_addrlen) < 0) {
            rc = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(ai);
    if (fd < 0) {
        return vg_error_set(err, rc ? rc : EHOSTUNREACH,
                            "page server tcp:%s: %s", hostport,
                            strerror(rc ? rc : EHOSTUNREACH));
    }
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

int pc_connect(const char *addr, struct vg_error *err)
{
    return strncmp(addr, "tcp:", 4) == 0 ? connect_tcp(addr + 4, err)
                                         : connect_unix(addr, err);
}

uint64_t pc_bitmap_bytes(uint64_t npages)
{
    return (npages + 63) / 64 * 8;
}
