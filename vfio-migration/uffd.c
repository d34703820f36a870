/*
 * uffd.c -- userfaultfd(2) operations (see uffd.h).
 */
#include "uffd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

static bool page_aligned(uint64_t v)
{
    return v % (uint64_t)sysconf(_SC_PAGESIZE) == 0;
}

int uffd_open(struct vg_error *err)
{
    struct uffdio_api api = {.api = UFFD_API};
    int fd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);

    if (fd < 0) {
        return vg_error_set(err, errno, "userfaultfd: %s", strerror(errno));
    }
    if (ioctl(fd, UFFDIO_API, &api) < 0) {
        int e = errno;

        close(fd);
        return vg_error_set(err, e, "UFFDIO_API: %s", strerror(e));
    }
    return fd;
}

static int range_ioctl(int fd, unsigned long req, const char *name, void *arg,
                       uint64_t addr, uint64_t len, struct vg_error *err)
{
    if (!page_aligned(addr) || !page_aligned(len) || len == 0) {
        return vg_error_set(err, EINVAL,
                            "%s: range %#" PRIx64 "+%#" PRIx64
                            " is not page-aligned",
                            name, addr, len);
    }
    if (ioctl(fd, req, arg) < 0) {
        return vg_error_set(err, errno, "%s %#" PRIx64 "+%#" PRIx64 ": %s",
                            name, addr, len, strerror(errno));
    }
    return 0;
}

int uffd_register(int fd, uint64_t addr, uint64_t len, struct vg_error *err)
{
    struct uffdio_register r = {.range = {.start = addr, .len = len},
                                .mode = UFFDIO_REGISTER_MODE_MISSING};

    return range_ioctl(fd, UFFDIO_REGISTER, "UFFDIO_REGISTER", &r, addr, len,
                       err);
}

int uffd_unregister(int fd, uint64_t addr, uint64_t len, struct vg_error *err)
{
    struct uffdio_range r = {.start = addr, .len = len};

    return range_ioctl(fd, UFFDIO_UNREGISTER, "UFFDIO_UNREGISTER", &r, addr,
                       len, err);
}

int uffd_wake(int fd, uint64_t addr, uint64_t len, struct vg_error *err)
{
    struct uffdio_range r = {.start = addr, .len = len};

    return range_ioctl(fd, UFFDIO_WAKE, "UFFDIO_WAKE", &r, addr, len, err);
}

int uffd_copy(int fd, uint64_t addr, const void *src, uint64_t len,
              struct vg_error *err)
{
    uint64_t done = 0;

    if (!page_aligned(addr) || !page_aligned(len) || len == 0) {
        return vg_error_set(err, EINVAL,
                            "UFFDIO_COPY: range %#" PRIx64 "+%#" PRIx64
                            " is not page-aligned",
                            addr, len);
    }
    while (done < len) {
        struct uffdio_copy c = {.dst = addr + done,
                                .src = (uint64_t)(uintptr_t)src + done,
                                .len = len - done};

        if (ioctl(fd, UFFDIO_COPY, &c) == 0) {
            return 1;
        }
        if (errno == EEXIST) {
            /* Part of the range is there already: nothing is copied
             * over it; wake whoever waited on the rest. */
            if (c.copy > 0) {
                done += (uint64_t)c.copy;
                continue;
            }
            return uffd_wake(fd, addr, len, err) < 0 ? -err->code : 0;
        }
        if (errno == EAGAIN && c.copy > 0) {
            done += (uint64_t)c.copy; /* partial: go on from there */
            continue;
        }
        if (errno == ESRCH) {
            return vg_error_set(err, ESRCH,
                                "UFFDIO_COPY %#" PRIx64 "+%#" PRIx64
                                ": the address space is gone (its process "
                                "exited)",
                                addr + done, len - done);
        }
        if (errno != EAGAIN) {
            return vg_error_set(err, errno,
                                "UFFDIO_COPY %#" PRIx64 "+%#" PRIx64 ": %s",
                                addr + done, len - done, strerror(errno));
        }
    }
    return 1;
}

int uffd_next_fault(int fd, uint64_t *addr, struct vg_error *err)
{
    struct uffd_msg msg;

    for (;;) {
        ssize_t n = read(fd, &msg, sizeof(msg));

        if (n < 0 && errno == EAGAIN) {
            return 0;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            return vg_error_set(err, errno, "userfaultfd read: %s",
                                strerror(errno));
        }
        if (n != sizeof(msg)) {
            return vg_error_set(err, EIO, "userfaultfd read: %zd bytes", n);
        }
        if (msg.event == UFFD_EVENT_PAGEFAULT) {
            *addr = msg.arg.pagefault.address;
            return 1;
        }
    }
}
