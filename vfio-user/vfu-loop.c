/*
 * vfu-loop.c -- the control loop: poll on the signal fd, the listening
 * socket and the client; serve the client, time out its message, step
 * the device in between.  vfu_server_run(), vfu_server_serve_fd() and,
 * without a socket, vfu_server_handle() (vfu-server.h) run it on the
 * caller's thread.
 */
#include "vfu-server-int.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include "common/log.h"

/* The sooner of two poll timeouts (-1: none). */
static int sooner(int a, int b)
{
    return a < 0 || (b >= 0 && b < a) ? b : a;
}

/* Wait for the device's next step, else for the message in progress to
 * time out, and for deferred migration work; else for ever. */
static int poll_timeout(struct vfu_server *srv)
{
    int device;

    if (vfu_plane_busy(srv)) { /* the plane steps; its eventfd wakes us */
        return vfu_rx_wait_ms(srv);
    }
    if (srv->devthread) { /* it waits for its next step itself */
        return sooner(vfu_rx_wait_ms(srv), mig_idle_wait_ms(srv->mig));
    }
    device = vfu_device_wait_ms(srv);

    return sooner(device >= 0 ? device : vfu_rx_wait_ms(srv),
                  mig_idle_wait_ms(srv->mig));
}

/*
 * One round of the poll loop: wait for @signal_fd, the client's socket
 * and, with @accepted, a new connection (then *@accepted, else -1); serve
 * the client, time out its message, step the device.  1 if @signal_fd
 * fired, 0 to go on, a negative errno on error.
 */
static int loop_once(struct vfu_server *srv, int signal_fd, int *accepted,
                     struct vg_error *err)
{
    struct pollfd pfd[4] = {
        {.fd = signal_fd, .events = POLLIN},
        {.fd = accepted ? srv->listen_fd : -1, .events = POLLIN},
        {.fd = srv->client_fd, .events = POLLIN},
        {.fd = vfu_plane_wake_fd(srv), .events = POLLIN},
    };
    struct signalfd_siginfo si;

    if (poll(pfd, 4, poll_timeout(srv)) < 0 && errno != EINTR) {
        return vg_error_set(err, errno, "poll: %s", strerror(errno));
    }
    if (pfd[0].revents & POLLIN) {
        if (read(signal_fd, &si, sizeof(si)) == sizeof(si)) {
            vg_info("signal %u: shutting down", si.ssi_signo);
        }
        return 1;
    }
    if (pfd[1].revents & POLLIN) {
        *accepted = vfu_accept(srv);
    }
    if ((pfd[3].revents & POLLIN) && vfu_plane_woken(srv)) {
        vfu_client_close(srv); /* the plane could not send a reply */
    }
    if (srv->client_fd >= 0 && pfd[2].revents) {
        vfu_client_readable(srv);
    }
    if (vfu_rx_expired(srv)) {
        vfu_rx_timeout(srv);
    }
    if (!vfu_plane_busy(srv)) {
        vfu_device_run(srv);
        vfu_mig_idle(srv, false);
    }
    return 0;
}

int vfu_server_serve_fd(struct vfu_server *srv, int fd, int signal_fd,
                        struct vg_error *err)
{
    int ret = 0;

    if (fd < 0) {
        return vg_error_set(err, EBADF, "serve fd %d: not a descriptor", fd);
    }
    if (srv->client_fd >= 0) {
        close(fd);
        return vg_error_set(err, EBUSY,
                            "serve fd %d: client fd %d is still connected", fd,
                            srv->client_fd);
    }
    vfu_client_attach(srv, fd);
    while (ret == 0 && srv->client_fd >= 0) {
        ret = loop_once(srv, signal_fd, NULL, err);
    }
    vfu_client_close(srv);
    return ret;
}

int vfu_server_run(struct vfu_server *srv, int signal_fd, struct vg_error *err)
{
    int ret;

    if (srv->listen_fd < 0) {
        return vg_error_set(err, EINVAL, "serve: the server has no socket");
    }
    for (;;) {
        int fd = -1;

        /* One client at a time: others wait in the backlog. */
        ret = loop_once(srv, signal_fd, &fd, err);
        if (ret == 0 && fd >= 0) {
            ret = vfu_server_serve_fd(srv, fd, signal_fd, err);
        }
        if (ret != 0) {
            return ret < 0 ? ret : 0;
        }
    }
}

/* -------------------------------------------------- in-process requests */

/* Take @fds as if they came with the message, as many as MAX_FDS. */
static void rx_take_fds(struct rx_state *rx, const int *fds, unsigned nfds)
{
    for (unsigned i = 0; i < nfds; i++) {
        if (rx->nfds < MAX_FDS) {
            rx->fds[rx->nfds++] = fds[i];
        } else {
            close(fds[i]);
            rx->fds_lost = true;
        }
    }
}

/* Frame @msg (@len bytes) as if received whole, and serve it. */
static void handle_message(struct vfu_server *srv, const void *msg, size_t len)
{
    struct rx_state *rx = &srv->rx;
    struct vfu_reply r = {0, -1};

    rx->have = len < MAX_MSG ? len : MAX_MSG;
    memcpy(srv->rxbuf, msg, rx->have);
    if (len < sizeof(rx->hdr)) { /* as a header that never completes */
        memset(&rx->hdr, 0, sizeof(rx->hdr));
        memcpy(&rx->hdr, msg, len);
        vfu_send_reply(srv, &rx->hdr, EINVAL, &r);
        srv->drop = true;
    } else {
        vfu_rx_header_done(srv);
    }
    if (rx->refused) {
        vfu_rx_refused_done(srv);
    } else if (!srv->drop && len != rx->hdr.size) { /* truncated */
        if (!(rx->hdr.flags & VFU_FLAG_NO_REPLY)) {
            vfu_send_reply(srv, &rx->hdr, EINVAL, &r);
        }
        srv->drop = true;
    } else if (!srv->drop) {
        vfu_serve_request(srv);
    }
}

int vfu_server_handle(struct vfu_server *srv, const void *msg, size_t len,
                      const int *fds, unsigned nfds, const uint8_t **reply)
{
    vfu_rx_reset(&srv->rx);
    srv->drop = false;
    srv->tx_len = 0;
    rx_take_fds(&srv->rx, fds, nfds);
    handle_message(srv, msg, len);
    vfu_rx_reset(&srv->rx);
    vfu_device_run(srv);
    *reply = srv->tx_len ? srv->txbuf : NULL;
    return srv->drop ? 1 : 0;
}
