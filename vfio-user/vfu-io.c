/*
 * vfu-io.c -- framing on the client's socket: receiving requests (headers,
 * bodies, SCM_RIGHTS fds, refused messages drained), their timeouts, and
 * sending replies.  Runs on the control loop.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"

/* A message in progress: at most this long without a byte, and this long
 * in all (a client trickling bytes cannot hold the server); a reply must
 * be taken by the client within IO_TIMEOUT_MS in all. */
#define RX_TIMEOUT_MS  2000
#define MSG_TIMEOUT_MS 5000
#define IO_TIMEOUT_MS  5000
/* Bytes read per wake-up before going back to poll (signals, the device,
 * timeouts): a whole message of the largest size. */
#define RX_BUDGET MAX_MSG

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* -------------------------------------------------------------- sending */

/* Send all of @buf (the first chunk carries @fd if >= 0), within
 * IO_TIMEOUT_MS in all however slowly the client reads. */
static int send_all(struct vfu_server *srv, const uint8_t *buf, size_t len,
                    int fd, struct vg_error *err)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct pollfd pfd = {.fd = srv->client_fd, .events = POLLOUT};
    int64_t deadline = now_ms() + IO_TIMEOUT_MS;
    size_t total = len;

    while (len) {
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        int64_t left = deadline - now_ms();
        ssize_t n;

        if (fd >= 0) {
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof(ctl.buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &fd, sizeof(int));
        }
        n = sendmsg(srv->client_fd, &mh, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN && left > 0 &&
            poll(&pfd, 1, (int)left) > 0) {
            continue;
        }
        if (n < 0 && errno == EAGAIN) {
            return vg_error_set(err, ETIMEDOUT,
                                "send reply: the client took %zu of %zu "
                                "bytes in %d ms",
                                total - len, total, IO_TIMEOUT_MS);
        }
        if (n <= 0) {
            return vg_error_set(err, n < 0 ? errno : EIO, "send reply: %s",
                                n < 0 ? strerror(errno) : "no progress");
        }
        buf += n;
        len -= (size_t)n;
        fd = -1;
    }
    return 0;
}

int vfu_send_msg(struct vfu_server *srv, const uint8_t *msg, size_t len, int fd,
                 struct vg_error *err)
{
    int ret;

    pthread_mutex_lock(&srv->tx_lock);
    ret = send_all(srv, msg, len, fd, err);
    pthread_mutex_unlock(&srv->tx_lock);
    return ret;
}

void vfu_send_reply(struct vfu_server *srv, const struct vfu_hdr *req,
                    int errnum, const struct vfu_reply *r)
{
    struct vfu_hdr hdr;
    struct vg_error err;

    vfu_hdr_reply(req, r->len, errnum, &hdr);
    memcpy(srv->txbuf, &hdr, sizeof(hdr));
    if (srv->client_fd < 0) { /* vfu_server_handle() hands it out */
        srv->tx_len = hdr.size;
        return;
    }
    if (vfu_send_msg(srv, srv->txbuf, hdr.size, errnum ? -1 : r->fd, &err) <
        0) {
        vg_warn("%s", err.msg);
        srv->drop = true;
    }
}

/* ------------------------------------------------------------ receiving */

void vfu_rx_reset(struct rx_state *rx)
{
    for (unsigned i = 0; i < rx->nfds; i++) {
        if (rx->fds[i] >= 0) {
            close(rx->fds[i]);
        }
    }
    memset(rx, 0, sizeof(*rx));
}

static void take_fds(struct rx_state *rx, struct msghdr *mh)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
        size_t n;
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < n; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (rx->nfds < MAX_FDS) {
                rx->fds[rx->nfds++] = fd;
            } else {
                close(fd);
                rx->fds_lost = true;
            }
        }
    }
    if (mh->msg_flags & MSG_CTRUNC) {
        rx->fds_lost = true;
    }
}

/* Read up to @len bytes into @buf (NULL: discard); 0 on EOF. */
static ssize_t rx_read(struct vfu_server *srv, uint8_t *buf, size_t len)
{
    static uint8_t sink[65536];
    union {
        char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = buf ? buf : sink,
                        .iov_len =
                            buf || len < sizeof(sink) ? len : sizeof(sink)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(srv->client_fd, &mh, MSG_CMSG_CLOEXEC);

    if (n > 0) {
        take_fds(&srv->rx, &mh);
    }
    return n;
}

void vfu_rx_header_done(struct vfu_server *srv)
{
    struct rx_state *rx = &srv->rx;
    struct vg_error err;
    struct vfu_reply r = {0, -1};
    int ret;

    memcpy(&rx->hdr, srv->rxbuf, sizeof(rx->hdr));
    ret = vfu_hdr_check(&rx->hdr, &srv->lim, &err);
    if (ret == 0) {
        return;
    }
    vg_warn("message %u (%s): %s", rx->hdr.id, vfu_cmd_name(rx->hdr.command),
            err.msg);
    if (rx->hdr.size < sizeof(rx->hdr)) {
        vfu_send_reply(srv, &rx->hdr, -ret, &r); /* cannot find the next one */
        srv->drop = true;
        return;
    }
    rx->refused = -ret;
    rx->skip = rx->hdr.size - sizeof(rx->hdr);
}

void vfu_rx_refused_done(struct vfu_server *srv)
{
    struct vfu_reply r = {0, -1};

    vfu_send_reply(srv, &srv->rx.hdr, srv->rx.refused, &r);
    vfu_rx_reset(&srv->rx);
}

/*
 * Make progress on the current message: -1 on EOF or error, 1 if part of a
 * message was read and more may be waiting, 0 if the socket is drained or a
 * message was completed.
 */
static int rx_step(struct vfu_server *srv, size_t *budget)
{
    struct rx_state *rx = &srv->rx;
    size_t want;
    ssize_t n;

    if (rx->refused) {
        n = rx_read(srv, NULL, rx->skip);
    } else {
        want = rx->have < sizeof(rx->hdr) ? sizeof(rx->hdr) : rx->hdr.size;
        n = rx_read(srv, srv->rxbuf + rx->have, want - rx->have);
    }
    if (n <= 0) {
        return n < 0 && (errno == EAGAIN || errno == EINTR) ? 0 : -1;
    }
    *budget -= (size_t)n < *budget ? (size_t)n : *budget;
    if (rx->have == 0 && !rx->refused) {
        rx->started = now_ms();
    }
    rx->deadline = now_ms() + RX_TIMEOUT_MS;
    if (rx->refused) {
        rx->skip -= (uint64_t)n;
        if (rx->skip == 0) {
            vfu_rx_refused_done(srv);
            return srv->drop ? -1 : 0;
        }
        return 1;
    }
    rx->have += (size_t)n;
    if (rx->have == sizeof(rx->hdr)) {
        vfu_rx_header_done(srv);
        if (rx->refused && rx->skip == 0) {
            vfu_rx_refused_done(srv);
            return srv->drop ? -1 : 0;
        }
    }
    if (!rx->refused && rx->have >= sizeof(rx->hdr) &&
        rx->have == rx->hdr.size) {
        vfu_serve_request(srv);
        vfu_rx_reset(rx);
        return srv->drop ? -1 : 0;
    }
    return srv->drop ? -1 : 1;
}

void vfu_client_readable(struct vfu_server *srv)
{
    size_t budget = RX_BUDGET;
    int ret;

    /*
     * Read until the socket is drained, a message is complete or the
     * budget is spent: a large message (MIG_DATA_WRITE) arrives in pieces
     * of the client's send buffer size, and a poll round trip per piece
     * only adds latency.  Stopping after each message keeps the device
     * stepping between requests, and the budget keeps a client that sends
     * without end (a refused message of 4 GiB being discarded) from
     * holding the loop; poll is level-triggered and brings us back.
     */
    do {
        ret = rx_step(srv, &budget);
    } while (ret > 0 && budget > 0);
    if (ret < 0) {
        vfu_client_close(srv);
    }
}

/* ------------------------------------------------------------- timeouts */

/* When the message in progress times out: no byte for RX_TIMEOUT_MS, or
 * not complete MSG_TIMEOUT_MS after its first byte. */
static int64_t rx_deadline(const struct rx_state *rx)
{
    int64_t whole = rx->started + MSG_TIMEOUT_MS;

    return rx->deadline < whole ? rx->deadline : whole;
}

static bool rx_in_progress(const struct vfu_server *srv)
{
    return srv->client_fd >= 0 && (srv->rx.have || srv->rx.refused);
}

int vfu_rx_wait_ms(const struct vfu_server *srv)
{
    int64_t left;

    if (!rx_in_progress(srv)) {
        return -1;
    }
    left = rx_deadline(&srv->rx) - now_ms();
    return left < 0 ? 0 : (int)left;
}

bool vfu_rx_expired(const struct vfu_server *srv)
{
    return rx_in_progress(srv) && now_ms() >= rx_deadline(&srv->rx);
}

void vfu_rx_timeout(struct vfu_server *srv)
{
    struct vfu_hdr hdr = {0};
    struct vfu_reply r = {0, -1};
    bool idle = now_ms() >= srv->rx.deadline;

    memcpy(&hdr, srv->rxbuf,
           srv->rx.have < sizeof(hdr) ? srv->rx.have : sizeof(hdr));
    vg_warn("message %u truncated: %zu of %u bytes%s, %s %d ms; "
            "disconnecting",
            hdr.id, srv->rx.have, srv->rx.have < sizeof(hdr) ? 16u : hdr.size,
            srv->rx.refused ? " (refused, being discarded)" : "",
            idle ? "no byte for" : "not complete after",
            idle ? RX_TIMEOUT_MS : MSG_TIMEOUT_MS);
    if (!(hdr.flags & VFU_FLAG_NO_REPLY)) {
        vfu_send_reply(srv, &hdr, EINVAL, &r);
    }
    vfu_client_close(srv);
}
