/*
 * vfu-client.h -- a raw vfio-user client for the security tests, which
 * play a hostile QEMU against the real vgpu-server (test-security.c,
 * test-hostile.c): start a server in a private directory, connect, send
 * requests with or without file descriptors, read replies, and build
 * migration stream records with valid checksums.
 *
 * Every helper asserts what a reply must look like (type, id, command,
 * size within the server's limit, an error reply has no payload) and
 * waits at most VC_REPLY_TIMEOUT ms for it, so a server that hangs or
 * dies fails the test instead of blocking it.
 */
#ifndef VGMIG_TESTS_QTEST_VFU_CLIENT_H
#define VGMIG_TESTS_QTEST_VFU_CLIENT_H

#include <errno.h>
#include <fcntl.h>
#include <linux/vfio.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/le.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-migration/mig.h"
#include "vfio-user/vfu-proto.h"
#include "vgpu-test.h"

#define VC_MAX_XFER      (1u << 20) /* the server's limits */
#define VC_MAX_MSG       (VC_MAX_XFER + 64u)
#define VC_REPLY_TIMEOUT 10000

/* ------------------------------------------------------- the server */

struct sec {
    char *dir;
    char *stats;
    struct vg_server *srv;
};

/* A server with --vram @vram, --page-size @page and @extra arguments
 * (NULL-terminated, or NULL), a stats file and its log at info level. */
static inline void sec_start_opts(struct sec *s, const char *tag,
                                  const char *vram, const char *page,
                                  const char *const *extra)
{
    struct vg_server_opts so = {
        .vram = vram,
        .page_size = page,
        .log_level = "info",
        .extra_args = extra,
    };

    memset(s, 0, sizeof(*s));
    VGT_OK(vg_tmpdir_create(tag, &s->dir, VGT_ERR));
    s->stats = g_strdup_printf("%s/stats.json", s->dir);
    so.dir = s->dir;
    so.stats_file = s->stats;
    VGT_OK(vg_server_start(&so, &s->srv, VGT_ERR));
}

/* The server must still be running; stop it and remove its directory. */
static inline void sec_stop(struct sec *s)
{
    g_assert_true(vg_proc_alive(&s->srv->proc));
    vg_server_free(s->srv);
    VGT_OK(vg_tmpdir_remove(s->dir, VGT_ERR));
    g_free(s->stats);
    g_free(s->dir);
}

/* ------------------------------------------------ a raw vfio-user client */

struct conn {
    int fd;
    uint16_t id;
};

static inline int connect_path(const char *path)
{
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0) {
        return -errno;
    }
    g_strlcpy(addr.sun_path, path, sizeof(addr.sun_path));
    if (connect(fd, (struct sockaddr *)&addr, sizeof(addr)) < 0) {
        int e = errno;
        close(fd);
        return -e;
    }
    return fd;
}

/* Send all of @buf; the first chunk carries @pass_fd if >= 0. */
static inline void send_all(int fd, const void *buf, size_t len, int pass_fd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    const char *p = buf;

    while (len) {
        struct iovec iov = {(void *)p, len};
        struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
        ssize_t n;

        if (pass_fd >= 0) {
            mh.msg_control = ctl.buf;
            mh.msg_controllen = sizeof(ctl.buf);
            struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
            c->cmsg_level = SOL_SOCKET;
            c->cmsg_type = SCM_RIGHTS;
            c->cmsg_len = CMSG_LEN(sizeof(int));
            memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
        }
        n = sendmsg(fd, &mh, MSG_NOSIGNAL);
        g_assert_cmpint(n, >, 0);
        p += n;
        len -= (size_t)n;
        pass_fd = -1;
    }
}

/* Receive exactly @len bytes; a passed fd goes to *@rfd. */
static inline void recv_all(int fd, void *buf, size_t len, int *rfd)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    char *p = buf;

    while (len) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        struct iovec iov = {p, len};
        struct msghdr mh = {.msg_iov = &iov,
                            .msg_iovlen = 1,
                            .msg_control = ctl.buf,
                            .msg_controllen = sizeof(ctl.buf)};
        struct cmsghdr *c;
        ssize_t n;

        g_assert_cmpint(poll(&pfd, 1, VC_REPLY_TIMEOUT), ==, 1);
        n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
        g_assert_cmpint(n, >, 0);
        for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
            if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
                int got;
                memcpy(&got, CMSG_DATA(c), sizeof(int));
                if (rfd && *rfd < 0) {
                    *rfd = got;
                } else {
                    close(got);
                }
            }
        }
        p += n;
        len -= (size_t)n;
    }
}

/* Read one reply to request @id/@cmd; returns its errno (0: success) and
 * its payload in @reply (at most @rsize bytes, length in *@rlen). */
static inline uint32_t reply_read(struct conn *c, uint16_t cmd, void *reply,
                                  size_t rsize, size_t *rlen, int *rfd)
{
    struct vfu_hdr h;
    g_autofree uint8_t *body = NULL;
    size_t n;

    recv_all(c->fd, &h, sizeof(h), rfd);
    g_assert_cmpuint(h.flags & VFU_FLAG_TYPE_MASK, ==, VFU_FLAG_REPLY);
    g_assert_cmpuint(h.id, ==, c->id);
    g_assert_cmpuint(h.command, ==, cmd);
    g_assert_cmpuint(h.size, >=, sizeof(h));
    g_assert_cmpuint(h.size, <=, VC_MAX_MSG);
    n = h.size - sizeof(h);
    body = g_malloc(n + 1);
    if (n) {
        recv_all(c->fd, body, n, rfd);
    }
    if (h.flags & VFU_FLAG_ERROR) {
        g_assert_cmpuint(h.error, !=, 0);
        g_assert_cmpuint(n, ==, 0);
        return h.error;
    }
    if (reply) {
        g_assert_cmpuint(n, <=, rsize);
        memcpy(reply, body, n);
    }
    if (rlen) {
        *rlen = n;
    }
    return 0;
}

/*
 * One request with @len payload bytes (header size @size, 0: the real
 * one) and optionally an fd; returns the reply's errno (0: success) and
 * its payload in @reply (at most @rsize bytes, length in *@rlen).
 */
static inline uint32_t request_ex(struct conn *c, uint16_t cmd,
                                  const void *payload, size_t len,
                                  uint32_t size, int pass_fd, void *reply,
                                  size_t rsize, size_t *rlen, int *rfd)
{
    struct vfu_hdr h = {.id = ++c->id,
                        .command = cmd,
                        .size = size ? size : (uint32_t)(sizeof(h) + len)};

    send_all(c->fd, &h, sizeof(h), pass_fd);
    if (len) {
        send_all(c->fd, payload, len, -1);
    }
    return reply_read(c, cmd, reply, rsize, rlen, rfd);
}

static inline uint32_t request(struct conn *c, uint16_t cmd,
                               const void *payload, size_t len)
{
    return request_ex(c, cmd, payload, len, 0, -1, NULL, 0, NULL, NULL);
}

/* Connect and negotiate with the capabilities JSON @json; the server's
 * JSON into @reply (@size bytes; NULL: not kept). */
static inline void conn_open_reply(struct conn *c, const struct sec *s,
                                   const char *json, char *reply, size_t size)
{
    struct vfu_version v = {VFU_VERSION_MAJOR, VFU_VERSION_MINOR};
    uint8_t p[512];
    size_t n = 0;

    g_assert_cmpuint(strlen(json) + 1, <=, sizeof(p) - sizeof(v));
    c->fd = connect_path(s->srv->socket);
    g_assert_cmpint(c->fd, >=, 0);
    c->id = 0;
    memcpy(p, &v, sizeof(v));
    memcpy(p + sizeof(v), json, strlen(json) + 1);
    g_assert_cmpuint(request_ex(c, VFU_CMD_VERSION, p,
                                sizeof(v) + strlen(json) + 1, 0, -1, p,
                                sizeof(p), &n, NULL),
                     ==, 0);
    if (reply) {
        g_assert_cmpuint(n, >, sizeof(v));
        g_assert_cmpuint(p[n - 1], ==, 0);
        g_strlcpy(reply, (const char *)p + sizeof(v), size);
    }
}

/* Connect and negotiate with the capabilities JSON @json. */
static inline void conn_open_caps(struct conn *c, const struct sec *s,
                                  const char *json)
{
    conn_open_reply(c, s, json, NULL, 0);
}

/* Capabilities with migration and both protocol extensions, as the
 * patched QEMU proposes them. */
#define VC_CAPS_EXT                                                            \
    "{\"capabilities\":{\"max_msg_fds\":8,\"max_data_xfer_size\":1048576,"     \
    "\"migration\":{\"pgsize\":4096,\"precopy_info\":true,"                    \
    "\"region_dirty_log\":true}}}"

/* Capabilities without extensions; with @migration, the migration object
 * (log page size 4 KiB). */
static inline void conn_open(struct conn *c, const struct sec *s,
                             bool migration)
{
    conn_open_caps(c, s,
                   migration ? "{\"capabilities\":{\"max_msg_fds\":8,"
                               "\"max_data_xfer_size\":1048576,"
                               "\"migration\":{\"pgsize\":4096}}}"
                             : "{\"capabilities\":{\"max_msg_fds\":8,"
                               "\"max_data_xfer_size\":1048576}}");
}

static inline void conn_close(struct conn *c)
{
    close(c->fd);
    c->fd = -1;
}

/* REGION_READ/WRITE of @count bytes at @off; returns the errno. */
static inline uint32_t region_rw(struct conn *c, bool write, uint32_t region,
                                 uint64_t off, void *data, uint32_t count)
{
    struct vfu_region_rw rw = {off, region, count};
    size_t n = sizeof(rw) + (write ? count : 0), rlen = 0;
    g_autofree uint8_t *p = g_malloc(sizeof(rw) + count);
    uint32_t e;

    memcpy(p, &rw, sizeof(rw));
    if (write) {
        memcpy(p + sizeof(rw), data, count);
    }
    e = request_ex(c, write ? VFU_CMD_REGION_WRITE : VFU_CMD_REGION_READ, p, n,
                   0, -1, p, sizeof(rw) + count, &rlen, NULL);
    if (e == 0 && !write) {
        g_assert_cmpuint(rlen, ==, sizeof(rw) + count);
        memcpy(data, p + sizeof(rw), count);
    }
    return e;
}

static inline uint32_t reg_rd(struct conn *c, uint32_t reg)
{
    uint32_t v = 0;

    g_assert_cmpuint(region_rw(c, false, VGPU_BAR_REGS, reg, &v, 4), ==, 0);
    return v;
}

static inline void reg_wr(struct conn *c, uint32_t reg, uint32_t v)
{
    g_assert_cmpuint(region_rw(c, true, VGPU_BAR_REGS, reg, &v, 4), ==, 0);
}

/* The server answers and the device is the one we expect. */
static inline void assert_serving(struct conn *c)
{
    g_assert_cmphex(reg_rd(c, VGPU_REG_ID), ==, VGPU_ID_MAGIC);
}

static inline uint32_t dma_map(struct conn *c, uint64_t iova, uint64_t size,
                               uint64_t off, uint32_t flags, int fd)
{
    struct vfu_dma_map m = {sizeof(m), flags, off, iova, size};

    return request_ex(c, VFU_CMD_DMA_MAP, &m, sizeof(m), 0, fd, NULL, 0, NULL,
                      NULL);
}

static inline uint32_t dma_unmap(struct conn *c, uint64_t iova, uint64_t size,
                                 uint32_t flags)
{
    struct vfu_dma_unmap u = {sizeof(u), flags, iova, size};
    struct vfu_dma_unmap r;

    return request_ex(c, VFU_CMD_DMA_UNMAP, &u, sizeof(u), 0, -1, &r, sizeof(r),
                      NULL, NULL);
}

/* DEVICE_FEATURE with @flags and @len data bytes; the reply may carry
 * up to @out bytes of data.  Returns the errno. */
static inline uint32_t feature(struct conn *c, uint32_t flags, const void *data,
                               size_t len, size_t out)
{
    struct vfu_device_feature h = {
        (uint32_t)(sizeof(h) + (len > out ? len : out)), flags};
    g_autofree uint8_t *p = g_malloc(sizeof(h) + len);

    memcpy(p, &h, sizeof(h));
    if (len) {
        memcpy(p + sizeof(h), data, len);
    }
    return request(c, VFU_CMD_DEVICE_FEATURE, p, sizeof(h) + len);
}

/* The VRAM fd of BAR2's region info (the region must be @size bytes). */
static inline int vram_fd(struct conn *c, uint64_t size)
{
    struct vfu_region_info ri = {sizeof(ri), 0, VGPU_BAR_VRAM, 0, 0, 0};
    uint8_t reply[256];
    int fd = -1;

    g_assert_cmpuint(request_ex(c, VFU_CMD_DEVICE_GET_REGION_INFO, &ri,
                                sizeof(ri), 0, -1, reply, sizeof(reply), NULL,
                                &fd),
                     ==, 0);
    memcpy(&ri, reply, sizeof(ri));
    g_assert_cmpuint(ri.size, ==, size);
    g_assert_cmpint(fd, >=, 0);
    return fd;
}

/* The VRAM of @size bytes, mapped through the fd of BAR2's region info. */
static inline uint8_t *map_vram_size(struct conn *c, uint64_t size)
{
    int fd = vram_fd(c, size);
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

    g_assert_true(p != MAP_FAILED);
    close(fd);
    return p;
}

/* A memfd of guest RAM, as QEMU's memory-backend-memfd makes it: sealed
 * against shrinking and growing (@seals false: not sealed at all). */
static inline int memfd_sealed(size_t size, bool seals, uint8_t **map)
{
    int fd = memfd_create("vfu-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)size), ==, 0);
    if (seals) {
        g_assert_cmpint(
            fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            ==, 0);
    }
    *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(*map != MAP_FAILED);
    return fd;
}

static inline int memfd_of(size_t size, uint8_t **map)
{
    return memfd_sealed(size, true, map);
}

static inline void fill_pattern(uint8_t *p, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        p[i] = (uint8_t)(i * 31 + i / 4096 + seed);
    }
}

/* ---------------------------------------------------------- migration */

static inline uint32_t set_state(struct conn *c, uint32_t state)
{
    struct {
        struct vfu_device_feature h;
        struct vfu_feature_mig_state st;
    } f = {{sizeof(f), VFIO_DEVICE_FEATURE_SET | VFU_FEATURE_MIG_DEVICE_STATE},
           {state, -1}};
    uint8_t reply[64];

    return request_ex(c, VFU_CMD_DEVICE_FEATURE, &f, sizeof(f), 0, -1, reply,
                      sizeof(reply), NULL, NULL);
}

static inline uint32_t get_state(struct conn *c)
{
    struct {
        struct vfu_device_feature h;
        struct vfu_feature_mig_state st;
    } f = {{sizeof(f), VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_MIG_DEVICE_STATE},
           {0, -1}};
    size_t n = 0;

    g_assert_cmpuint(request_ex(c, VFU_CMD_DEVICE_FEATURE, &f, sizeof(f), 0, -1,
                                &f, sizeof(f), &n, NULL),
                     ==, 0);
    g_assert_cmpuint(n, ==, sizeof(f));
    return f.st.device_state;
}

static inline uint32_t mig_data_write(struct conn *c, const GByteArray *data)
{
    g_autofree uint8_t *p = g_malloc(sizeof(struct vfu_mig_data) + data->len);
    struct vfu_mig_data d = {sizeof(d) + data->len, data->len};

    memcpy(p, &d, sizeof(d));
    memcpy(p + sizeof(d), data->data, data->len);
    return request(c, VFU_CMD_MIG_DATA_WRITE, p, sizeof(d) + data->len);
}

/* MIG_DATA_READ of up to @max bytes appended to @out; returns the errno,
 * the bytes read in *@got. */
static inline uint32_t mig_data_read(struct conn *c, uint32_t max,
                                     GByteArray *out, uint32_t *got)
{
    struct vfu_mig_data d = {sizeof(d) + max, max};
    g_autofree uint8_t *p = g_malloc(sizeof(d) + max);
    size_t n = 0;
    uint32_t e;

    e = request_ex(c, VFU_CMD_MIG_DATA_READ, &d, sizeof(d), 0, -1, p,
                   sizeof(d) + max, &n, NULL);
    *got = 0;
    if (e == 0) {
        g_assert_cmpuint(n, >=, sizeof(d));
        memcpy(&d, p, sizeof(d));
        g_assert_cmpuint(d.size, ==, n - sizeof(d));
        g_byte_array_append(out, p + sizeof(d), d.size);
        *got = d.size;
    }
    return e;
}

/* Append a record of @type with @len payload bytes, checksum right. */
static inline void put_rec(GByteArray *s, uint16_t type, const uint8_t *payload,
                           uint32_t len)
{
    uint8_t h[MIG_REC_HDR_SIZE] = {0};

    vg_put_le16(h, type);
    vg_put_le32(h + 4, len);
    vg_put_le64(h + 8, XXH3_64bits_withSeed(payload, len, vg_get_le64(h)));
    g_byte_array_append(s, h, sizeof(h));
    g_byte_array_append(s, payload, len);
}

/* A HEADER of stream version 1, the version whose checksums put_rec()
 * computes for every record type (hand-made PAGES records included). */
static inline void put_header_ps(GByteArray *s, uint32_t page, uint64_t vram,
                                 uint32_t features)
{
    uint8_t p[MIG_HEADER_SIZE] = {0};

    memcpy(p, MIG_STREAM_MAGIC, 8);
    vg_put_le32(p + 8, 1);
    vg_put_le32(p + 12, page);
    vg_put_le64(p + 16, vram);
    vg_put_le32(p + 24, features);
    put_rec(s, MIG_REC_HEADER, p, sizeof(p));
}

static inline void put_zeros(GByteArray *s, uint64_t first, uint64_t count)
{
    uint8_t p[MIG_RUN_HDR_SIZE];

    vg_put_le64(p, first);
    vg_put_le64(p + 8, count);
    put_rec(s, MIG_REC_ZEROS, p, sizeof(p));
}

#endif
