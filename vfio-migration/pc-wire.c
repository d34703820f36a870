/*
 * pc-wire.c -- whole-message socket I/O of the post-copy page channel.
 */
#include "pc-wire.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

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

uint64_t pc_bitmap_bytes(uint64_t npages)
{
    return (npages + 63) / 64 * 8;
}
