/*
 * test-data-plane -- the server's data plane thread (vfio-user/vfu-plane.c)
 * through a real socket against the real vgpu-server, by a raw vfio-user
 * client (vfu-client.h).  The server runs with the test-only fault
 * read-delay:MS, so that every read of migration data takes MS ms.
 *
 *  - prompt: a register read sent after a MIG_DATA_READ_SHM is answered
 *    first, well before the read, and a config space read too; with
 *    --no-data-plane (the server serves the read on its control loop)
 *    the register read's reply comes after the read's.
 *  - ordered: a request that is not served beside the plane (the device
 *    state's GET) waits for the reads before it; more reads than the
 *    plane's queue holds come back in order, every one of them whole.
 *  - disconnect: a client that leaves with reads in flight; the server
 *    serves the next client, and its device leaves PRE_COPY.
 *  - end-flag: pre-copy reads' replies carry no flag; in STOP_COPY the
 *    reply whose data end the stream says END (VFU_MIG_SHM_IO_END, QEMU
 *    patch 0072), earlier ones do not, and an empty read after it says
 *    END again; served by the plane and by the control loop alike.
 *  - thread-names: the server's threads say what they are (vgs/plane,
 *    vgs/device, vgs/hash in /proc's comm, as top -H and perf show
 *    them); with --no-data-plane there is no plane thread.
 *  - device-thread: the guest's commands (a FILL of VRAM, then a FENCE)
 *    submitted behind a slow pre-copy read complete before the read's
 *    reply, on the device's own thread (vfio-user/vfu-devthread.c); with
 *    --no-device-thread they wait for the read.
 */
#include "vfu-client.h"

#include <sys/stat.h>

#include "vgpu/cmd.h"

#define DP_VRAM_ARG   "64M"
#define DP_VRAM_SIZE  (64u << 20)
#define DP_SLOTS      32u /* vgpu-server --data-slots default */
#define DP_SLOT_SIZE  (4u << 20)
#define DP_DELAY_MS   300
#define DP_QUEUE_PLUS 12u /* reads in flight: more than the plane queues */

#define DP_CAPS                                                                \
    "{\"capabilities\":{\"max_msg_fds\":8,\"max_data_xfer_size\":1048576,"     \
    "\"migration\":{\"pgsize\":4096,\"precopy_info\":true,"                    \
    "\"region_dirty_log\":true,\"data_shm\":true}}}"

/* A server with read-delay:@delay_ms and @option (--no-data-plane,
 * --no-device-thread or NULL); connected, VRAM filled (so that every read
 * fills its slot), its data_shm area mapped, the device in PRE_COPY. */
static uint8_t *dp_start_opt(struct sec *s, struct conn *c, unsigned delay_ms,
                             const char *option)
{
    g_autofree char *fault = g_strdup_printf("read-delay:%u", delay_ms);
    const char *extra[] = {"--fault", fault, option, NULL};
    const uint32_t req[2] = {sizeof(struct vfu_mig_shm), 0};
    struct vfu_mig_shm reply = {0};
    struct stat st;
    uint8_t *vram;
    int fd = -1;
    void *map;

    sec_start_opts(s, option ? option + 2 : "dp-plane", DP_VRAM_ARG, "64K",
                   extra);
    conn_open_caps(c, s, DP_CAPS);
    vram = map_vram_size(c, DP_VRAM_SIZE);
    fill_pattern(vram, DP_VRAM_SIZE, 0x5d);
    munmap(vram, DP_VRAM_SIZE);
    g_assert_cmpuint(request_ex(c, VFU_CMD_MIG_DATA_SHM, req, sizeof(req), 0,
                                -1, &reply, sizeof(reply), NULL, &fd),
                     ==, 0);
    g_assert_cmpuint(reply.slots, ==, DP_SLOTS);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(fstat(fd, &st), ==, 0);
    map = mmap(NULL, st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(map != MAP_FAILED);
    close(fd);
    g_assert_cmpuint(set_state(c, MIG_STATE_PRE_COPY), ==, 0);
    return map;
}

static uint8_t *dp_start(struct sec *s, struct conn *c, unsigned delay_ms,
                         bool no_plane)
{
    return dp_start_opt(s, c, delay_ms, no_plane ? "--no-data-plane" : NULL);
}

static void dp_stop(struct sec *s, struct conn *c, uint8_t *area)
{
    munmap(area, (size_t)DP_SLOTS * DP_SLOT_SIZE);
    conn_close(c);
    sec_stop(s);
}

/* Send request @cmd with @len bytes of @payload without waiting; its id. */
static uint16_t dp_send(struct conn *c, uint16_t cmd, const void *payload,
                        size_t len)
{
    struct vfu_hdr h = {
        .id = ++c->id, .command = cmd, .size = (uint32_t)(sizeof(h) + len)};

    send_all(c->fd, &h, sizeof(h), -1);
    send_all(c->fd, payload, len, -1);
    return h.id;
}

/* A MIG_DATA_READ_SHM of a whole slot, not waited for. */
static uint16_t dp_send_read(struct conn *c, uint32_t slot)
{
    struct vfu_mig_shm_io io = {sizeof(io), slot, DP_SLOT_SIZE, 0};

    return dp_send(c, VFU_CMD_MIG_DATA_READ_SHM, &io, sizeof(io));
}

/* A REGION_READ of 4 bytes at @off of @region, not waited for. */
static uint16_t dp_send_region_read(struct conn *c, uint32_t region,
                                    uint64_t off)
{
    struct vfu_region_rw rw = {.offset = off, .region = region, .count = 4};

    return dp_send(c, VFU_CMD_REGION_READ, &rw, sizeof(rw));
}

/* The next reply: it must be a successful one; its header, and its
 * payload in @body (@size bytes at most). */
static struct vfu_hdr dp_reply(struct conn *c, void *body, size_t size)
{
    struct vfu_hdr h;

    recv_all(c->fd, &h, sizeof(h), NULL);
    g_assert_cmpuint(h.flags & VFU_FLAG_TYPE_MASK, ==, VFU_FLAG_REPLY);
    g_assert_cmpuint(h.flags & VFU_FLAG_ERROR, ==, 0);
    g_assert_cmpuint(h.size, >=, sizeof(h));
    g_assert_cmpuint(h.size - sizeof(h), <=, size);
    if (h.size > sizeof(h)) {
        recv_all(c->fd, body, h.size - sizeof(h), NULL);
    }
    return h;
}

/* The reply to the read @id: most of a slot's worth of the stream. */
static void dp_expect_read(struct conn *c, uint16_t id, uint32_t slot)
{
    struct vfu_mig_shm_io io = {0};
    struct vfu_hdr h = dp_reply(c, &io, sizeof(io));

    g_assert_cmpuint(h.id, ==, id);
    g_assert_cmpuint(h.command, ==, VFU_CMD_MIG_DATA_READ_SHM);
    g_assert_cmpuint(io.slot, ==, slot);
    /* Whole records of non-zero pages: 13 reads are less than VRAM. */
    g_assert_cmpuint(io.size, >, DP_SLOT_SIZE / 2);
    g_assert_cmpuint(io.size, <=, DP_SLOT_SIZE);
}

/* The reply to the register read @id: the device's ID register. */
static void dp_expect_id(struct conn *c, uint16_t id)
{
    struct {
        struct vfu_region_rw rw;
        uint32_t v;
    } r = {0};
    struct vfu_hdr h = dp_reply(c, &r, sizeof(r));

    g_assert_cmpuint(h.id, ==, id);
    g_assert_cmpuint(h.command, ==, VFU_CMD_REGION_READ);
    g_assert_cmphex(vg_get_le32((const uint8_t *)&r.v), ==, VGPU_ID_MAGIC);
}

/* With the plane, a register read and a config read sent behind a slow
 * read are answered before it; without it, after it. */
static void test_prompt(void)
{
    struct sec s;
    struct conn c;

    for (int no_plane = 0; no_plane <= 1; no_plane++) {
        uint8_t *area = dp_start(&s, &c, DP_DELAY_MS, no_plane);
        gint64 t0 = g_get_monotonic_time(), reg_ms;
        uint16_t rd = dp_send_read(&c, 0);
        uint16_t reg = dp_send_region_read(&c, VGPU_BAR_REGS, VGPU_REG_ID);
        uint16_t cfg = dp_send_region_read(&c, VFIO_PCI_CONFIG_REGION_INDEX, 0);
        struct {
            struct vfu_region_rw rw;
            uint32_t v;
        } r = {0};
        struct vfu_hdr h;

        if (no_plane) {
            dp_expect_read(&c, rd, 0);
            dp_expect_id(&c, reg);
        } else {
            dp_expect_id(&c, reg);
        }
        reg_ms = (g_get_monotonic_time() - t0) / 1000;
        h = dp_reply(&c, &r, sizeof(r));
        g_assert_cmpuint(h.id, ==, cfg);
        g_assert_cmphex(vg_get_le32((const uint8_t *)&r.v) & 0xffff, ==,
                        VGPU_PCI_VENDOR_ID);
        if (!no_plane) {
            dp_expect_read(&c, rd, 0);
            g_assert_cmpint(reg_ms, <, DP_DELAY_MS);
        } else {
            g_assert_cmpint(reg_ms, >=, DP_DELAY_MS);
        }
        g_test_message("%s: the register read's reply after %" G_GINT64_FORMAT
                       " ms, a data read takes %d ms",
                       no_plane ? "--no-data-plane" : "data plane", reg_ms,
                       DP_DELAY_MS);
        assert_serving(&c);
        dp_stop(&s, &c, area);
    }
}

/* The reply to the read @id, whatever its size. */
static struct vfu_mig_shm_io dp_read_reply(struct conn *c, uint16_t id)
{
    struct vfu_mig_shm_io io = {0};
    struct vfu_hdr h = dp_reply(c, &io, sizeof(io));

    g_assert_cmpuint(h.id, ==, id);
    g_assert_cmpuint(h.command, ==, VFU_CMD_MIG_DATA_READ_SHM);
    return io;
}

/* END on the stop-copy reply that ends the stream, on no other. */
static void test_end_flag(void)
{
    /* Pre-copy reads one slot: the rest of VRAM goes in stop-copy, in
     * reads of whole records (a slot holds most of one). */
    const unsigned max_reads = 2 * (DP_VRAM_SIZE / DP_SLOT_SIZE) + 2;
    struct sec s;
    struct conn c;

    for (int no_plane = 0; no_plane <= 1; no_plane++) {
        uint8_t *area = dp_start(&s, &c, 1, no_plane);
        struct vfu_mig_shm_io io = dp_read_reply(&c, dp_send_read(&c, 0));
        unsigned reads = 0;

        g_assert_cmpuint(io.size, >, 0);
        g_assert_cmphex(io.flags, ==, 0);
        g_assert_cmpuint(set_state(&c, MIG_STATE_STOP_COPY), ==, 0);
        do {
            io = dp_read_reply(&c, dp_send_read(&c, reads % 2));
            g_assert_cmpuint(io.size, >, 0); /* END comes with data */
            g_assert_cmpuint(++reads, <=, max_reads);
        } while (io.flags == 0);
        g_assert_cmphex(io.flags, ==, VFU_MIG_SHM_IO_END);
        g_assert_cmpuint(reads, >, DP_VRAM_SIZE / DP_SLOT_SIZE / 2);
        io = dp_read_reply(&c, dp_send_read(&c, 0));
        g_assert_cmpuint(io.size, ==, 0);
        g_assert_cmphex(io.flags, ==, VFU_MIG_SHM_IO_END);
        g_test_message("%s: END with stop-copy read %u",
                       no_plane ? "--no-data-plane" : "data plane", reads);
        assert_serving(&c);
        dp_stop(&s, &c, area);
    }
}

/* A state GET waits for the reads queued before it; a burst of reads
 * longer than the plane's queue comes back in order, whole. */
static void test_ordered(void)
{
    uint16_t ids[DP_QUEUE_PLUS];
    struct sec s;
    struct conn c;
    uint8_t *area = dp_start(&s, &c, 20, false);
    struct {
        struct vfu_device_feature h;
        struct vfu_feature_mig_state st;
    } f = {{sizeof(f), VFIO_DEVICE_FEATURE_GET | VFU_FEATURE_MIG_DEVICE_STATE},
           {0, -1}};
    uint16_t rd = dp_send_read(&c, 0), get;
    struct vfu_hdr h;

    get = dp_send(&c, VFU_CMD_DEVICE_FEATURE, &f, sizeof(f));
    dp_expect_read(&c, rd, 0);
    h = dp_reply(&c, &f, sizeof(f));
    g_assert_cmpuint(h.id, ==, get);
    g_assert_cmpuint(f.st.device_state, ==, MIG_STATE_PRE_COPY);
    for (unsigned i = 0; i < DP_QUEUE_PLUS; i++) {
        ids[i] = dp_send_read(&c, i % DP_SLOTS);
    }
    for (unsigned i = 0; i < DP_QUEUE_PLUS; i++) {
        dp_expect_read(&c, ids[i], i % DP_SLOTS);
    }
    assert_serving(&c);
    dp_stop(&s, &c, area);
}

/* A client gone with reads in flight; the next one is served. */
static void test_disconnect(void)
{
    struct sec s;
    struct conn c;
    uint8_t *area = dp_start(&s, &c, 100, false);

    for (unsigned i = 0; i < 4; i++) {
        dp_send_read(&c, i);
    }
    conn_close(&c);
    conn_open_caps(&c, &s, DP_CAPS);
    assert_serving(&c);
    /* The migration state outlives a client, as without the plane. */
    g_assert_cmpuint(get_state(&c), ==, MIG_STATE_PRE_COPY);
    g_assert_cmpuint(set_state(&c, MIG_STATE_RUNNING), ==, 0);
    dp_stop(&s, &c, area);
}

#define DP_RING_IOVA 0x100000ull
#define DP_RING_N    16u
#define DP_RING_SIZE 4096u /* a DMA page */
#define DP_FENCE     0x5eed0001u
#define DP_FILL      0xa5a55a5au

/* Put @cmd at ring entry @i of the ring mapped at @ring. */
static void dp_ring_put(uint8_t *ring, unsigned i, struct vgpu_cmd cmd)
{
    vgpu_cmd_encode(&cmd, ring + i * VGPU_CMD_SIZE);
}

/* The fence register's value, read while the read @rd may answer first
 * (then *@read_done is set and its reply checked). */
static uint32_t dp_fence(struct conn *c, uint16_t rd, bool *read_done)
{
    uint16_t id = dp_send_region_read(c, VGPU_BAR_REGS, VGPU_REG_FENCE_LO);

    for (;;) {
        struct {
            struct vfu_region_rw rw;
            uint32_t v;
        } r = {0};
        struct vfu_hdr h = dp_reply(c, &r, sizeof(r));

        if (h.id == id) {
            return vg_get_le32((const uint8_t *)&r.v);
        }
        g_assert_cmpuint(h.id, ==, rd);
        g_assert_false(*read_done);
        *read_done = true;
    }
}

/* The device's thread runs the guest's commands while a pre-copy read is
 * served; without it they wait for the read. */
static void test_device_thread(void)
{
    for (int inline_step = 0; inline_step <= 1; inline_step++) {
        struct sec s;
        struct conn c;
        uint8_t *area = dp_start_opt(&s, &c, DP_DELAY_MS,
                                     inline_step ? "--no-device-thread" : NULL);
        uint8_t *ring;
        int fd = memfd_of(DP_RING_SIZE, &ring);
        bool read_done = false, before;
        gint64 t0;
        uint16_t rd;
        uint32_t fence = 0;

        g_assert_cmpuint(dma_map(&c, DP_RING_IOVA, DP_RING_SIZE, 0,
                                 VFIO_DMA_MAP_FLAG_READ, fd),
                         ==, 0);
        reg_wr(&c, VGPU_REG_RING_BASE_LO, (uint32_t)DP_RING_IOVA);
        reg_wr(&c, VGPU_REG_RING_BASE_HI, 0);
        reg_wr(&c, VGPU_REG_RING_SIZE, DP_RING_N);
        dp_ring_put(ring, 0,
                    (struct vgpu_cmd){.opcode = VGPU_OP_FILL,
                                      .arg = {0, 4096, DP_FILL}});
        dp_ring_put(
            ring, 1,
            (struct vgpu_cmd){.opcode = VGPU_OP_FENCE, .arg = {DP_FENCE}});
        t0 = g_get_monotonic_time();
        rd = dp_send_read(&c, 0);
        /* Register writes are answered beside the read (test_prompt). */
        dp_send(&c, VFU_CMD_REGION_WRITE, &(struct {
            struct vfu_region_rw rw;
            uint32_t v;
        }){{VGPU_REG_RING_TAIL, VGPU_BAR_REGS, 4}, 2},
                sizeof(struct vfu_region_rw) + 4);
        dp_send(&c, VFU_CMD_REGION_WRITE, &(struct {
            struct vfu_region_rw rw;
            uint32_t v;
        }){{VGPU_REG_DOORBELL, VGPU_BAR_REGS, 4}, 1},
                sizeof(struct vfu_region_rw) + 4);
        for (int i = 0; i < 2; i++) {
            struct vfu_region_rw w;
            struct vfu_hdr h = dp_reply(&c, &w, sizeof(w));

            g_assert_cmpuint(h.command, ==, VFU_CMD_REGION_WRITE);
        }
        while (fence != DP_FENCE && !read_done) {
            fence = dp_fence(&c, rd, &read_done);
            g_usleep(1000);
        }
        /* Seen done before the read's reply came, or only after it. */
        before = fence == DP_FENCE && !read_done;
        g_test_message(
            "%s: the fence seen %s the read's reply, after %" G_GINT64_FORMAT
            " ms; a read takes %d ms",
            inline_step ? "--no-device-thread" : "device thread",
            before ? "before" : "only after",
            (g_get_monotonic_time() - t0) / 1000, DP_DELAY_MS);
        g_assert_true(before == !inline_step);
        if (before) {
            dp_expect_read(&c, rd, 0); /* then the read's reply */
        }
        while (dp_fence(&c, rd, &read_done) != DP_FENCE) {
            g_assert_cmpint(g_get_monotonic_time() - t0, <,
                            10 * G_USEC_PER_SEC);
        }
        g_assert_cmpuint(reg_rd(&c, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
        assert_serving(&c);
        close(fd);
        munmap(ring, DP_RING_SIZE);
        dp_stop(&s, &c, area);
    }
}

/* How many of the server's threads are named @name. */
static unsigned dp_threads_named(struct sec *s, const char *name)
{
    g_autofree char *dir =
        g_strdup_printf("/proc/%d/task", (int)s->srv->proc.pid);
    g_autoptr(GDir) d = g_dir_open(dir, 0, NULL);
    const char *tid;
    unsigned n = 0;

    g_assert_nonnull(d);
    while ((tid = g_dir_read_name(d))) {
        g_autofree char *path = g_strdup_printf("%s/%s/comm", dir, tid);
        g_autofree char *comm = NULL;

        if (g_file_get_contents(path, &comm, NULL, NULL)) {
            g_strchomp(comm);
            n += strcmp(comm, name) == 0;
        }
    }
    return n;
}

static void test_thread_names(void)
{
    for (int no_plane = 0; no_plane <= 1; no_plane++) {
        struct sec s = {0};
        struct conn c = {0};
        uint8_t *area = dp_start(&s, &c, 1, no_plane);

        g_assert_cmpuint(dp_threads_named(&s, "vgs/plane"), ==, !no_plane);
        g_assert_cmpuint(dp_threads_named(&s, "vgs/device"), ==, 1);
        g_assert_cmpuint(dp_threads_named(&s, "vgs/hash"), >=, 1);
        g_assert_cmpuint(dp_threads_named(&s, "vgpu-server"), ==, 1);
        dp_stop(&s, &c, area);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/data-plane/prompt", test_prompt);
    g_test_add_func("/data-plane/ordered", test_ordered);
    g_test_add_func("/data-plane/disconnect", test_disconnect);
    g_test_add_func("/data-plane/end-flag", test_end_flag);
    g_test_add_func("/data-plane/device-thread", test_device_thread);
    g_test_add_func("/data-plane/thread-names", test_thread_names);
    return g_test_run();
}
