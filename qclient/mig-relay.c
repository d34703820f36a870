/*
 * mig-relay.c -- see mig-relay.h.
 *
 * Threads: one accepts; per connection one relays the source's bytes to
 * the destination (parsing them on a multifd channel) and, on any other
 * channel, a second relays the destination's bytes back (QEMU's return
 * path).  A multifd channel's relay owns its destination socket, so it
 * can close it with a reset.  vg_relay_stop() shuts every socket down,
 * which ends every blocked read, and joins.
 */
#include "mig-relay.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define MF_MAGIC       0x11223344u
#define MF_INIT_SIZE   64u
#define MF_HDR_SIZE    12u
#define MF_FLAG_SYNC   1u
#define MF_FLAG_DEVICE (32u << 1)
#define MF_DEVICE_SIZE (MF_HDR_SIZE + 256u + 4u + 4u)
#define MF_PAGE_SIZE   4096u
#define MF_PAGES       (512u * 1024 / MF_PAGE_SIZE)
#define MF_RAM_SIZE    (320u + 8 * MF_PAGES)
#define MF_MAX_DEVICE  (1u << 30)
#define RELAY_CHUNK    (256u << 10)

struct relay_conn {
    struct vg_relay *relay;
    int src, dst; /* -1 once closed */
    GThread *up, *down;
};

struct vg_relay {
    int lfd;
    int stop_pipe[2];
    struct sockaddr_in dst;
    enum vg_relay_drop drop;
    bool reset;
    GThread *acceptor;
    GMutex lock; /* conns, counts, the conns' fds */
    GPtrArray *conns;
    struct vg_relay_counts counts;
};

static uint32_t be32_at(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
           p[3];
}

/* Read exactly @len bytes of @fd into @buf at @off: 1, or 0 at EOF before
 * the first byte, or -1 (error, or EOF within). */
static int read_exact(int fd, GByteArray *buf, size_t off, size_t len)
{
    size_t got = 0;

    g_byte_array_set_size(buf, off + len);
    while (got < len) {
        ssize_t n = recv(fd, buf->data + off + got, len - got, 0);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            g_byte_array_set_size(buf, off + got);
            return n == 0 && got == 0 ? 0 : -1;
        }
        got += (size_t)n;
    }
    return 1;
}

static bool write_all(int fd, const uint8_t *p, size_t len)
{
    while (len) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return false;
        }
        p += n;
        len -= (size_t)n;
    }
    return true;
}

/* Copy @from to @to until EOF or an error; then FIN on @to. */
static void copy_raw(int from, int to)
{
    g_autofree uint8_t *buf = g_malloc(RELAY_CHUNK);
    ssize_t n;

    while ((n = recv(from, buf, RELAY_CHUNK, 0)) != 0) {
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 || !write_all(to, buf, (size_t)n)) {
            break;
        }
    }
    shutdown(to, SHUT_WR);
}

static void count(struct vg_relay *r, unsigned *field)
{
    g_mutex_lock(&r->lock);
    (*field)++;
    g_mutex_unlock(&r->lock);
}

/* Read the rest of the packet whose header is in @pkt: 1, 0 at EOF, -1 if
 * it does not parse or the stream broke. */
static int read_packet(int fd, GByteArray *pkt, bool *device)
{
    uint32_t normal, size;

    if (be32_at(pkt->data) != MF_MAGIC) {
        return -1;
    }
    *device = be32_at(pkt->data + 8) & MF_FLAG_DEVICE;
    if (*device) {
        if (read_exact(fd, pkt, MF_HDR_SIZE, MF_DEVICE_SIZE - MF_HDR_SIZE) <
            1) {
            return -1;
        }
        size = be32_at(pkt->data + MF_DEVICE_SIZE - 4);
        return size <= MF_MAX_DEVICE && read_exact(fd, pkt, pkt->len, size) > 0
                   ? 1
                   : -1;
    }
    if (read_exact(fd, pkt, MF_HDR_SIZE, MF_RAM_SIZE - MF_HDR_SIZE) < 1) {
        return -1;
    }
    normal = be32_at(pkt->data + 16);
    if (normal > MF_PAGES) {
        return -1;
    }
    return normal == 0 || read_exact(fd, pkt, pkt->len,
                                     (size_t)normal * MF_PAGE_SIZE) > 0
               ? 1
               : -1;
}

/* Close the destination's end of a multifd channel: FIN, or a reset. */
static void close_dst(struct relay_conn *c)
{
    struct linger lg = {.l_onoff = 1, .l_linger = 0};

    g_mutex_lock(&c->relay->lock);
    if (c->relay->reset) {
        setsockopt(c->dst, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
    }
    close(c->dst);
    c->dst = -1;
    g_mutex_unlock(&c->relay->lock);
}

/* What a multifd channel's relay holds back: whole packets, in order. */
struct held {
    GByteArray *bytes;
    unsigned packets;
};

static bool held_flush(struct relay_conn *c, struct held *h)
{
    bool ok = !h->packets || write_all(c->dst, h->bytes->data, h->bytes->len);

    g_byte_array_set_size(h->bytes, 0);
    h->packets = 0;
    return ok;
}

static void held_add(struct held *h, const GByteArray *pkt)
{
    g_byte_array_append(h->bytes, pkt->data, pkt->len);
    h->packets++;
}

/* Pass on the packet @pkt (@device state, or RAM with @flags), or hold it
 * back as @r->drop says. */
static bool relay_packet(struct relay_conn *c, struct held *h,
                         const GByteArray *pkt, bool device, uint32_t flags)
{
    struct vg_relay *r = c->relay;
    bool sync = !device && (flags & MF_FLAG_SYNC);
    bool starts = r->drop == VG_RELAY_DROP_LAST_DEVICE ? device : sync;

    count(r, device ? &r->counts.device_packets
             : sync ? &r->counts.sync_packets
                    : &r->counts.ram_packets);
    if (starts) {
        if (!held_flush(c, h)) {
            return false;
        }
        held_add(h, pkt);
        return true;
    }
    if (r->drop == VG_RELAY_DROP_FROM_LAST_SYNC && h->packets) {
        held_add(h, pkt);
        return true;
    }
    return write_all(c->dst, pkt->data, pkt->len);
}

/* Relay a multifd channel whose first 4 bytes are in @first. */
static void relay_multifd(struct relay_conn *c, GByteArray *first)
{
    g_autoptr(GByteArray) pkt = g_byte_array_new();
    g_autoptr(GByteArray) bytes = g_byte_array_new();
    struct held h = {.bytes = bytes};
    bool device = false;
    int rc;

    if (read_exact(c->src, first, 4, MF_INIT_SIZE - 4) < 1 ||
        !write_all(c->dst, first->data, first->len)) {
        goto out;
    }
    while ((rc = read_exact(c->src, pkt, 0, MF_HDR_SIZE)) > 0 &&
           (rc = read_packet(c->src, pkt, &device)) > 0) {
        if (!relay_packet(c, &h, pkt, device, be32_at(pkt->data + 8))) {
            goto out;
        }
    }
    if (rc < 0) {
        /* Not parsed: pass on what was read and the rest as it comes. */
        count(c->relay, &c->relay->counts.unparsed);
        if (held_flush(c, &h) && write_all(c->dst, pkt->data, pkt->len)) {
            copy_raw(c->src, c->dst);
        }
        goto out;
    }
    g_mutex_lock(&c->relay->lock);
    c->relay->counts.dropped += h.packets;
    g_mutex_unlock(&c->relay->lock);
out:
    close_dst(c);
}

static gpointer relay_down(gpointer opaque)
{
    struct relay_conn *c = opaque;

    copy_raw(c->dst, c->src);
    return NULL;
}

static gpointer relay_up(gpointer opaque)
{
    struct relay_conn *c = opaque;
    g_autoptr(GByteArray) first = g_byte_array_new();

    if (read_exact(c->src, first, 0, 4) > 0 &&
        be32_at(first->data) == MF_MAGIC) {
        count(c->relay, &c->relay->counts.multifd);
        relay_multifd(c, first);
        return NULL;
    }
    c->down = g_thread_new("relay-down", relay_down, c);
    if (first->len && write_all(c->dst, first->data, first->len)) {
        copy_raw(c->src, c->dst);
    } else {
        shutdown(c->dst, SHUT_WR);
    }
    return NULL;
}

/* Connect to the destination and start relaying accepted @src. */
static void relay_conn_start(struct vg_relay *r, int src)
{
    struct relay_conn *c = g_new0(struct relay_conn, 1);

    c->relay = r;
    c->src = src;
    c->dst = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (c->dst < 0 ||
        connect(c->dst, (struct sockaddr *)&r->dst, sizeof(r->dst)) < 0) {
        g_printerr("mig-relay: connect to the destination: %s\n",
                   strerror(errno));
        shutdown(src, SHUT_RDWR);
    }
    g_mutex_lock(&r->lock);
    r->counts.connections++;
    g_ptr_array_add(r->conns, c);
    c->up = g_thread_new("relay-up", relay_up, c);
    g_mutex_unlock(&r->lock);
}

static gpointer relay_accept(gpointer opaque)
{
    struct vg_relay *r = opaque;
    struct pollfd pfd[2] = {{.fd = r->lfd, .events = POLLIN},
                            {.fd = r->stop_pipe[0], .events = POLLIN}};

    while (poll(pfd, 2, -1) >= 0 || errno == EINTR) {
        int fd;

        if (pfd[1].revents) {
            break;
        }
        if (!(pfd[0].revents & POLLIN)) {
            continue;
        }
        fd = accept4(r->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0) {
            relay_conn_start(r, fd);
        }
    }
    return NULL;
}

/* Parse "tcp:A.B.C.D:PORT" into @sa. */
static int parse_uri(const char *uri, struct sockaddr_in *sa,
                     struct vg_error *err)
{
    char host[64];
    unsigned port;
    char end;

    memset(sa, 0, sizeof(*sa));
    sa->sin_family = AF_INET;
    if (sscanf(uri, "tcp:%63[0-9.]:%u%c", host, &port, &end) != 2 ||
        port == 0 || port > 65535 ||
        inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
        return vg_error_set(err, EINVAL,
                            "destination URI %s: not tcp:A.B.C.D:PORT", uri);
    }
    sa->sin_port = htons((uint16_t)port);
    return 0;
}

/* Listen on an ephemeral port of 127.0.0.1; its URI into *@uri. */
static int listen_loopback(int *lfd, char **uri, struct vg_error *err)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) < 0) {
        int e = errno;

        if (fd >= 0) {
            close(fd);
        }
        return vg_error_set(err, e, "relay: listen on 127.0.0.1: %s",
                            strerror(e));
    }
    *lfd = fd;
    *uri = g_strdup_printf("tcp:127.0.0.1:%u", ntohs(sa.sin_port));
    return 0;
}

int vg_relay_start(const char *dst_uri, enum vg_relay_drop drop, bool reset,
                   struct vg_relay **out, char **src_uri, struct vg_error *err)
{
    struct vg_relay *r = g_new0(struct vg_relay, 1);
    int rc = parse_uri(dst_uri, &r->dst, err);

    r->lfd = -1;
    r->stop_pipe[0] = r->stop_pipe[1] = -1;
    if (rc == 0) {
        rc = listen_loopback(&r->lfd, src_uri, err);
    }
    if (rc == 0 && pipe2(r->stop_pipe, O_CLOEXEC) < 0) {
        rc = vg_error_set(err, errno, "relay: pipe: %s", strerror(errno));
        g_clear_pointer(src_uri, g_free);
    }
    if (rc < 0) {
        vg_relay_stop(r);
        return rc;
    }
    r->drop = drop;
    r->reset = reset;
    r->conns = g_ptr_array_new();
    g_mutex_init(&r->lock);
    r->acceptor = g_thread_new("relay-accept", relay_accept, r);
    *out = r;
    return 0;
}

void vg_relay_counts(struct vg_relay *r, struct vg_relay_counts *c)
{
    g_mutex_lock(&r->lock);
    *c = r->counts;
    g_mutex_unlock(&r->lock);
}

static void relay_conn_free(struct relay_conn *c)
{
    g_mutex_lock(&c->relay->lock);
    shutdown(c->src, SHUT_RDWR);
    if (c->dst >= 0) {
        shutdown(c->dst, SHUT_RDWR);
    }
    g_mutex_unlock(&c->relay->lock);
    g_thread_join(c->up);
    if (c->down) {
        g_thread_join(c->down);
    }
    close(c->src);
    if (c->dst >= 0) {
        close(c->dst);
    }
    g_free(c);
}

void vg_relay_stop(struct vg_relay *r)
{
    if (!r) {
        return;
    }
    if (r->acceptor) {
        if (write(r->stop_pipe[1], "x", 1) != 1) {
            g_printerr("mig-relay: waking the acceptor: %s\n", strerror(errno));
        }
        g_thread_join(r->acceptor);
        for (unsigned i = 0; i < r->conns->len; i++) {
            relay_conn_free(g_ptr_array_index(r->conns, i));
        }
        g_ptr_array_free(r->conns, true);
        g_mutex_clear(&r->lock);
    }
    for (unsigned i = 0; i < 2; i++) {
        if (r->stop_pipe[i] >= 0) {
            close(r->stop_pipe[i]);
        }
    }
    if (r->lfd >= 0) {
        close(r->lfd);
    }
    g_free(r);
}
