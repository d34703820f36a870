/*
 * test-security -- the security properties of issue 6, each asserted
 * against the real vgpu-server driven by a raw vfio-user client (this
 * test plays a hostile QEMU), except the hash seed, which is checked in
 * process on the library's migration module.
 *
 *  - other-user: the socket refuses other users: a client of another uid
 *    (nobody, via setresuid in a forked child) cannot connect while the
 *    socket has its 0600 mode, and is disconnected unserved (SO_PEERCRED)
 *    when the mode is opened up; root is still served.  Needs root;
 *    skipped (visibly) otherwise.
 *  - bounds: message sizes, transfer sizes, DMA mapping counts and
 *    ranges, DMA logging ranges and bitmaps, region offsets and indexes
 *    are bounded: each excess gets an
 *    error reply, VRAM is unchanged by refused writes, the server keeps
 *    serving.  (test-vfu-robust covers malformed framing.)
 *  - dma-mapped-only: ring commands whose guest address is not wholly
 *    inside one DMA mapping that allows the access (unmapped, read-only,
 *    spanning two mappings, past a mapping's end, a mapping without fd)
 *    latch DMA_FAULT at their ring index; neither guest RAM nor VRAM
 *    changes.
 *  - stream-in-vram: crafted stream records (pages past the end of VRAM,
 *    wrapping page numbers, counts that disagree with the payload, an
 *    oversized record, a HEADER claiming a larger VRAM) make the load fail
 *    with a precise error in the stats file and an error reply; VRAM keeps
 *    everything but the pages legitimately loaded before.
 *  - hash-seed: each migration's dirty tracker gets a fresh seed from
 *    getrandom() (intercepted here), and the seed's bytes never appear in
 *    the stream.
 */
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/vfio.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <xxhash.h>

#include "common/le.h"
#include "common/log.h"
#include "qclient/migrate.h"
#include "vfio-migration/mig-stream.h"
#include "vfio-migration/mig.h"
#include "vfio-user/pci-config.h"
#include "vfio-user/vfu-dma.h"
#include "vfio-user/vfu-proto.h"
#include "vfu-client.h"

#define SEC_VRAM      ((uint64_t)1 << 20)
#define SEC_VRAM_ARG  "1M"
#define SEC_PAGE      4096u
#define SEC_PAGE_ARG  "4K"
#define SEC_NPAGES    (SEC_VRAM / SEC_PAGE)
#define MAX_XFER      VC_MAX_XFER
#define MAX_MSG       VC_MAX_MSG
#define MAX_DMA_MAPS  1024u
#define NOBODY        65534u
#define REPLY_TIMEOUT VC_REPLY_TIMEOUT

/* ------------------------------------------------------- the server */

static void sec_start(struct sec *s, const char *tag)
{
    sec_start_opts(s, tag, SEC_VRAM_ARG, SEC_PAGE_ARG, NULL);
}

static uint8_t *map_vram(struct conn *c)
{
    return map_vram_size(c, SEC_VRAM);
}

/* DMA_LOGGING_START of @n ranges of @length bytes each, 1 GiB apart. */
static uint32_t log_start(struct conn *c, uint32_t n, uint64_t length)
{
    size_t len = sizeof(struct vfu_dma_logging_control) +
                 n * sizeof(struct vfu_dma_logging_range);
    g_autofree uint8_t *p = g_malloc0(len);
    struct vfu_dma_logging_control ctl = {4096, n, 0};

    memcpy(p, &ctl, sizeof(ctl));
    for (uint32_t i = 0; i < n; i++) {
        struct vfu_dma_logging_range r = {(uint64_t)i << 30, length};
        memcpy(p + sizeof(ctl) + i * sizeof(r), &r, sizeof(r));
    }
    return feature(c, VFIO_DEVICE_FEATURE_SET | VFU_FEATURE_DMA_LOGGING_START,
                   p, len, 0);
}

/* ------------------------------------------------------ other users */

/* In a child: become nobody, connect, send VERSION.  Exit 10 + how far
 * it got: 0 connect refused (EACCES), 1 connected but disconnected
 * without a reply, 2 served (a reply came), 3 other errors. */
static int nobody_client(const char *path)
{
    struct vfu_hdr h = {.id = 1, .command = VFU_CMD_VERSION, .size = 20};
    struct vfu_version v = {0, 0};
    uint8_t msg[20];
    struct pollfd pfd;
    int fd;
    ssize_t n;

    if (setgroups(0, NULL) < 0 || setresgid(NOBODY, NOBODY, NOBODY) < 0 ||
        setresuid(NOBODY, NOBODY, NOBODY) < 0 || geteuid() != NOBODY) {
        return 13;
    }
    fd = connect_path(path);
    if (fd == -EACCES) {
        return 10;
    }
    if (fd < 0) {
        return 13;
    }
    memcpy(msg, &h, sizeof(h));
    memcpy(msg + sizeof(h), &v, sizeof(v));
    /* The server may already have closed: EPIPE/ECONNRESET also count. */
    if (send(fd, msg, sizeof(msg), MSG_NOSIGNAL) != (ssize_t)sizeof(msg)) {
        return 11;
    }
    pfd = (struct pollfd){.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, REPLY_TIMEOUT) != 1) {
        return 13;
    }
    n = recv(fd, msg, sizeof(msg), 0);
    return n > 0 ? 12 : 11;
}

static int run_as_nobody(const char *path)
{
    int status;
    pid_t pid = fork();

    g_assert_cmpint(pid, >=, 0);
    if (pid == 0) {
        _exit(nobody_client(path));
    }
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    return WEXITSTATUS(status);
}

static void test_other_user(void)
{
    g_autofree char *log = NULL;
    struct conn c;
    struct sec s;
    int res;

    if (geteuid() != 0) {
        g_test_skip("needs root: connects as uid 65534 via setresuid");
        return;
    }
    sec_start(&s, "sec-uid");
    /* As created, the socket is 0600: even with its directory open to
     * all, the kernel refuses connect(). */
    g_assert_cmpint(chmod(s.dir, 0755), ==, 0);
    g_assert_cmpint(run_as_nobody(s.srv->socket), ==, 10);
    /* Opened up by mistake: the server itself refuses the peer. */
    g_assert_cmpint(chmod(s.srv->socket, 0666), ==, 0);
    res = run_as_nobody(s.srv->socket);
    if (res == 10) {
        sec_stop(&s);
        g_test_skip("uid 65534 cannot reach the socket's directory "
                    "($TMPDIR not searchable): SO_PEERCRED check untested");
        return;
    }
    g_assert_cmpint(res, ==, 11);
    log = vg_proc_log_tail(&s.srv->proc, 16384);
    g_assert_nonnull(strstr(log, "refusing client"));
    g_assert_nonnull(strstr(log, "uid 65534"));
    /* Our own uid is still served. */
    conn_open(&c, &s, false);
    assert_serving(&c);
    conn_close(&c);
    sec_stop(&s);
}

/* ----------------------------------------------------------- bounds */

static void test_bounds(void)
{
    static const uint64_t sizes[3] = {PCI_CONFIG_SIZE, VGPU_BAR0_SIZE,
                                      SEC_VRAM};
    static const uint32_t regions[3] = {VFIO_PCI_CONFIG_REGION_INDEX,
                                        VGPU_BAR_REGS, VGPU_BAR_VRAM};
    g_autofree uint8_t *big = g_malloc0(MAX_MSG + 16);
    g_autofree uint8_t *before = g_malloc(SEC_VRAM);
    uint8_t buf[64] = {0}, *ram, *vram;
    struct vfu_mig_data md;
    struct conn c;
    struct sec s;
    int ramfd;

    sec_start(&s, "sec-bounds");
    conn_open(&c, &s, true);
    vram = map_vram(&c);
    fill_pattern(vram, SEC_VRAM, 1);
    memcpy(before, vram, SEC_VRAM);

    /* Message size: one byte over the limit is refused whole; a write of
     * exactly the transfer limit is fine, one byte more is not. */
    g_assert_cmpuint(request_ex(&c, VFU_CMD_REGION_WRITE, big,
                                MAX_MSG + 1 - sizeof(struct vfu_hdr), 0, -1,
                                NULL, 0, NULL, NULL),
                     ==, E2BIG);
    {
        struct vfu_region_rw rw = {0, VGPU_BAR_VRAM, MAX_XFER};
        memcpy(big, &rw, sizeof(rw));
        memset(big + sizeof(rw), 0x77, MAX_XFER);
        g_assert_cmpuint(
            request(&c, VFU_CMD_REGION_WRITE, big, sizeof(rw) + MAX_XFER), ==,
            0);
        g_assert_cmpuint(vram[MAX_XFER - 1], ==, 0x77);
        memcpy(before, vram, SEC_VRAM);
        rw.count = MAX_XFER + 1;
        memcpy(big, &rw, sizeof(rw));
        g_assert_cmpuint(
            request(&c, VFU_CMD_REGION_WRITE, big, sizeof(rw) + MAX_XFER + 1),
            ==, E2BIG);
        g_assert_cmpuint(
            region_rw(&c, false, VGPU_BAR_VRAM, 0, big, MAX_XFER + 1), ==,
            E2BIG);
    }
    /* Migration data: a read larger than the transfer limit. */
    md = (struct vfu_mig_data){sizeof(md) + MAX_XFER + 1, MAX_XFER + 1};
    g_assert_cmpuint(request(&c, VFU_CMD_MIG_DATA_READ, &md, sizeof(md)), ==,
                     EINVAL);
    assert_serving(&c);

    /* Region offsets: the last byte, then one past, the end, wrapping
     * offsets; regions that do not exist. */
    for (unsigned i = 0; i < 3; i++) {
        uint64_t sz = sizes[i];
        const uint64_t bad[] = {sz - 3, sz, sz + 4, UINT64_MAX - 3, UINT64_MAX};

        g_assert_cmpuint(region_rw(&c, false, regions[i], sz - 4, buf, 4), ==,
                         0);
        for (unsigned j = 0; j < G_N_ELEMENTS(bad); j++) {
            g_assert_cmpuint(region_rw(&c, false, regions[i], bad[j], buf, 4),
                             ==, EINVAL);
            g_assert_cmpuint(region_rw(&c, true, regions[i], bad[j], buf, 4),
                             ==, EINVAL);
        }
    }
    for (uint32_t r = 0; r < 16; r++) {
        if (r == VGPU_BAR_REGS || r == VGPU_BAR_VRAM ||
            r == VFIO_PCI_CONFIG_REGION_INDEX) {
            continue;
        }
        g_assert_cmpuint(region_rw(&c, true, r, 0, buf, 4), ==, EINVAL);
    }
    g_assert_cmpmem(vram, SEC_VRAM, before, SEC_VRAM);
    assert_serving(&c);

    /* DMA mappings: bounded in number, ranges checked, fd size checked. */
    for (uint32_t i = 0; i < MAX_DMA_MAPS; i++) {
        g_assert_cmpuint(dma_map(&c, (uint64_t)i << 12, 4096, 0, 3, -1), ==, 0);
    }
    g_assert_cmpuint(dma_map(&c, 0x10000000, 4096, 0, 3, -1), ==, ENOSPC);
    g_assert_cmpuint(dma_unmap(&c, 5 << 12, 4096, 0), ==, 0);
    g_assert_cmpuint(dma_map(&c, 0x10000000, 4096, 0, 3, -1), ==, 0);
    g_assert_cmpuint(dma_map(&c, 0x10001000, 4096, 0, 3, -1), ==, ENOSPC);
    g_assert_cmpuint(dma_unmap(&c, 0, 0, VFIO_DMA_UNMAP_FLAG_ALL), ==, 0);
    ramfd = memfd_of(65536, &ram);
    g_assert_cmpuint(dma_map(&c, 0x100000, 4096, 0, 3, -1), ==, 0);
    g_assert_cmpuint(dma_map(&c, 0x100000, 4096, 0, 3, -1), ==, EEXIST);
    g_assert_cmpuint(dma_map(&c, 0x0ff000, 8192, 0, 3, -1), ==, EEXIST);
    g_assert_cmpuint(dma_map(&c, 0x200800, 4096, 0, 3, -1), ==, EINVAL);
    g_assert_cmpuint(dma_map(&c, UINT64_MAX - 4095, 8192, 0, 3, -1), ==,
                     EINVAL);
    g_assert_cmpuint(dma_map(&c, 0x300000, 0, 0, 3, -1), ==, EINVAL);
    /* beyond the end of the memfd: the device would SIGBUS on it */
    g_assert_cmpuint(dma_map(&c, 0x400000, 2 * 65536, 0, 3, ramfd), ==, EINVAL);
    g_assert_cmpuint(dma_map(&c, 0x400000, 65536, 4096, 3, ramfd), ==, EINVAL);
    g_assert_cmpuint(dma_map(&c, 0x400000, 4096, (uint64_t)1 << 40, 3, ramfd),
                     ==, EINVAL);
    g_assert_cmpuint(dma_map(&c, 0x400000, 65536, 0, 3, ramfd), ==, 0);
    g_assert_cmpuint(dma_unmap(&c, 0x400000, 4096, 0), ==, ENOENT);
    g_assert_cmpuint(dma_unmap(&c, 0x400000, 65536, 0), ==, 0);
    assert_serving(&c);

    /* DMA logging: ranges, pages and the report's bitmap are bounded. */
    g_assert_cmpuint(log_start(&c, VFU_DMA_LOG_MAX_RANGES + 1, 4096), ==,
                     EINVAL);
    g_assert_cmpuint(log_start(&c, 1, (uint64_t)1 << 40), ==, E2BIG);
    g_assert_cmpuint(log_start(&c, 1, (uint64_t)64 << 30), ==, 0);
    {
        struct vfu_dma_logging_report rep = {0, (uint64_t)64 << 30, 4096};
        g_assert_cmpuint(
            feature(&c,
                    VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_DMA_LOGGING_REPORT,
                    &rep, sizeof(rep), sizeof(rep) + ((size_t)2 << 20)),
            ==, E2BIG);
        rep.length = (uint64_t)1 << 30; /* 32 KiB of bitmap: fine */
        g_assert_cmpuint(
            feature(&c,
                    VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_DMA_LOGGING_REPORT,
                    &rep, sizeof(rep), sizeof(rep) + 32768),
            ==, 0);
    }
    g_assert_cmpuint(
        feature(&c, VFIO_DEVICE_FEATURE_SET | VFU_FEATURE_DMA_LOGGING_STOP,
                NULL, 0, 0),
        ==, 0);
    assert_serving(&c);

    munmap(ram, 65536);
    close(ramfd);
    munmap(vram, SEC_VRAM);
    conn_close(&c);
    sec_stop(&s);
}

/* -------------------------------------------------- DMA in mappings */

#define RAM_A      0x100000ull /* 1 MiB, read-write, holds the ring */
#define RAM_A_SIZE 0x100000ull
#define RAM_B      0x200000ull /* right after A: 64 KiB, read-only */
#define RAM_B_SIZE 0x10000ull
#define RAM_C      0x400000ull /* 64 KiB mapped without an fd */
#define RING_N     16u

struct ring {
    struct conn *c;
    uint8_t *a; /* mapping A in this process */
    uint32_t tail;
};

/* Submit @cmd at the tail and wait until the device is idle or halted;
 * returns ERROR_CODE. */
static uint32_t ring_run(struct ring *r, struct vgpu_cmd cmd)
{
    gint64 deadline = g_get_monotonic_time() + VGT_TIMEOUT_MS * 1000ll;
    uint32_t status;

    vgpu_cmd_encode(&cmd, r->a + r->tail * VGPU_CMD_SIZE);
    r->tail = (r->tail + 1) % RING_N;
    reg_wr(r->c, VGPU_REG_RING_TAIL, r->tail);
    reg_wr(r->c, VGPU_REG_DOORBELL, 1);
    do {
        status = reg_rd(r->c, VGPU_REG_STATUS);
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    } while ((status & VGPU_STATUS_BUSY) && !(status & VGPU_STATUS_HALTED));
    return reg_rd(r->c, VGPU_REG_ERROR_CODE);
}

/* @cmd latches DMA_FAULT at its index; the error is then cleared. */
static void expect_fault(struct ring *r, struct vgpu_cmd cmd, const char *what)
{
    uint32_t index = r->tail;

    g_test_message("DMA outside the mappings: %s", what);
    g_assert_cmpuint(ring_run(r, cmd), ==, VGPU_ERR_DMA_FAULT);
    g_assert_cmpuint(reg_rd(r->c, VGPU_REG_ERROR_INDEX), ==, index);
    g_assert_cmpuint(reg_rd(r->c, VGPU_REG_STATUS) & VGPU_STATUS_HALTED, !=, 0);
    /* latched: still there when read again */
    g_assert_cmpuint(reg_rd(r->c, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_DMA_FAULT);
    reg_wr(r->c, VGPU_REG_IRQ_STATUS, VGPU_IRQ_ERROR);
    g_assert_cmpuint(reg_rd(r->c, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
}

static void test_dma_mapped_only(void)
{
    g_autofree uint8_t *a0 = g_malloc(RAM_A_SIZE);
    g_autofree uint8_t *b0 = g_malloc(RAM_B_SIZE);
    g_autofree uint8_t *v0 = g_malloc(SEC_VRAM);
    uint8_t *a, *b, *vram;
    struct ring r;
    struct conn c;
    struct sec s;
    int afd, bfd;

    sec_start(&s, "sec-dma");
    conn_open(&c, &s, false);
    vram = map_vram(&c);
    afd = memfd_of(RAM_A_SIZE, &a);
    bfd = memfd_of(RAM_B_SIZE, &b);
    g_assert_cmpuint(dma_map(&c, RAM_A, RAM_A_SIZE, 0,
                             VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
                             afd),
                     ==, 0);
    g_assert_cmpuint(
        dma_map(&c, RAM_B, RAM_B_SIZE, 0, VFIO_DMA_MAP_FLAG_READ, bfd), ==, 0);
    g_assert_cmpuint(dma_map(&c, RAM_C, 0x10000, 0,
                             VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
                             -1),
                     ==, 0);
    fill_pattern(a + 0x1000, RAM_A_SIZE - 0x1000, 3);
    fill_pattern(b, RAM_B_SIZE, 4);
    fill_pattern(vram, SEC_VRAM, 5);
    r = (struct ring){&c, a, 0};
    reg_wr(&c, VGPU_REG_RING_BASE_LO, (uint32_t)RAM_A);
    reg_wr(&c, VGPU_REG_RING_BASE_HI, 0);
    reg_wr(&c, VGPU_REG_RING_SIZE, RING_N);

    /* The set-up works: a DMA inside A reaches VRAM. */
    g_assert_cmpuint(
        ring_run(&r, vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0, RAM_A + 0x1000,
                                   0x1000, 0, 0, 0)),
        ==, VGPU_ERR_NONE);
    g_assert_cmpmem(vram, 0x1000, a + 0x1000, 0x1000);

    memcpy(a0, a, RAM_A_SIZE);
    memcpy(b0, b, RAM_B_SIZE);
    memcpy(v0, vram, SEC_VRAM);
    expect_fault(
        &r,
        vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x2000, 0x300000, 0x1000, 0, 0, 0),
        "read from unmapped guest memory");
    expect_fault(&r,
                 vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x2000, RAM_A - 0x800,
                               0x1000, 0, 0, 0),
                 "read starting below a mapping");
    expect_fault(
        &r, vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, RAM_B, 0, 0x1000, 0, 0, 0),
        "write into a read-only mapping");
    expect_fault(
        &r,
        vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, RAM_B - 0x800, 0, 0x1000, 0, 0, 0),
        "write spanning two adjacent mappings");
    expect_fault(&r,
                 vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x2000,
                               RAM_B + RAM_B_SIZE - 0x800, 0x1000, 0, 0, 0),
                 "read past the end of a mapping");
    expect_fault(
        &r, vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, RAM_C, 0, 0x1000, 0, 0, 0),
        "write into a mapping without memory (no fd)");
    expect_fault(&r,
                 vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, UINT64_MAX - 0x7ff, 0,
                               0x1000, 0, 0, 0),
                 "write at an address that wraps");
    g_assert_cmpmem(
        a + RING_N * VGPU_CMD_SIZE, RAM_A_SIZE - RING_N * VGPU_CMD_SIZE,
        a0 + RING_N * VGPU_CMD_SIZE, RAM_A_SIZE - RING_N * VGPU_CMD_SIZE);
    g_assert_cmpmem(b, RAM_B_SIZE, b0, RAM_B_SIZE);
    g_assert_cmpmem(vram, SEC_VRAM, v0, SEC_VRAM);

    /* After an unmap the same range faults too. */
    g_assert_cmpuint(dma_unmap(&c, RAM_B, RAM_B_SIZE, 0), ==, 0);
    expect_fault(
        &r, vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, 0x2000, RAM_B, 0x1000, 0, 0, 0),
        "read from a range unmapped since");
    g_assert_cmpmem(vram, SEC_VRAM, v0, SEC_VRAM);
    /* And the device still works. */
    g_assert_cmpuint(
        ring_run(&r, vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, RAM_A + 0x8000,
                                   0x3000, 0x1000, 0, 0, 0)),
        ==, VGPU_ERR_NONE);
    g_assert_cmpmem(a + 0x8000, 0x1000, vram + 0x3000, 0x1000);

    munmap(a, RAM_A_SIZE);
    munmap(b, RAM_B_SIZE);
    close(afd);
    close(bfd);
    munmap(vram, SEC_VRAM);
    conn_close(&c);
    sec_stop(&s);
}

/* ------------------------------------------------ the incoming stream */

static void put_header(GByteArray *s, uint64_t vram, uint32_t features)
{
    put_header_ps(s, SEC_PAGE, vram, features);
}

/* PAGES claiming @first and @count, with @npages pages of @fill. */
static void put_pages(GByteArray *s, uint64_t first, uint32_t count,
                      uint32_t npages, uint8_t fill)
{
    size_t len = MIG_RUN_HDR_SIZE + (size_t)npages * SEC_PAGE;
    g_autofree uint8_t *p = g_malloc(len);

    vg_put_le64(p, first);
    vg_put_le32(p + 8, count);
    vg_put_le32(p + 12, 0);
    memset(p + MIG_RUN_HDR_SIZE, fill, len - MIG_RUN_HDR_SIZE);
    put_rec(s, MIG_REC_PAGES, p, (uint32_t)len);
}

enum bad_rec {
    BAD_PAGES_PAST_END,
    BAD_PAGES_WRAP,
    BAD_ZEROS_PAST_END,
    BAD_ZEROS_WRAP,
    BAD_COUNT_SHORT,
    BAD_COUNT_HUGE,
    BAD_RECORD_LENGTH,
    BAD_HEADER_VRAM,
};

static const struct {
    const char *name;
    uint32_t errnum;
    const char *message; /* in the stats' last_error */
} bad_recs[] = {
    [BAD_PAGES_PAST_END] = {"pages past the end", ERANGE,
                            "pages 255+2 outside VRAM of 256 pages"},
    [BAD_PAGES_WRAP] = {"page number wrapping", ERANGE,
                        "pages 18446744073709551615+2 outside VRAM"},
    [BAD_ZEROS_PAST_END] = {"zero run past the end", ERANGE,
                            "pages 0+257 outside VRAM of 256 pages"},
    [BAD_ZEROS_WRAP] = {"zero run wrapping", ERANGE,
                        "pages 18446744073709551614+4 outside VRAM"},
    [BAD_COUNT_SHORT] = {"count below the payload", EINVAL,
                         "run of 1 pages of 4096 bytes does not match "
                         "payload length 8208"},
    [BAD_COUNT_HUGE] = {"count above the payload", EINVAL,
                        "run of 4294967295 pages of 4096 bytes does not "
                        "match payload length 4112"},
    [BAD_RECORD_LENGTH] = {"oversized record", EINVAL,
                           "payload length 4294967295 outside"},
    [BAD_HEADER_VRAM] = {"HEADER with a larger VRAM", EINVAL,
                         "VRAM size mismatch: stream has 2097152 bytes, this "
                         "device has 1048576"},
};

static void put_bad(GByteArray *s, enum bad_rec which, uint32_t features)
{
    uint8_t h[MIG_REC_HDR_SIZE] = {0};

    switch (which) {
    case BAD_PAGES_PAST_END:
        put_pages(s, SEC_NPAGES - 1, 2, 2, 0xee);
        break;
    case BAD_PAGES_WRAP:
        put_pages(s, UINT64_MAX, 2, 2, 0xee);
        break;
    case BAD_ZEROS_PAST_END:
        put_zeros(s, 0, SEC_NPAGES + 1);
        break;
    case BAD_ZEROS_WRAP:
        put_zeros(s, UINT64_MAX - 1, 4);
        break;
    case BAD_COUNT_SHORT:
        put_pages(s, 10, 1, 2, 0xee);
        break;
    case BAD_COUNT_HUGE:
        put_pages(s, 10, UINT32_MAX, 1, 0xee);
        break;
    case BAD_RECORD_LENGTH: /* refused from its header alone */
        vg_put_le16(h, MIG_REC_PAGES);
        vg_put_le32(h + 4, UINT32_MAX);
        g_byte_array_append(s, h, sizeof(h));
        break;
    case BAD_HEADER_VRAM:
        break; /* the HEADER itself, see test_stream_in_vram */
    }
}

static void stream_case(struct conn *c, const struct sec *s, uint8_t *vram,
                        enum bad_rec which, uint32_t features)
{
    g_autoptr(GByteArray) good = g_byte_array_new();
    g_autoptr(GByteArray) bad = g_byte_array_new();
    g_autofree uint8_t *want = g_malloc(SEC_VRAM);
    struct vg_stats st;

    g_test_message("crafted stream: %s", bad_recs[which].name);
    g_assert_cmpuint(request(c, VFU_CMD_DEVICE_RESET, NULL, 0), ==, 0);
    fill_pattern(vram, SEC_VRAM, (uint8_t)(0x40 + which));
    memcpy(want, vram, SEC_VRAM);
    g_assert_cmpuint(set_state(c, MIG_STATE_STOP), ==, 0);
    g_assert_cmpuint(set_state(c, MIG_STATE_RESUMING), ==, 0);
    if (which == BAD_HEADER_VRAM) {
        put_header(bad, 2 * SEC_VRAM, features);
        put_pages(bad, SEC_NPAGES + 3, 1, 1, 0xee); /* never reached */
    } else {
        /* a HEADER and one good page first: that page is loaded */
        put_header(good, SEC_VRAM, features);
        put_pages(good, 3, 1, 1, 0xd3);
        g_assert_cmpuint(mig_data_write(c, good), ==, 0);
        memset(want + 3 * SEC_PAGE, 0xd3, SEC_PAGE);
        put_bad(bad, which, features);
    }
    g_assert_cmpuint(mig_data_write(c, bad), ==, bad_recs[which].errnum);
    g_assert_cmpuint(get_state(c), ==, MIG_STATE_ERROR);
    VGT_OK(vg_stats_read(s->stats, &st, VGT_ERR));
    g_test_message("last_error: %s", st.last_error);
    g_assert_nonnull(strstr(st.last_error, bad_recs[which].message));
    vg_stats_clear(&st);
    g_assert_cmpmem(vram, SEC_VRAM, want, SEC_VRAM);
    assert_serving(c);
}

static void test_stream_in_vram(void)
{
    uint32_t features;
    uint8_t *vram;
    struct conn c;
    struct sec s;

    sec_start(&s, "sec-stream");
    conn_open(&c, &s, true);
    vram = map_vram(&c);
    features = reg_rd(&c, VGPU_REG_FEATURES);
    for (unsigned i = 0; i < G_N_ELEMENTS(bad_recs); i++) {
        stream_case(&c, &s, vram, (enum bad_rec)i, features);
    }
    munmap(vram, SEC_VRAM);
    conn_close(&c);
    sec_stop(&s);
}

/* ---------------------------------------------------- the hash seed */

/* Every 8-byte getrandom() result while recording, in order. */
static GArray *drawn;

/* Interposes the C library's getrandom() for this program (and the
 * library code linked into it): records what it hands out. */
ssize_t getrandom(void *buf, size_t len, unsigned int flags)
{
    long n = syscall(SYS_getrandom, buf, len, flags);

    if (n == 8 && len == 8 && drawn) {
        uint64_t v;
        memcpy(&v, buf, 8);
        g_array_append_val(drawn, v);
    }
    return n;
}

static void *no_dma(void *opaque, uint64_t iova, uint64_t len, bool write)
{
    return NULL;
}

static void no_irq(void *opaque, unsigned vector)
{
}

/* Read the stream of the current phase until no data is left now. */
static void read_phase(struct mig *m, GByteArray *out)
{
    g_autofree uint8_t *buf = g_malloc(65536);
    struct vg_error err;
    uint32_t got;

    do {
        g_assert_cmpint(mig_read(m, buf, 65536, &got, &err), ==, 0);
        g_byte_array_append(out, buf, got);
    } while (got > 0);
}

/* One whole migration (pre-copy, a round, stop-copy); the seeds drawn
 * while its session was open are appended to @seeds. */
static void one_migration(struct mig *m, uint8_t *vram, GByteArray *stream,
                          GArray *seeds)
{
    struct vg_error err;
    uint64_t initial, dirty;

    drawn = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    g_assert_cmpint(mig_set_state(m, MIG_STATE_PRE_COPY, &err), ==, 0);
    read_phase(m, stream);
    memset(vram + 5 * SEC_PAGE, 0x99, SEC_PAGE); /* unseen CPU-style write */
    g_assert_cmpint(mig_precopy_info(m, &initial, &dirty, &err), ==, 0);
    read_phase(m, stream);
    g_assert_cmpint(mig_set_state(m, MIG_STATE_STOP_COPY, &err), ==, 0);
    read_phase(m, stream);
    g_assert_cmpint(mig_set_state(m, MIG_STATE_STOP, &err), ==, 0);
    g_assert_cmpint(mig_set_state(m, MIG_STATE_RUNNING, &err), ==, 0);
    g_array_append_vals(seeds, drawn->data, drawn->len);
    g_array_free(drawn, TRUE);
    drawn = NULL;
}

/* Whether the 8 bytes of @v (either byte order) occur in @s. */
static bool stream_has(const GByteArray *s, uint64_t v)
{
    uint8_t le[8], be[8];

    vg_put_le64(le, v);
    for (int i = 0; i < 8; i++) {
        be[i] = le[7 - i];
    }
    return memmem(s->data, s->len, le, 8) || memmem(s->data, s->len, be, 8);
}

static void test_hash_seed(void)
{
    struct vgpu_config gc = {.vram_size = SEC_VRAM, .page_size = SEC_PAGE};
    struct vgpu_host host = {NULL, no_dma, no_irq};
    g_autoptr(GByteArray) s1 = g_byte_array_new();
    g_autoptr(GByteArray) s2 = g_byte_array_new();
    g_autoptr(GArray) seeds1 = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    g_autoptr(GArray) seeds2 = g_array_new(FALSE, FALSE, sizeof(uint64_t));
    struct mig_config mc = {0};
    struct vg_error err;
    struct vgpu *gpu;
    struct mig *m;
    uint8_t *vram;

    vg_log_set_level(VG_LOG_WARN); /* the module's info lines are noise */
    g_assert_cmpint(vgpu_new(&gc, &host, &gpu, &err), ==, 0);
    vram = vgpu_vram(gpu);
    fill_pattern(vram, SEC_VRAM / 2, 9);
    mc.gpu = gpu;
    mc.track = MIG_TRACK_HYBRID;
    vgpu_bar0_read(gpu, VGPU_REG_FEATURES, &mc.features, 4);
    g_assert_cmpint(mig_new(&mc, &m, &err), ==, 0);
    mig_note_bar2_shared(m); /* hash every page: the seed is in use */

    one_migration(m, vram, s1, seeds1);
    one_migration(m, vram, s2, seeds2);
    g_test_message("seeds drawn: %u by the first migration, %u by the second",
                   seeds1->len, seeds2->len);
    g_assert_cmpuint(seeds1->len, >=, 1);
    g_assert_cmpuint(seeds2->len, >=, 1);
    for (unsigned i = 0; i < seeds1->len; i++) {
        uint64_t a = g_array_index(seeds1, uint64_t, i);
        for (unsigned j = 0; j < seeds2->len; j++) {
            g_assert_cmphex(a, !=, g_array_index(seeds2, uint64_t, j));
        }
    }
    /* The streams are real (HEADER ... END) and carry no seed. */
    g_assert_cmpuint(s1->len, >, SEC_VRAM / 2);
    g_assert_cmpmem(s1->data + MIG_REC_HDR_SIZE, 8, MIG_STREAM_MAGIC, 8);
    g_assert_cmpuint(
        vg_get_le16(s1->data + s1->len - MIG_REC_HDR_SIZE - MIG_END_SIZE), ==,
        MIG_REC_END);
    for (unsigned i = 0; i < seeds1->len; i++) {
        g_assert_false(stream_has(s1, g_array_index(seeds1, uint64_t, i)));
        g_assert_false(stream_has(s2, g_array_index(seeds1, uint64_t, i)));
    }
    for (unsigned i = 0; i < seeds2->len; i++) {
        g_assert_false(stream_has(s1, g_array_index(seeds2, uint64_t, i)));
        g_assert_false(stream_has(s2, g_array_index(seeds2, uint64_t, i)));
    }
    mig_free(m);
    vgpu_free(gpu);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/security/other-user", test_other_user);
    g_test_add_func("/security/bounds", test_bounds);
    g_test_add_func("/security/dma-mapped-only", test_dma_mapped_only);
    g_test_add_func("/security/stream-in-vram", test_stream_in_vram);
    g_test_add_func("/security/hash-seed", test_hash_seed);
    return g_test_run();
}
