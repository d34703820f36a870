#include "vfu-eventfd.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

/* What /proc/self/fd/N links to for an eventfd (an anonymous inode). */
#define EVENTFD_LINK "anon_inode:[eventfd]"

static int fd_kind(int fd, char *buf, size_t size, struct vg_error *err)
{
    char path[40];
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, buf, size - 1);
    if (n < 0) {
        return vg_error_set(err, EINVAL, "fd %d: cannot tell its type (%s): %s",
                            fd, path, strerror(errno));
    }
    buf[n] = '\0';
    return 0;
}

int vfu_eventfd_take(int fd, struct vg_error *err)
{
    char kind[256];
    int flags, ret = fd_kind(fd, kind, sizeof(kind), err);

    if (ret < 0) {
        return ret;
    }
    if (strcmp(kind, EVENTFD_LINK) != 0) {
        return vg_error_set(err, EINVAL,
                            "fd %d is not an eventfd but %s: interrupts are "
                            "signalled through eventfds only",
                            fd, kind);
    }
    flags = fcntl(fd, F_GETFL);
    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return vg_error_set(err, errno,
                            "eventfd %d: making it non-blocking: %s", fd,
                            strerror(errno));
    }
    return 0;
}

void vfu_eventfd_signal(int fd)
{
    uint64_t one = 1;

    if (write(fd, &one, sizeof(one)) == sizeof(one)) {
        return;
    }
    if (errno == EAGAIN) {
        vg_trace("eventfd %d: counter full, interrupt dropped", fd);
    } else {
        vg_warn("eventfd %d: %s", fd, strerror(errno));
    }
}
