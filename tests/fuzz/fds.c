/*
 * fds.c -- the file descriptors that the vfu and sock harnesses pass with
 * a message (fuzz.h: the header's error field picks their number and
 * kind), as a hostile client could: guest RAM in a sealed or unsealed
 * memfd, pipe and socket ends whose peer never reads, a regular file,
 * eventfds, /dev/null.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "vfio-user/vfu-proto.h"

/* The harness cannot go on without the fd: say which and stop. */
static int need(int fd, const char *what)
{
    if (fd < 0) {
        fprintf(stderr, "fuzz: cannot make %s: %s\n", what, strerror(errno));
        abort();
    }
    return fd;
}

int fuzz_ram_fd(bool sealed)
{
    int fd =
        need(memfd_create("fuzz-guest-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING),
             "guest RAM memfd");

    if (ftruncate(fd, FUZZ_VFU_RAM) < 0 ||
        (sealed && fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) < 0)) {
        need(-1, sealed ? "sealed guest RAM" : "guest RAM");
    }
    return fd;
}

/* The write end of a pipe or one end of a socketpair; the other end is
 * closed at once (the server sees a peer that never reads). */
static int lone_end(bool pipe_end)
{
    int p[2];

    need(pipe_end ? pipe2(p, O_CLOEXEC)
                  : socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, p),
         pipe_end ? "pipe" : "socketpair");
    close(p[0]);
    return p[1];
}

static int tmp_file(void)
{
    int fd = need(open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600),
                  "a file in /tmp");

    if (ftruncate(fd, FUZZ_VFU_RAM) < 0) {
        need(-1, "a file of guest RAM size");
    }
    return fd;
}

int fuzz_new_fd(unsigned kind, uint16_t cmd, int ram, int loose)
{
    switch (kind) {
    case FUZZ_FD_DEFAULT:
        return cmd == VFU_CMD_DMA_MAP
                   ? need(fcntl(ram, F_DUPFD_CLOEXEC, 0), "guest RAM dup")
                   : need(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK), "eventfd");
    case FUZZ_FD_LOOSE:
        return need(fcntl(loose, F_DUPFD_CLOEXEC, 0), "unsealed RAM dup");
    case FUZZ_FD_PIPE:
    case FUZZ_FD_SOCKET:
        return lone_end(kind == FUZZ_FD_PIPE);
    case FUZZ_FD_FILE:
        return tmp_file();
    case FUZZ_FD_EVENTFD:
        return need(eventfd(0, EFD_CLOEXEC), "eventfd");
    case FUZZ_FD_DEVNULL:
        return need(open("/dev/null", O_RDWR | O_CLOEXEC), "/dev/null");
    default:
        return need(fcntl(ram, F_DUPFD_CLOEXEC, 0), "guest RAM dup");
    }
}
