/* Unit tests for the post-copy page channel (vfio-migration/pc-src.c,
 * pc-dst.c, uffd.c) in one process, with a real userfaultfd: a page
 * server over a source VRAM memfd, and a destination whose "client"
 * mapping of its VRAM memfd is registered with the userfaultfd, as
 * QEMU's BAR2 mapping is.  Pages read through the client mapping before
 * they arrived come on demand with the source's bytes; pages that are
 * not pending read as what the destination had (or zeros); device
 * accesses wait; the digest is verified; a wrong token is refused; and
 * without a userfaultfd everything arrives before pc_dst_start()
 * returns. */
#include <errno.h>
#include <glib.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vfio-migration/pc-dst.h"
#include "vfio-migration/pc-src.h"
#include "vfio-migration/uffd.h"

#define PS     65536u
#define NPAGES 256u
#define VRAM   ((uint64_t)PS * NPAGES)

struct side {
    int fd;
    uint8_t *map;    /* the server's mapping */
    uint8_t *client; /* a second one, as QEMU's */
};

static void side_init(struct side *s)
{
    s->fd = memfd_create("test-postcopy", MFD_CLOEXEC);
    g_assert_cmpint(s->fd, >=, 0);
    g_assert_cmpint(ftruncate(s->fd, VRAM), ==, 0);
    s->map = mmap(NULL, VRAM, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    s->client = mmap(NULL, VRAM, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    g_assert_true(s->map != MAP_FAILED && s->client != MAP_FAILED);
}

static void side_free(struct side *s)
{
    munmap(s->map, VRAM);
    munmap(s->client, VRAM);
    close(s->fd);
}

static void fill(uint8_t *page, uint64_t p, uint8_t tag)
{
    for (uint32_t i = 0; i < PS; i += 8) {
        uint64_t v = p << 32 | i | (uint64_t)tag << 56;

        memcpy(page + i, &v, 8);
    }
}

/* Source: every page of pattern 0xa; destination: what pre-copy left
 * (pattern 0xb, stale) in the pages below 200, zeros above; pending:
 * every third page and pages 250-255. */
struct fixture {
    struct side src, dst;
    uint64_t pending[NPAGES / 64];
    uint64_t npending;
    struct pc_src *server;
};

static bool is_pending(const struct fixture *f, uint64_t p)
{
    return f->pending[p / 64] >> (p % 64) & 1;
}

static void fixture_init_on(struct fixture *f, const char *tcp_host)
{
    struct vg_error err = {0};
    struct pc_src_config sc = {.npages = NPAGES,
                               .page_size = PS,
                               .dir = g_get_tmp_dir(),
                               .tcp_host = tcp_host};

    memset(f, 0, sizeof(*f));
    side_init(&f->src);
    side_init(&f->dst);
    for (uint64_t p = 0; p < NPAGES; p++) {
        fill(f->src.map + p * PS, p, 0xa);
        if (p < 200) {
            fill(f->dst.map + p * PS, p, 0xb);
        }
        if (p % 3 == 0 || p >= 250) {
            f->pending[p / 64] |= 1ull << (p % 64);
            f->npending++;
        }
    }
    /* A page not pending is one pre-copy delivered: the source's bytes. */
    for (uint64_t p = 0; p < 200; p++) {
        if (!is_pending(f, p)) {
            fill(f->dst.map + p * PS, p, 0xa);
        }
    }
    sc.vram = f->src.map;
    sc.pending = f->pending;
    g_assert_cmpint(pc_src_start(&sc, &f->server, &err), ==, 0);
}

static void fixture_init(struct fixture *f)
{
    fixture_init_on(f, NULL);
}

static void fixture_free(struct fixture *f)
{
    pc_src_free(f->server);
    side_free(&f->src);
    side_free(&f->dst);
}

static struct pc_dst_config dst_config(struct fixture *f, int uffd,
                                       const struct pc_dst_area *area)
{
    struct pc_dst_config c = {
        .npages = NPAGES,
        .pending = f->npending,
        .page_size = PS,
        .vram = f->dst.map,
        .vram_fd = f->dst.fd,
        .uffd = uffd,
        .areas = area,
        .nareas = area ? 1 : 0,
    };

    g_strlcpy(c.address, pc_src_address(f->server), sizeof(c.address));
    pc_src_token(f->server, c.token);
    return c;
}

/* Every page of the destination as expected: the source's where it was
 * pending or delivered, zeros where neither had anything. */
static void check_dst(struct fixture *f, const uint8_t *view)
{
    g_autofree uint8_t *want = g_malloc(PS);

    for (uint64_t p = 0; p < NPAGES; p++) {
        if (is_pending(f, p) || p < 200) {
            fill(want, p, 0xa);
        } else {
            memset(want, 0, PS);
        }
        if (memcmp(view + p * PS, want, PS) != 0) {
            g_error("page %" G_GUINT64_FORMAT " differs", p);
        }
    }
}

static void wait_done(struct pc_dst *d)
{
    for (int i = 0; i < 4000 && !pc_dst_done(d); i++) {
        g_usleep(1000);
    }
    g_assert_true(pc_dst_done(d));
}

struct reader {
    const uint8_t *addr;
    uint8_t got[16];
};

static void *read_page(void *opaque)
{
    struct reader *r = opaque;

    memcpy(r->got, r->addr, sizeof(r->got));
    return NULL;
}

static void test_on_demand(void)
{
    struct fixture f;
    struct vg_error err = {0};
    int uffd = uffd_open(&err);
    struct pc_dst_area area = {.vaddr = 0, .vram_off = 0, .size = VRAM};
    struct pc_dst *d;
    struct pc_dst_stats st;
    struct reader r[3];
    pthread_t t[3];

    if (uffd < 0) {
        g_test_skip(err.msg);
        return;
    }
    fixture_init(&f);
    area.vaddr = (uint64_t)(uintptr_t)f.dst.client;
    struct pc_dst_config c = dst_config(&f, uffd, &area);
    g_assert_cmpint(pc_dst_start(&c, &d, &err), ==, 0);
    /* Reads through the client mapping: a pending page at the end (on
     * demand, ahead of the pass), a page pre-copy delivered, a page of
     * zeros that was never written. */
    r[0].addr = f.dst.client + 255ull * PS + 8;
    r[1].addr = f.dst.client + 1ull * PS + 8;
    r[2].addr = f.dst.client + 220ull * PS + 8;
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(pthread_create(&t[i], NULL, read_page, &r[i]), ==, 0);
    }
    for (int i = 0; i < 3; i++) {
        pthread_join(t[i], NULL);
    }
    {
        g_autofree uint8_t *page = g_malloc(PS);

        fill(page, 255, 0xa);
        g_assert_cmpmem(r[0].got, 16, page + 8, 16);
        fill(page, 1, 0xa);
        g_assert_cmpmem(r[1].got, 16, page + 8, 16);
        memset(page, 0, PS);
        g_assert_cmpmem(r[2].got, 16, page + 8, 16);
    }
    /* A device access waits for its pages; a held command asks and is
     * ready once they are in. */
    g_assert_cmpint(pc_dst_wait(d, 249ull * PS, 2 * PS, &err), ==, 0);
    for (int i = 0; i < 5000 && !pc_dst_ready(d, 252ull * PS, PS); i++) {
        g_usleep(1000);
    }
    g_assert_true(pc_dst_ready(d, 252ull * PS, PS));
    g_assert_true(pc_dst_ready(d, 1ull * PS, PS)); /* never pending */
    wait_done(d);
    pc_dst_get_stats(d, &st);
    g_assert_true(st.on_demand);
    g_assert_true(st.verified);
    g_assert_cmpuint(st.pending, ==, f.npending);
    g_assert_cmpuint(st.fetched, ==, f.npending);
    check_dst(&f, f.dst.client);
    pc_dst_free(d);
    fixture_free(&f);
}

static void test_without_uffd(void)
{
    struct fixture f;
    struct vg_error err = {0};
    struct pc_dst *d;
    struct pc_dst_stats st;
    struct pc_src_stats ss;

    fixture_init(&f);
    struct pc_dst_config c = dst_config(&f, -1, NULL);
    g_assert_cmpint(pc_dst_start(&c, &d, &err), ==, 0);
    g_assert_true(pc_dst_done(d)); /* before it returned */
    pc_dst_get_stats(d, &st);
    g_assert_false(st.on_demand);
    g_assert_true(st.verified);
    check_dst(&f, f.dst.map);
    g_assert_true(pc_src_wait(f.server, 5000));
    pc_src_get_stats(f.server, &ss);
    g_assert_true(ss.claimed && ss.finished);
    g_assert_cmpuint(ss.pages_served, ==, f.npending);
    pc_dst_free(d);
    fixture_free(&f);
}

/* A proxy between the destination and the page server that cuts its
 * first connection after @cut_after bytes from the server, as a network
 * cut would, and forwards the next ones whole. */
struct proxy {
    char path[108];
    const char *server;
    uint64_t cut_after;
    int listen_fd;
    unsigned connections;
    pthread_t thread;
};

/* Copy between @a and @b until either closes or @limit bytes came from
 * @b (0: no limit). */
static void relay(int a, int b, uint64_t limit)
{
    uint64_t from_b = 0;
    char buf[65536];

    for (;;) {
        struct pollfd pfd[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};

        if (poll(pfd, 2, 10000) <= 0) {
            return;
        }
        for (int i = 0; i < 2; i++) {
            ssize_t n;

            if (!(pfd[i].revents & (POLLIN | POLLHUP))) {
                continue;
            }
            n = read(pfd[i].fd, buf, sizeof(buf));
            if (n <= 0) {
                return;
            }
            if (i == 1 && limit && from_b + (uint64_t)n > limit) {
                return; /* the cut */
            }
            from_b += i == 1 ? (uint64_t)n : 0;
            if (write(pfd[!i].fd, buf, (size_t)n) != n) {
                return;
            }
        }
    }
}

static void *proxy_thread(void *opaque)
{
    struct proxy *px = opaque;

    for (;;) {
        int c = accept(px->listen_fd, NULL, NULL), srv;
        struct vg_error err = {0};

        if (c < 0) {
            return NULL;
        }
        srv = pc_connect(px->server, &err);
        if (srv >= 0) {
            relay(c, srv, px->connections++ == 0 ? px->cut_after : 0);
            close(srv);
        }
        close(c);
    }
}

static void proxy_start(struct proxy *px, const char *server, uint64_t cut)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};

    memset(px, 0, sizeof(*px));
    px->server = server;
    px->cut_after = cut;
    snprintf(px->path, sizeof(px->path), "%s/pc-proxy-%d.sock", g_get_tmp_dir(),
             (int)getpid());
    g_strlcpy(sa.sun_path, px->path, sizeof(sa.sun_path));
    unlink(px->path);
    px->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
    g_assert_cmpint(bind(px->listen_fd, (struct sockaddr *)&sa, sizeof(sa)), ==,
                    0);
    g_assert_cmpint(listen(px->listen_fd, 4), ==, 0);
    g_assert_cmpint(pthread_create(&px->thread, NULL, proxy_thread, px), ==, 0);
}

static void proxy_stop(struct proxy *px)
{
    shutdown(px->listen_fd, SHUT_RDWR);
    close(px->listen_fd);
    pthread_join(px->thread, NULL);
    unlink(px->path);
}

/* The channel is cut midway: the destination connects again with the
 * token, the source takes it back, and every page arrives once with
 * the digest verified. */
static void test_reconnect(void)
{
    struct fixture f;
    struct vg_error err = {0};
    struct pc_dst *d;
    struct pc_dst_stats st;
    struct pc_src_stats ss;
    struct proxy px;

    fixture_init(&f);
    proxy_start(&px, pc_src_address(f.server), 20 * PS);
    struct pc_dst_config c = dst_config(&f, -1, NULL);
    g_strlcpy(c.address, px.path, sizeof(c.address));
    g_assert_cmpint(pc_dst_start(&c, &d, &err), ==, 0);
    pc_dst_get_stats(d, &st);
    g_assert_true(st.done && st.verified);
    g_assert_cmpuint(st.reconnects, ==, 1);
    g_assert_cmpuint(st.fetched, ==, f.npending);
    check_dst(&f, f.dst.map);
    g_assert_true(pc_src_wait(f.server, 5000));
    pc_src_get_stats(f.server, &ss);
    g_assert_true(ss.finished);
    g_assert_cmpuint(px.connections, ==, 2);
    pc_dst_free(d);
    proxy_stop(&px);
    fixture_free(&f);
}

/* The page server on TCP (another host's destination): same pages. */
static void test_tcp(void)
{
    struct fixture f;
    struct vg_error err = {0};
    struct pc_dst *d;
    struct pc_dst_stats st;

    fixture_init_on(&f, "127.0.0.1");
    g_assert_true(g_str_has_prefix(pc_src_address(f.server), "tcp:127.0.0.1:"));
    struct pc_dst_config c = dst_config(&f, -1, NULL);
    g_assert_cmpint(pc_dst_start(&c, &d, &err), ==, 0);
    pc_dst_get_stats(d, &st);
    g_assert_true(st.done && st.verified);
    check_dst(&f, f.dst.map);
    pc_dst_free(d);
    fixture_free(&f);
    /* A host that does not resolve, and an address without a port. */
    g_assert_true(pc_connect("tcp:no-such-host.invalid:1", &err) < 0);
    g_assert_nonnull(strstr(err.msg, "no-such-host.invalid"));
    g_assert_true(pc_connect("tcp:127.0.0.1", &err) < 0);
    g_assert_nonnull(strstr(err.msg, "no HOST:PORT"));
}

static void test_wrong_token(void)
{
    struct fixture f;
    struct vg_error err = {0};
    struct pc_dst *d;
    struct pc_src_stats ss;

    fixture_init(&f);
    struct pc_dst_config c = dst_config(&f, -1, NULL);
    c.token[3] ^= 1;
    g_assert_cmpint(pc_dst_start(&c, &d, &err), <, 0);
    g_assert_nonnull(strstr(err.msg, "page channel closed"));
    pc_src_get_stats(f.server, &ss);
    g_assert_false(ss.claimed);
    /* The right destination still gets in afterwards. */
    c.token[3] ^= 1;
    g_assert_cmpint(pc_dst_start(&c, &d, &err), ==, 0);
    check_dst(&f, f.dst.map);
    pc_dst_free(d);
    fixture_free(&f);
}

/* A request outside VRAM ends the channel, and the server says why. */
static void test_bad_request(void)
{
    struct fixture f;
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct pc_hello h = {.magic = PC_MAGIC, .version = PC_VERSION};
    struct pc_req req = {.op = PC_OP_PAGES, .count = 2, .first = NPAGES - 1};
    struct pc_src_stats ss;
    int fd;

    fixture_init(&f);
    g_strlcpy(sa.sun_path, pc_src_address(f.server), sizeof(sa.sun_path));
    pc_src_token(f.server, h.token);
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    g_assert_cmpint(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    g_assert_cmpint(write(fd, &h, sizeof(h)), ==, sizeof(h));
    g_assert_cmpint(write(fd, &req, sizeof(req)), ==, sizeof(req));
    /* The channel ends with the reason; the server waits for the
     * destination to connect again. */
    for (int i = 0; i < 5000; i++) {
        pc_src_get_stats(f.server, &ss);
        if (ss.error[0]) {
            break;
        }
        g_usleep(1000);
    }
    g_assert_false(ss.finished);
    g_assert_nonnull(strstr(ss.error, "outside VRAM"));
    g_assert_false(pc_src_wait(f.server, 0));
    close(fd);
    fixture_free(&f);
}

/* A userfaultfd of a child process that then exits, with the address
 * of the range the child had registered; -1 (skip) without userfaultfd. */
static int orphan_uffd(uint64_t *addr, struct vg_error *err)
{
    int sv[2], fd = -1;
    char byte = 0;
    char ctl[CMSG_SPACE(sizeof(int))] = {0};
    struct iovec iov = {addr, sizeof(*addr)};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl,
                        .msg_controllen = sizeof(ctl)};
    pid_t pid;

    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), ==, 0);
    pid = fork();
    g_assert_cmpint(pid, >=, 0);
    if (pid == 0) { /* the child: a client that registers and exits */
        void *p = mmap(NULL, 65536, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        uint64_t a = (uint64_t)(uintptr_t)p;
        int u = uffd_open(err);

        if (u >= 0 && uffd_register(u, a, 65536, err) < 0) {
            u = -1;
        }
        iov.iov_base = &a;
        if (u < 0) {
            mh.msg_control = NULL;
            mh.msg_controllen = 0;
        } else {
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);

            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &u, sizeof(int));
        }
        _exit(sendmsg(sv[1], &mh, 0) == sizeof(a) ? 0 : 1);
    }
    close(sv[1]);
    if (recvmsg(sv[0], &mh, 0) == sizeof(*addr) && CMSG_FIRSTHDR(&mh)) {
        memcpy(&fd, CMSG_DATA(CMSG_FIRSTHDR(&mh)), sizeof(int));
    }
    g_assert_cmpint(read(sv[0], &byte, 1), ==, 0); /* the child is gone */
    close(sv[0]);
    g_assert_cmpint(waitpid(pid, NULL, 0), ==, pid);
    return fd;
}

/* Installing into a client that exited (QEMU quit mid-restore) fails with
 * ESRCH and says so, which pc-dst logs as the end of loading, not as an
 * error. */
static void test_client_exited(void)
{
    static uint8_t page[65536];
    struct vg_error err = {0};
    uint64_t addr = 0;
    int fd = orphan_uffd(&addr, &err);

    if (fd < 0) {
        g_test_skip("no userfaultfd here");
        return;
    }
    g_assert_cmpint(uffd_copy(fd, addr, page, sizeof(page), &err), ==, -ESRCH);
    g_test_message("%s", err.msg);
    g_assert_nonnull(strstr(err.msg, "address space is gone"));
    close(fd);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/postcopy/on-demand", test_on_demand);
    g_test_add_func("/postcopy/without-uffd", test_without_uffd);
    g_test_add_func("/postcopy/tcp", test_tcp);
    g_test_add_func("/postcopy/reconnect", test_reconnect);
    g_test_add_func("/postcopy/wrong-token", test_wrong_token);
    g_test_add_func("/postcopy/bad-request", test_bad_request);
    g_test_add_func("/postcopy/client-exited", test_client_exited);
    return g_test_run();
}
