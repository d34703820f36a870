/*
 * fuzz-sock.c -- fuzz target: a hostile client on a real socket.
 *
 * A fresh in-process vgpu-server per input serves one end of a UNIX
 * stream socketpair with vfu_server_serve_fd() -- the code that serves
 * every accepted client of vgpu-server: its poll loop, receive path
 * (partial headers and bodies, SCM_RIGHTS, the drain of a refused
 * message), replies and disconnect.  A client thread writes the input's
 * messages into the other end in chunks the input picks, passes fds of
 * every kind with them, and reads the replies.  Input format: fuzz.h.
 *
 * Checked beyond "no crash, no sanitizer report, no access to a guard
 * page":
 * - the connection ends within FUZZ_SOCK_MAX_MS (the server never
 *   blocks: its own time limits are longer, so a stall shows);
 * - every reply is well formed (REPLY type, known flags, an error reply
 *   is a bare header with an errno, the size within the limit) and
 *   answers, in order, a request whose header was sent (whole, unless it
 *   is an error reply); requests skipped on the way are ones that may
 *   go unanswered (NO_REPLY), or MIG_DATA_{READ,WRITE}_SHM requests,
 *   which the data plane's thread answers later (vfu-plane.c);
 * - an fd comes only with a successful REGION_INFO or MIG_DATA_SHM
 *   reply, one at a time;
 * - when the client reads to the end, every complete request that asks
 *   for a reply got one, unless a VERSION before it (the only request
 *   that disconnects) may have ended the connection;
 * - once the connection is over, the process holds the file descriptors
 *   (counted in /proc/self/fd) and shared mappings it held before it;
 *   after the server is freed, those before the server.
 */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "fuzz.h"
#include "vfio-user/vfu-msg.h"
#include "vfio-user/vfu-proto.h"
#include "vfio-user/vfu-server.h"

#define MAX_MSG   ((1u << 20) + 64u) /* the server's message limit */
#define MAX_FDS   15u                /* what the error field can ask for */
#define RX_FDS    16u                /* room for fds in a reply */
#define HDR       sizeof(struct vfu_hdr)
#define SINK_SIZE 65536u

/* One message as the harness frames the input (the server frames it the
 * same way: by the header's size). */
struct msg {
    size_t off;          /* in the outgoing bytes */
    size_t len;          /* of it there: below hdr.size if cut short */
    struct vfu_hdr hdr;  /* as sent: error field zeroed */
    unsigned nfds, kind; /* fds it carries */
    bool fill;           /* the body is zero bytes made by the harness */
    bool done;           /* answered */
};

struct client {
    int sock;       /* our end; -1 once closed */
    int ram, loose; /* guest RAM memfds the fds may be */
    unsigned flags, chunking;
    uint64_t rnd;
    uint8_t *out; /* the bytes to send */
    size_t out_len, out_cap;
    struct msg *msgs;
    size_t nmsgs, msgs_cap;
    size_t sent;             /* bytes of out written */
    size_t wmsg;             /* the message that byte `sent` belongs to */
    size_t chunk_left;       /* of the current write */
    bool write_done;         /* all sent, or the server hung up */
    bool eof;                /* the server closed its end */
    uint8_t rhdr[HDR];       /* the reply header being read */
    size_t rhave;            /* bytes of it */
    uint64_t rbody;          /* body bytes of the reply still to read */
    bool rfd;                /* an fd came with this reply */
    size_t answered;         /* messages before this index are done with */
    bool last_version_error; /* the last reply: an error reply to VERSION */
    size_t replies;
    int64_t start;      /* ms */
    pthread_mutex_t mu; /* protects served */
    pthread_cond_t cv;
    bool served; /* vfu_server_serve_fd() returned */
};

static uint8_t sink[SINK_SIZE]; /* reply bodies; the client thread's */

static void fail(const struct client *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

/* A failed check: what, and where the connection was. */
static void fail(const struct client *c, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "fuzz-sock: ");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (c) {
        fprintf(stderr,
                " (%zu of %zu bytes sent, %zu messages, %zu replies, %zu "
                "answered)",
                c->sent, c->out_len, c->nmsgs, c->replies, c->answered);
    }
    fprintf(stderr, "\n");
    abort();
}

static int64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void *grow(void *p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) {
        return p;
    }
    *cap = need * 2;
    p = realloc(p, *cap * elem);
    if (!p) {
        fail(NULL, "out of memory for %zu elements of %zu bytes", *cap, elem);
    }
    return p;
}

/* Append @len bytes of @p (NULL: zero bytes) to the outgoing bytes. */
static void out_put(struct client *c, const void *p, size_t len)
{
    if (len == 0) {
        return; /* c->out may still be NULL */
    }
    c->out = grow(c->out, &c->out_cap, c->out_len + len, 1);
    if (p) {
        memcpy(c->out + c->out_len, p, len);
    } else {
        memset(c->out + c->out_len, 0, len);
    }
    c->out_len += len;
}

/* ------------------------------------------------------------ framing */

/* The message whose header is at @data: its body from the input (or
 * zero bytes); returns the input bytes it took, 0 if it is the last. */
static size_t frame_one(struct client *c, const uint8_t *data, size_t avail,
                        size_t *filled)
{
    struct msg m = {.off = c->out_len};
    uint64_t body;
    size_t take;

    memcpy(&m.hdr, data, HDR);
    m.nfds = m.hdr.error & FUZZ_VFU_NFDS;
    m.kind = (m.hdr.error >> FUZZ_VFU_FD_SHIFT) & 0xf;
    m.fill = m.hdr.error & FUZZ_SOCK_FILL;
    m.hdr.error = 0;
    out_put(c, &m.hdr, HDR);
    body = m.hdr.size < HDR ? 0 : m.hdr.size - HDR;
    if (m.fill) {
        take = body;
        if (take > FUZZ_SOCK_FILL_MAX ||
            take > FUZZ_SOCK_FILL_TOTAL - *filled) {
            take = 0; /* too much: the header alone, cut short */
        }
        *filled += take;
        out_put(c, NULL, take);
    } else {
        take = body < avail - HDR ? (size_t)body : avail - HDR;
        out_put(c, data + HDR, take);
    }
    m.len = HDR + take;
    c->msgs = grow(c->msgs, &c->msgs_cap, c->nmsgs + 1, sizeof(m));
    c->msgs[c->nmsgs++] = m;
    if (m.hdr.size < HDR || m.len < m.hdr.size) {
        return 0; /* the server cannot frame past it, or the end */
    }
    return m.fill ? HDR : m.len;
}

/* The input's messages into out/msgs; bytes after the last whole header
 * follow as a partial one. */
static void frame(struct client *c, const uint8_t *data, size_t size)
{
    size_t pos = 0, filled = 0;

    while (size - pos >= HDR) {
        size_t n = frame_one(c, data + pos, size - pos, &filled);
        if (n == 0) {
            return;
        }
        pos += n;
    }
    out_put(c, data + pos, size - pos);
}

/* ------------------------------------------------------------ sending */

static uint64_t next_rand(uint64_t *x)
{
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    return *x;
}

static const struct msg *cur_msg(const struct client *c)
{
    return c->wmsg < c->nmsgs ? &c->msgs[c->wmsg] : NULL;
}

/* The size of the next write as the chunking says, from `sent`. */
static size_t draw_chunk(struct client *c)
{
    const struct msg *m = cur_msg(c);
    size_t left = c->out_len - c->sent;

    if (m && m->fill && c->sent >= m->off + HDR) {
        return m->off + m->len - c->sent; /* filler: all at once */
    }
    if (c->chunking == 0 || (c->chunking == 1 && !m)) {
        return left;
    }
    if (c->chunking == 1) {
        return m->off + m->len - c->sent;
    }
    return 1 + (size_t)(next_rand(&c->rnd) % (1ull << (c->chunking % 21)));
}

/* @n bytes from `sent`, cut before the next message that carries fds:
 * those go with the write that starts it. */
static size_t cut_at_fds(const struct client *c, size_t n)
{
    if (n > c->out_len - c->sent) {
        n = c->out_len - c->sent;
    }
    for (size_t k = c->wmsg + 1; k < c->nmsgs; k++) {
        const struct msg *m = &c->msgs[k];
        if (m->off >= c->sent + n) {
            break;
        }
        if (m->nfds) {
            return m->off - c->sent;
        }
    }
    return n;
}

/* sendmsg @n bytes from `sent` with @nfds new fds of @m's kind. */
static ssize_t send_chunk(struct client *c, size_t n, const struct msg *m,
                          unsigned nfds)
{
    union {
        char buf[CMSG_SPACE(MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = c->out + c->sent, .iov_len = n};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    int fds[MAX_FDS];
    ssize_t ret;

    for (unsigned i = 0; i < nfds; i++) {
        fds[i] = fuzz_new_fd(m->kind, m->hdr.command, c->ram, c->loose);
    }
    if (nfds) {
        struct cmsghdr *cm;
        mh.msg_control = ctl.buf;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        cm = CMSG_FIRSTHDR(&mh);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(cm), fds, nfds * sizeof(int));
    }
    ret = sendmsg(c->sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
    for (unsigned i = 0; i < nfds; i++) {
        close(fds[i]); /* in flight now, or not sent */
    }
    return ret;
}

/* All sent: hang up (FUZZ_SOCK_CLOSE) or stop sending and read on. */
static void end_writing(struct client *c)
{
    c->write_done = true;
    if (c->flags & FUZZ_SOCK_CLOSE) {
        close(c->sock);
        c->sock = -1;
    } else if (shutdown(c->sock, SHUT_WR) < 0 && errno != ENOTCONN) {
        fail(c, "shutdown: %s", strerror(errno));
    }
}

/* Write what the socket takes now. */
static void write_some(struct client *c)
{
    while (c->sent < c->out_len) {
        const struct msg *m = cur_msg(c);
        unsigned nfds = m && m->off == c->sent ? m->nfds : 0;
        ssize_t n;

        if (c->chunk_left == 0) {
            c->chunk_left = draw_chunk(c);
        }
        c->chunk_left = cut_at_fds(c, c->chunk_left);
        n = send_chunk(c, c->chunk_left, m, nfds);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            c->write_done = true; /* the server hung up */
            return;
        }
        if (n <= 0) {
            fail(c, "sendmsg of %zu bytes: %s", c->chunk_left,
                 n < 0 ? strerror(errno) : "nothing sent");
        }
        c->sent += (size_t)n;
        c->chunk_left -= (size_t)n;
        while (c->wmsg < c->nmsgs &&
               c->sent >= c->msgs[c->wmsg].off + c->msgs[c->wmsg].len) {
            c->wmsg++;
        }
    }
    end_writing(c);
}

/* ------------------------------------------------------------ replies */

/* Whether the server may leave @m unanswered: it asked for no reply and
 * the server does not refuse its header (a refused message is answered
 * anyway). */
static bool may_skip(const struct msg *m)
{
    struct vfu_limits lim = {.max_msg_size = MAX_MSG};
    struct vg_error err;

    return (m->hdr.flags & VFU_FLAG_NO_REPLY) &&
           vfu_hdr_check(&m->hdr, &lim, &err) == 0;
}

static void check_header(const struct client *c, const struct vfu_hdr *h)
{
    bool error = h->flags & VFU_FLAG_ERROR;

    if ((h->flags & ~VFU_FLAG_ERROR) != VFU_FLAG_REPLY) {
        fail(c, "reply %u (command %u): flags 0x%x", h->id, h->command,
             h->flags);
    }
    if (h->size < HDR || h->size > MAX_MSG) {
        fail(c, "reply %u (command %u): size %u", h->id, h->command, h->size);
    }
    if (error ? h->error == 0 || h->size != HDR : h->error != 0) {
        fail(c, "reply %u (command %u): error flag %d, errno %u, size %u",
             h->id, h->command, error, h->error, h->size);
    }
}

/* Whether @m goes to the data plane's thread, whose replies may come
 * after those of later requests. */
static bool on_plane(const struct msg *m)
{
    return m->hdr.command == VFU_CMD_MIG_DATA_READ_SHM ||
           m->hdr.command == VFU_CMD_MIG_DATA_WRITE_SHM;
}

/* Request @k was answered: move c->answered past what is done with. */
static void mark_answered(struct client *c, size_t k)
{
    c->msgs[k].done = true;
    while (c->answered < c->nmsgs) {
        const struct msg *a = &c->msgs[c->answered];

        if (!a->done && !(c->answered < k && may_skip(a))) {
            break;
        }
        c->answered++;
    }
}

/* The request @h answers: the next one with its id and command that
 * gets a reply at all (the server never answers a NO_REPLY request whose
 * header it accepts, not even with an error; ids may repeat), past data
 * plane requests still unanswered. */
static void match_request(struct client *c, const struct vfu_hdr *h)
{
    for (size_t k = c->answered; k < c->nmsgs; k++) {
        struct msg *m = &c->msgs[k];
        size_t need = m->off + (h->flags & VFU_FLAG_ERROR ? HDR : m->len);

        if (m->done) {
            continue;
        }
        if (m->hdr.id != h->id || m->hdr.command != h->command || may_skip(m)) {
            if (!may_skip(m) && !on_plane(m)) {
                fail(c,
                     "reply %u (command %u) while request %zu (id %u, "
                     "command %u) is unanswered",
                     h->id, h->command, k, m->hdr.id, m->hdr.command);
            }
            continue;
        }
        if (c->sent < need ||
            (!(h->flags & VFU_FLAG_ERROR) && m->len != m->hdr.size)) {
            fail(c, "reply %u (command %u) to request %zu, not all sent", h->id,
                 h->command, k);
        }
        mark_answered(c, k);
        c->last_version_error =
            (h->flags & VFU_FLAG_ERROR) && h->command == VFU_CMD_VERSION;
        return;
    }
    fail(c, "reply %u (command %u, size %u) to no request sent", h->id,
         h->command, h->size);
}

static void reply_header(struct client *c)
{
    struct vfu_hdr h;

    memcpy(&h, c->rhdr, HDR);
    check_header(c, &h);
    match_request(c, &h);
    if (c->rfd && ((h.command != VFU_CMD_DEVICE_GET_REGION_INFO &&
                    h.command != VFU_CMD_MIG_DATA_SHM) ||
                   (h.flags & VFU_FLAG_ERROR))) {
        fail(c, "an fd came with reply %u (command %u, flags 0x%x)", h.id,
             h.command, h.flags);
    }
    c->rfd = false;
    c->rbody = h.size - HDR;
    c->replies++;
}

/* Close the fds that came with a read; only one, at a reply's start. */
static void take_fds(struct client *c, struct msghdr *mh, bool at_start)
{
    unsigned n = 0;

    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm; cm = CMSG_NXTHDR(mh, cm)) {
        size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
            close(fd);
            n++;
        }
    }
    if (n && (!at_start || n != 1 || (mh->msg_flags & MSG_CTRUNC))) {
        fail(c, "%u fds with reply bytes at offset %zu (flags 0x%x)", n,
             c->rhave, mh->msg_flags);
    }
    c->rfd |= n != 0;
}

/* Read one piece of a reply, never past its end. */
static bool read_piece(struct client *c)
{
    union {
        char buf[CMSG_SPACE(RX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    bool in_hdr = c->rbody == 0;
    size_t want =
        in_hdr ? HDR - c->rhave : (c->rbody < SINK_SIZE ? c->rbody : SINK_SIZE);
    struct iovec iov = {.iov_base = in_hdr ? c->rhdr + c->rhave : sink,
                        .iov_len = want};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    ssize_t n = recvmsg(c->sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return false;
    }
    if (n <= 0) { /* ECONNRESET: it hung up with our bytes unread */
        if (n < 0 && errno != ECONNRESET) {
            fail(c, "recvmsg: %s", strerror(errno));
        }
        if (c->rhave || c->rbody) {
            fail(c,
                 "the server hung up mid-reply (%zu header bytes, %llu "
                 "body bytes to come)",
                 c->rhave, (unsigned long long)c->rbody);
        }
        c->eof = true;
        return false;
    }
    take_fds(c, &mh, in_hdr && c->rhave == 0);
    if (!in_hdr) {
        c->rbody -= (uint64_t)n;
    } else if ((c->rhave += (size_t)n) == HDR) {
        reply_header(c);
        c->rhave = 0;
    }
    return true;
}

/* ------------------------------------------------------------- client */

/* The server hung up after the client read everything: each complete
 * request that wants a reply got one, unless a VERSION (the one request
 * that disconnects) since the last reply may have ended it. */
static void check_complete(const struct client *c)
{
    bool version = c->last_version_error;

    for (size_t k = c->answered; k < c->nmsgs; k++) {
        const struct msg *m = &c->msgs[k];
        bool complete = m->hdr.size >= HDR && m->len == m->hdr.size &&
                        m->off + m->len <= c->sent;

        if (m->done) {
            continue;
        }
        if (version || !complete) {
            return;
        }
        if (!may_skip(m)) {
            fail(c,
                 "request %zu (id %u, command %u, %u bytes) sent whole, "
                 "no reply before the server hung up",
                 k, m->hdr.id, m->hdr.command, m->hdr.size);
        }
        version = m->hdr.command == VFU_CMD_VERSION;
    }
}

static void read_replies(struct client *c)
{
    while (c->sock >= 0 && !c->eof && read_piece(c)) {
    }
}

/* Until the server hangs up (or, with FUZZ_SOCK_CLOSE, we did). */
static void client_io(struct client *c)
{
    while (c->sock >= 0 && !c->eof) {
        struct pollfd pfd = {.fd = c->sock,
                             .events = POLLIN | (c->write_done ? 0 : POLLOUT)};
        int64_t left = c->start + FUZZ_SOCK_MAX_MS - now_ms();

        if (left <= 0) {
            fail(c, "the connection is still open after %d ms",
                 FUZZ_SOCK_MAX_MS);
        }
        if (poll(&pfd, 1, (int)left) < 0 && errno != EINTR) {
            fail(c, "poll: %s", strerror(errno));
        }
        read_replies(c);
        if (!c->write_done && c->sock >= 0) {
            write_some(c);
        }
    }
}

/* The client thread: talk, check, then watch the server finish. */
static void *client_main(void *opaque)
{
    struct client *c = opaque;
    struct timespec until;
    int64_t end = c->start + FUZZ_SOCK_MAX_MS;

    client_io(c);
    if (c->eof) {
        check_complete(c);
    }
    until = (struct timespec){.tv_sec = end / 1000,
                              .tv_nsec = (long)(end % 1000) * 1000000};
    pthread_mutex_lock(&c->mu);
    while (!c->served) {
        if (pthread_cond_timedwait(&c->cv, &c->mu, &until) == ETIMEDOUT &&
            !c->served) {
            fail(c, "the server still serves the connection after %d ms",
                 FUZZ_SOCK_MAX_MS);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static void client_init(struct client *c, const uint8_t *data, size_t size,
                        int sock)
{
    pthread_condattr_t ca;

    memset(c, 0, sizeof(*c));
    c->sock = sock;
    c->flags = data[0];
    c->chunking = data[1];
    c->rnd = 0x9e3779b97f4a7c15ull ^ data[1] ^ (uint64_t)data[2] << 8 ^
             (uint64_t)data[3] << 16;
    c->ram = fuzz_ram_fd(true);
    c->loose = fuzz_ram_fd(false);
    frame(c, data + FUZZ_SOCK_PREFIX, size - FUZZ_SOCK_PREFIX);
    c->start = now_ms();
    pthread_mutex_init(&c->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->cv, &ca);
    pthread_condattr_destroy(&ca);
}

static void client_free(struct client *c)
{
    if (c->sock >= 0) {
        close(c->sock);
    }
    close(c->ram);
    close(c->loose);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
    free(c->out);
    free(c->msgs);
}

/* -------------------------------------------------------------- server */

static void setup_once(void)
{
    static bool done;

    if (!done) {
        done = true;
        vg_log_set_prog("fuzz-sock");
        fuzz_log_level();
    }
}

/* Open file descriptors, from /proc/self/fd (its own included). */
static size_t count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    size_t n = 0;

    if (!d) {
        fail(NULL, "/proc/self/fd: %s", strerror(errno));
    }
    while ((e = readdir(d))) {
        n += e->d_name[0] != '.';
    }
    closedir(d);
    return n;
}

static struct vfu_server *server_new(unsigned flags)
{
    struct vfu_server_config cfg = {
        .socket_path = NULL,
        .gpu = {.vram_size = FUZZ_VRAM, .page_size = FUZZ_PAGE},
    };
    struct vfu_server *srv;
    struct vg_error err;

    if (flags & FUZZ_SOCK_BIG) {
        cfg.gpu = (struct vgpu_config){.vram_size = FUZZ_VRAM_64K,
                                       .page_size = FUZZ_PAGE_64K};
    }
    if (vfu_server_new(&cfg, &srv, &err) < 0) {
        fail(NULL, "server: %s", err.msg);
    }
    return srv;
}

/* Serve @sock while the client thread talks on @peer. */
static void connection(struct vfu_server *srv, const uint8_t *data, size_t size)
{
    static struct client c; /* large; one input at a time */
    struct vg_error err;
    pthread_t th;
    int sv[2], ret;

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        fail(NULL, "socketpair: %s", strerror(errno));
    }
    client_init(&c, data, size, sv[0]);
    if ((ret = pthread_create(&th, NULL, client_main, &c)) != 0) {
        fail(NULL, "pthread_create: %s", strerror(ret));
    }
    ret = vfu_server_serve_fd(srv, sv[1], -1, &err);
    pthread_mutex_lock(&c.mu);
    c.served = true;
    pthread_cond_signal(&c.cv);
    pthread_mutex_unlock(&c.mu);
    pthread_join(th, NULL);
    if (ret != 0) {
        fail(&c, "serve: returned %d: %s", ret, ret < 0 ? err.msg : "");
    }
    if (now_ms() - c.start >= FUZZ_SOCK_MAX_MS) {
        fail(&c, "the connection took %lld ms",
             (long long)(now_ms() - c.start));
    }
    client_free(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct vfu_server *srv;
    size_t fds0, fds1, maps1;

    setup_once();
    if (size < FUZZ_SOCK_PREFIX || size > FUZZ_MAX_INPUT) {
        return 0;
    }
    fds0 = count_fds();
    srv = server_new(data[0]);
    fds1 = count_fds();
    maps1 = fuzz_guarded_maps();
    connection(srv, data, size);
    if (count_fds() != fds1 || fuzz_guarded_maps() != maps1) {
        fail(NULL,
             "after the connection: %zu fds (%zu before), %zu shared "
             "mappings (%zu before)",
             count_fds(), fds1, fuzz_guarded_maps(), maps1);
    }
    vfu_server_free(srv);
    if (count_fds() != fds0 || fuzz_guarded_maps() != 0) {
        fail(NULL, "server freed: %zu fds (%zu before), %zu shared mappings",
             count_fds(), fds0, fuzz_guarded_maps());
    }
    return 0;
}
