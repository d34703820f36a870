/*
 * pc-src.c -- the source's page server of a post-copy migration (see
 * pc-src.h; the channel is pc-wire.h).  One thread: accept, admit the
 * destination with the token, serve its requests in order.
 */
#include "pc-src.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "mig-stream.h"
#include "common/hash.h"
#include "common/log.h"

/* How long a connection may take to show the token. */
#define HELLO_TIMEOUT_S 5

struct pc_src {
    const uint8_t *vram;
    int (*read)(void *opaque, uint64_t off, void *dst, uint64_t len,
                struct vg_error *err);
    void *read_opaque;
    uint8_t *buf; /* a reply's pages, where VRAM is not mapped here */
    uint64_t npages;
    uint32_t page_size;
    uint32_t hash_version;
    unsigned delay_ms;
    uint64_t *pending;
    char path[PC_ADDR_MAX]; /* the address: a path, or "tcp:HOST:PORT" */
    bool unix_socket;       /* @path is a socket file to remove */
    uint8_t token[PC_TOKEN_SIZE];
    int listen_fd;
    int stop_fd; /* eventfd: pc_src_free() asks the thread to end */
    int conn_fd; /* the admitted destination, -1 before */
    pthread_t thread;
    pthread_mutex_t lock; /* guards stats and ended */
    pthread_cond_t ended_cond;
    bool ended;
    struct pc_src_stats stats;
};

static void note_end(struct pc_src *s, const struct vg_error *err)
{
    pthread_mutex_lock(&s->lock);
    if (err && err->code) {
        snprintf(s->stats.error, sizeof(s->stats.error), "%s", err->msg);
    }
    s->ended = true;
    pthread_cond_broadcast(&s->ended_cond);
    pthread_mutex_unlock(&s->lock);
}

/* Pages [@first, +@count) of VRAM (@count * page size at most
 * PC_REQ_MAX_BYTES where VRAM is not mapped here). */
static const uint8_t *pages(struct pc_src *s, uint64_t first, uint32_t count,
                            struct vg_error *err)
{
    uint64_t off = first * s->page_size;

    if (s->vram) {
        return s->vram + off;
    }
    if (s->read(s->read_opaque, off, s->buf, (uint64_t)count * s->page_size,
                err) < 0) {
        return NULL;
    }
    return s->buf;
}

/* XXH3-64 of the page hashes of the pending pages, in page order. */
static int pending_digest(struct pc_src *s, uint64_t *digest,
                          struct vg_error *err)
{
    struct vg_digest *st = vg_digest_new();
    uint32_t run = PC_REQ_MAX_BYTES / s->page_size;
    int ret = 0;

    if (!st) {
        return vg_error_set(err, ENOMEM,
                            "no memory for the pending pages' digest");
    }
    run = run ? run : 1;
    vg_digest_reset(st, 0);
    for (uint64_t p = 0; ret == 0 && p < s->npages; p += run) {
        uint32_t n = s->npages - p < run ? (uint32_t)(s->npages - p) : run;
        const uint8_t *data = pages(s, p, n, err);

        for (uint32_t i = 0; data && i < n; i++) {
            if (s->pending[(p + i) / 64] >> ((p + i) % 64) & 1) {
                uint64_t h = mig_stream_page_hash(
                    s->hash_version, data + (uint64_t)i * s->page_size,
                    s->page_size, NULL);

                vg_digest_update(st, &h, sizeof(h));
            }
        }
        ret = data ? 0 : -err->code;
    }
    *digest = vg_digest_value(st);
    vg_digest_free(st);
    return ret;
}

static int send_welcome(struct pc_src *s, struct vg_error *err)
{
    uint64_t bytes = pc_bitmap_bytes(s->npages);
    struct pc_welcome w = {
        .magic = PC_MAGIC,
        .npages = s->npages,
        .pending = s->stats.pending,
        .page_size = s->page_size,
        .bitmap_hash = XXH3_64bits(s->pending, bytes),
    };
    struct iovec iov[2] = {{&w, sizeof(w)}, {s->pending, bytes}};

    return pc_send(s->conn_fd, iov, 2, err);
}

static int serve_pages(struct pc_src *s, const struct pc_req *req,
                       struct vg_error *err)
{
    uint64_t max = PC_REQ_MAX_BYTES / s->page_size;
    struct pc_data d = {.first = req->first, .count = req->count};
    const uint8_t *data;
    uint64_t len = (uint64_t)req->count * s->page_size;
    struct iovec iov[2] = {{&d, sizeof(d)}, {NULL, len}};

    if (req->count == 0 || req->count > (max ? max : 1) ||
        req->first >= s->npages || req->count > s->npages - req->first) {
        return vg_error_set(err, ERANGE,
                            "request of %u pages at page %" PRIu64
                            " outside VRAM (%" PRIu64 " pages, %" PRIu64
                            " at most)",
                            req->count, req->first, s->npages, max ? max : 1);
    }
    if (s->delay_ms) {
        usleep(s->delay_ms * 1000u);
    }
    data = pages(s, req->first, req->count, err);
    if (!data) {
        return -err->code;
    }
    iov[1].iov_base = (void *)data;
    d.hash = XXH3_64bits(data, len);
    pthread_mutex_lock(&s->lock);
    s->stats.requests++;
    s->stats.pages_served += req->count;
    pthread_mutex_unlock(&s->lock);
    return pc_send(s->conn_fd, iov, 2, err);
}

static int serve_done(struct pc_src *s, struct vg_error *err)
{
    struct pc_fin fin = {0};
    struct iovec iov = {&fin, sizeof(fin)};
    int ret = pending_digest(s, &fin.vram_checksum, err);

    if (ret < 0) {
        return ret;
    }
    pthread_mutex_lock(&s->lock);
    s->stats.finished = true;
    pthread_mutex_unlock(&s->lock);
    return pc_send(s->conn_fd, &iov, 1, err);
}

static int serve(struct pc_src *s, struct vg_error *err)
{
    int ret = send_welcome(s, err);

    while (ret == 0) {
        struct pc_req req;

        ret = pc_recv(s->conn_fd, &req, sizeof(req), err);
        if (ret < 0) {
            break;
        }
        if (req.op == PC_OP_DONE) {
            return serve_done(s, err);
        }
        if (req.op != PC_OP_PAGES) {
            return vg_error_set(err, EPROTO, "unknown request %u", req.op);
        }
        ret = serve_pages(s, &req, err);
    }
    return ret;
}

/* Read the hello of @fd: true if it shows our token. */
static bool admit(struct pc_src *s, int fd)
{
    struct timeval tv = {.tv_sec = HELLO_TIMEOUT_S};
    struct pc_hello h;
    struct vg_error err = {0};

    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    if (pc_recv(fd, &h, sizeof(h), &err) < 0) {
        vg_warn("post-copy page server: a connection sent no hello: %s",
                err.msg);
        return false;
    }
    if (h.magic != PC_MAGIC || h.version != PC_VERSION ||
        memcmp(h.token, s->token, PC_TOKEN_SIZE) != 0) {
        vg_warn("post-copy page server: refused a connection (magic %#" PRIx64
                ", version %u, %s token)",
                h.magic, h.version,
                memcmp(h.token, s->token, PC_TOKEN_SIZE) ? "wrong" : "right");
        return false;
    }
    tv.tv_sec = 0;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return true;
}

/* Accept until a destination shows the token; -1 if asked to stop. */
static int accept_destination(struct pc_src *s)
{
    struct pollfd pfd[2] = {{s->listen_fd, POLLIN, 0}, {s->stop_fd, POLLIN, 0}};

    for (;;) {
        int fd;

        if (poll(pfd, 2, -1) < 0 && errno != EINTR) {
            return -1;
        }
        if (pfd[1].revents) {
            return -1;
        }
        if (!(pfd[0].revents & POLLIN)) {
            continue;
        }
        fd = accept4(s->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            continue;
        }
        if (!s->unix_socket) {
            int one = 1;

            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        }
        if (admit(s, fd)) {
            return fd;
        }
        close(fd);
    }
}

/* Serve the destination on @fd until it has every page (true) or the
 * channel breaks (false, the error in the statistics). */
static bool serve_connection(struct pc_src *s, int fd)
{
    struct vg_error err = {0};
    bool again;

    pthread_mutex_lock(&s->lock);
    s->conn_fd = fd;
    again = s->stats.claimed;
    s->stats.claimed = true;
    pthread_mutex_unlock(&s->lock);
    vg_info("post-copy: destination %sconnected, %" PRIu64 " pages pending",
            again ? "re" : "", s->stats.pending);
    if (serve(s, &err) == 0) {
        vg_info("post-copy: the destination has every page (%" PRIu64
                " served in %" PRIu64 " requests)",
                s->stats.pages_served, s->stats.requests);
        return true;
    }
    vg_err("post-copy page server: %s", err.msg);
    pthread_mutex_lock(&s->lock);
    snprintf(s->stats.error, sizeof(s->stats.error), "%s", err.msg);
    s->conn_fd = -1;
    pthread_mutex_unlock(&s->lock);
    close(fd);
    return false;
}

/* Serve destinations that show the token until one has every page; a
 * channel that breaks waits for the destination to connect again (a
 * network cut that heals) until pc_src_free(). */
static void *src_thread(void *opaque)
{
    struct pc_src *s = opaque;

    for (;;) {
        int fd = accept_destination(s);

        if (fd < 0 || serve_connection(s, fd)) {
            break;
        }
        vg_warn("post-copy page server: waiting for the destination to "
                "connect again");
    }
    note_end(s, NULL);
    return NULL;
}

static int make_unix_socket(struct pc_src *s, const char *dir,
                            struct vg_error *err)
{
    static unsigned seq;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int n = snprintf(s->path, sizeof(s->path), "%s/vgpu-pages-%d-%u.sock", dir,
                     (int)getpid(), __atomic_fetch_add(&seq, 1, 0));

    if (n < 0 || (size_t)n >= sizeof(sa.sun_path)) {
        return vg_error_set(err, ENAMETOOLONG,
                            "page server socket path in '%s' is too long", dir);
    }
    memcpy(sa.sun_path, s->path, (size_t)n + 1);
    unlink(s->path);
    s->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s->listen_fd < 0 ||
        bind(s->listen_fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
        listen(s->listen_fd, 4) < 0) {
        return vg_error_set(err, errno, "page server socket %s: %s", s->path,
                            strerror(errno));
    }
    s->unix_socket = true;
    return 0;
}

/* Listen on @host, port picked by the kernel; the address is
 * "tcp:HOST:PORT" with the host as given (an IPv6 address bracketed). */
static int make_tcp_socket(struct pc_src *s, const char *host,
                           struct vg_error *err)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE},
                    *ai = NULL;
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    int rc = getaddrinfo(host, "0", &hints, &ai), one = 1, port;

    if (rc) {
        return vg_error_set(err, EINVAL, "page server host '%s': %s", host,
                            gai_strerror(rc));
    }
    s->listen_fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    rc = s->listen_fd < 0 ||
         setsockopt(s->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) <
             0 ||
         bind(s->listen_fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
         listen(s->listen_fd, 4) < 0 ||
         getsockname(s->listen_fd, (struct sockaddr *)&ss, &len) < 0;
    freeaddrinfo(ai);
    if (rc) {
        return vg_error_set(err, errno, "page server on %s: %s", host,
                            strerror(errno));
    }
    port =
        ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                       : ((struct sockaddr_in *)&ss)->sin_port);
    rc = snprintf(s->path, sizeof(s->path),
                  strchr(host, ':') ? "tcp:[%s]:%d" : "tcp:%s:%d", host, port);
    if (rc < 0 || (size_t)rc >= sizeof(s->path)) {
        return vg_error_set(err, ENAMETOOLONG,
                            "page server host '%s' is too "
                            "long",
                            host);
    }
    return 0;
}

static int src_init(struct pc_src *s, const struct pc_src_config *cfg,
                    struct vg_error *err)
{
    uint64_t bytes = pc_bitmap_bytes(cfg->npages);

    s->pending = malloc(bytes);
    if (!s->pending) {
        return vg_error_set(err, ENOMEM, "no memory for the pending bitmap");
    }
    memcpy(s->pending, cfg->pending, bytes);
    if (!s->vram &&
        (!s->read || !(s->buf = malloc(PC_REQ_MAX_BYTES + cfg->page_size)))) {
        return vg_error_set(err, ENOMEM,
                            "no way to read VRAM for the page "
                            "server");
    }
    for (uint64_t w = 0; w < bytes / 8; w++) {
        s->stats.pending += (uint64_t)__builtin_popcountll(s->pending[w]);
    }
    if (getrandom(s->token, sizeof(s->token), 0) != sizeof(s->token)) {
        return vg_error_set(err, errno, "getrandom: %s", strerror(errno));
    }
    s->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (s->stop_fd < 0) {
        return vg_error_set(err, errno, "eventfd: %s", strerror(errno));
    }
    return cfg->tcp_host ? make_tcp_socket(s, cfg->tcp_host, err)
                         : make_unix_socket(s, cfg->dir, err);
}

int pc_src_start(const struct pc_src_config *cfg, struct pc_src **out,
                 struct vg_error *err)
{
    struct pc_src *s = calloc(1, sizeof(*s));
    int ret;

    if (!s) {
        return vg_error_set(err, ENOMEM, "no memory for the page server");
    }
    s->vram = cfg->vram;
    s->read = cfg->read;
    s->read_opaque = cfg->read_opaque;
    s->npages = cfg->npages;
    s->page_size = cfg->page_size;
    s->hash_version = cfg->hash_version;
    s->delay_ms = cfg->delay_ms;
    s->listen_fd = s->stop_fd = s->conn_fd = -1;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->ended_cond, NULL);
    ret = src_init(s, cfg, err);
    if (ret == 0 && (ret = -pthread_create(&s->thread, NULL, src_thread, s))) {
        vg_error_set(err, -ret, "page server thread: %s", strerror(-ret));
    } else if (ret == 0) {
        pthread_setname_np(s->thread, "vgs/pc-serve");
    }
    if (ret < 0) {
        s->thread = 0;
        pc_src_free(s);
        return ret;
    }
    *out = s;
    return 0;
}

void pc_src_free(struct pc_src *s)
{
    uint64_t one = 1;

    if (!s) {
        return;
    }
    if (s->thread) {
        pthread_mutex_lock(&s->lock);
        if (s->conn_fd >= 0) {
            shutdown(s->conn_fd, SHUT_RDWR);
        }
        pthread_mutex_unlock(&s->lock);
        if (write(s->stop_fd, &one, sizeof(one)) < 0) {
            vg_warn("post-copy page server: cannot signal stop");
        }
        pthread_join(s->thread, NULL);
    }
    if (s->conn_fd >= 0) {
        close(s->conn_fd);
    }
    if (s->listen_fd >= 0) {
        close(s->listen_fd);
    }
    if (s->unix_socket) {
        unlink(s->path);
    }
    if (s->stop_fd >= 0) {
        close(s->stop_fd);
    }
    pthread_mutex_destroy(&s->lock);
    pthread_cond_destroy(&s->ended_cond);
    free(s->pending);
    free(s->buf);
    free(s);
}

const char *pc_src_address(const struct pc_src *s)
{
    return s->path;
}

void pc_src_token(const struct pc_src *s, uint8_t token[PC_TOKEN_SIZE])
{
    memcpy(token, s->token, PC_TOKEN_SIZE);
}

void pc_src_get_stats(struct pc_src *s, struct pc_src_stats *st)
{
    pthread_mutex_lock(&s->lock);
    *st = s->stats;
    pthread_mutex_unlock(&s->lock);
}

bool pc_src_wait(struct pc_src *s, int timeout_ms)
{
    struct timespec until;
    bool ended;

    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (until.tv_nsec >= 1000000000) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000;
    }
    pthread_mutex_lock(&s->lock);
    while (!s->ended) {
        if (timeout_ms < 0) {
            pthread_cond_wait(&s->ended_cond, &s->lock);
        } else if (pthread_cond_timedwait(&s->ended_cond, &s->lock, &until)) {
            break;
        }
    }
    ended = s->ended && s->stats.finished;
    pthread_mutex_unlock(&s->lock);
    return ended;
}
