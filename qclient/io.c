#include "io.h"

#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

int64_t vg_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Wait for @events on @fd until @deadline_ms. */
static int wait_fd(int fd, short events, int64_t deadline_ms,
                   struct vg_error *err)
{
    struct pollfd pfd = {.fd = fd, .events = events};
    int64_t left;
    int rc;

    for (;;) {
        left = deadline_ms - vg_now_ms();
        if (left < 0) {
            return vg_error_set(err, ETIMEDOUT, "timed out");
        }
        rc = poll(&pfd, 1, left > 1000 ? 1000 : (int)left);
        if (rc > 0) {
            return 0;
        }
        if (rc < 0 && errno != EINTR) {
            return vg_error_set(err, errno, "poll: %s", strerror(errno));
        }
    }
}

int vg_linebuf_init(struct vg_linebuf *lb, int fd, struct vg_error *err)
{
    int flags = fcntl(fd, F_GETFL);

    if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        return vg_error_set(err, errno, "fcntl(O_NONBLOCK): %s",
                            strerror(errno));
    }
    lb->fd = fd;
    lb->len = 0;
    lb->cap = 4096;
    lb->buf = g_malloc(lb->cap);
    return 0;
}

void vg_linebuf_destroy(struct vg_linebuf *lb)
{
    if (lb->buf) {
        close(lb->fd);
        g_free(lb->buf);
        lb->buf = NULL;
    }
    lb->fd = -1;
    lb->len = 0;
}

int vg_linebuf_write(struct vg_linebuf *lb, const void *data, size_t len,
                     int64_t deadline_ms, struct vg_error *err)
{
    const char *p = data;
    ssize_t n;
    int rc;

    while (len > 0) {
        n = send(lb->fd, p, len, MSG_NOSIGNAL);
        if (n > 0) {
            p += n;
            len -= (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
            return vg_error_set(err, errno == EPIPE ? EPIPE : errno, "send: %s",
                                strerror(errno));
        }
        rc = wait_fd(lb->fd, POLLOUT, deadline_ms, err);
        if (rc < 0) {
            vg_error_prefix(err, "send");
            return rc;
        }
    }
    return 0;
}

int vg_linebuf_read_line(struct vg_linebuf *lb, char **line,
                         int64_t deadline_ms, struct vg_error *err)
{
    size_t scanned = 0;
    char *nl;
    size_t ll;
    ssize_t n;
    int rc;

    for (;;) {
        nl = memchr(lb->buf + scanned, '\n', lb->len - scanned);
        if (nl) {
            ll = (size_t)(nl - lb->buf);
            *line = g_strndup(lb->buf, ll > 0 && nl[-1] == '\r' ? ll - 1 : ll);
            memmove(lb->buf, nl + 1, lb->len - ll - 1);
            lb->len -= ll + 1;
            return 0;
        }
        scanned = lb->len;
        if (lb->cap - lb->len < 4096) {
            lb->cap *= 2;
            lb->buf = g_realloc(lb->buf, lb->cap);
        }
        n = recv(lb->fd, lb->buf + lb->len, lb->cap - lb->len, 0);
        if (n > 0) {
            lb->len += (size_t)n;
            continue;
        }
        if (n == 0) {
            return vg_error_set(err, EPIPE, "connection closed by peer");
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            return vg_error_set(err, errno, "recv: %s", strerror(errno));
        }
        rc = wait_fd(lb->fd, POLLIN, deadline_ms, err);
        if (rc < 0) {
            vg_error_prefix(err, "waiting for a reply");
            return rc;
        }
    }
}

/* A UNIX stream socket in *@fd and the address of @path in @sa. */
static int unix_socket(const char *path, struct sockaddr_un *sa, int *fd,
                       struct vg_error *err)
{
    memset(sa, 0, sizeof(*sa));
    sa->sun_family = AF_UNIX;
    if (strlen(path) >= sizeof(sa->sun_path)) {
        return vg_error_set(err, ENAMETOOLONG, "socket path too long: %s",
                            path);
    }
    strcpy(sa->sun_path, path);
    *fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (*fd < 0) {
        return vg_error_set(err, errno, "socket: %s", strerror(errno));
    }
    return 0;
}

int vg_unix_listen(const char *path, int *fd, struct vg_error *err)
{
    struct sockaddr_un sa;
    int s = -1, rc = unix_socket(path, &sa, &s, err);

    if (rc == 0) {
        unlink(path);
        if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
            listen(s, 1) < 0) {
            rc = vg_error_set(err, errno, "listen on %s: %s", path,
                              strerror(errno));
            close(s);
        }
    }
    if (rc == 0) {
        *fd = s;
    }
    return rc;
}

int vg_unix_accept(int lfd, int *fd, int64_t deadline_ms, struct vg_error *err)
{
    int rc = wait_fd(lfd, POLLIN, deadline_ms, err);
    int s;

    if (rc < 0) {
        vg_error_prefix(err, "accept");
        return rc;
    }
    s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
    if (s < 0) {
        return vg_error_set(err, errno, "accept: %s", strerror(errno));
    }
    *fd = s;
    return 0;
}
