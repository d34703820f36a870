/*
 * test-mig-postcopy -- post-copy migration of a vGPU VM: VRAM on demand.
 *
 * The source is held in pre-copy while the guest CPU rewrites parts of
 * VRAM through BAR2 and the engines FILL others, then switched over with
 * migrate-start-postcopy.  The destination runs before its VRAM is all
 * there: its server fetches the pages the switchover left behind from the
 * source's page server, the ones QEMU touches first on demand.  The whole
 * of the destination's VRAM, read through BAR2 while the pages arrive,
 * must equal the source's (read through the source's BAR2 once the source
 * stopped, plus a COPY the destination's engines ran first), the
 * checksums of the pages must match, and the pages' digest must be
 * verified.
 * A guest CPU writing VRAM faster than a slow link drains it, which
 * pre-copy never gets past, switches over at migrate-start-postcopy with
 * QEMU's default downtime limit (the device's data counts as can_postcopy,
 * patch 0039), and the destination holds VRAM as filled plus every write
 * made before the stop.
 * The same over a TCP page channel (--postcopy-listen), as between hosts.
 * A server that refuses post-copy (--no-postcopy) makes QEMU refuse the
 * migration with its reason, and the source keeps running intact.
 * A migration with postcopy-ram that completes in pre-copy, never
 * switched, leaves no userfaultfd open in the destination's QEMU or server
 * (the DMA userfaultfd of patch 0047 is handed over when the destination
 * is advised of post-copy).
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include "mig-test.h"
#include "qclient/cpu-writer.h"

#define HOLD_BANDWIDTH (16 << 20)
#define MIB            (1ull << 20)
/* A COPY the destination runs first: from filled MiBs to zero ones. */
#define COPY_SRC (40 * MIB)
#define COPY_DST (56 * MIB)
#define COPY_LEN (4 * MIB)

/* Poll callback: stop once pre-copy has sent VRAM data. */
static int transferring(const struct vg_mig_info *info, void *opaque,
                        struct vg_error *err)
{
    return !strcmp(info->status, "active") && info->vfio_transferred > 0;
}

static void set_postcopy(struct vg_qmp *qmp)
{
    VGT_OK(vg_mig_set_capability(qmp, "postcopy-ram", true, VGT_ERR));
}

/* A source (server arguments @srv_extra) with VRAM filled, and a
 * destination listening, both with postcopy-ram. */
static void start_pair(struct mt *t, const char *tag,
                       const char *const *srv_extra)
{
    mt_start_src(t, tag, srv_extra);
    mt_fill_vram(t);
    set_postcopy(t->src.qemu->qmp);
    mt_start_dst_with(t, VGT_VRAM_ARG, NULL, NULL);
    set_postcopy(t->dst.qemu->qmp);
    mt_listen(t);
}

/* Migrate and ask for post-copy at once. */
static void migrate_postcopy_now(struct mt *t)
{
    VGT_OK(vg_mig_start(t->src.qemu->qmp, t->uri, VGT_ERR));
    VGT_OK(vg_qmp_execute(t->src.qemu->qmp, "migrate-start-postcopy", NULL,
                          NULL, VGT_ERR));
}

/* Dirty VRAM while pre-copy runs: CPU stores through BAR2 into MiBs
 * 0-15 and an engine FILL of MiB 20-23. */
static void dirty_vram(struct mt *t, uint32_t round)
{
    for (uint64_t mib = 0; mib < 16; mib++) {
        uint64_t v = 0x5000000000000000ull | round << 16 | mib;

        VGT_OK(vg_qtest_writeq(t->src.qemu->qt,
                               t->gpu.vram_addr + mib * MIB + round * 4096, v,
                               VGT_ERR));
    }
    {
        struct vgpu_cmd fill = vgpu_cmd_make(VGPU_OP_FILL, 20 * MIB, 4 * MIB,
                                             0xc0de0000u | round, 0, 0, 0);
        mt_run(&t->gpu, &fill, 1);
    }
}

static bool postcopy_done(const struct vg_stats *st, void *opaque)
{
    g_autofree char *done = vg_stats_str(st, "postcopy_done");

    return done && strcmp(done, "true") == 0 && st->vram_checksum[0];
}

/* @data: the source server's extra arguments (NULL-terminated). */
static void test_postcopy(gconstpointer data)
{
    struct mt t;
    struct vg_mig_info info;
    struct vg_stats s, d;
    g_autofree uint8_t *src_vram = g_malloc(VGT_VRAM_SIZE);
    g_autofree uint8_t *dst_vram = g_malloc(VGT_VRAM_SIZE);
    g_autofree char *verified = NULL, *on_demand = NULL;
    int64_t pages, fetched, served;
    struct vgpu_cmd copy =
        vgpu_cmd_make(VGPU_OP_COPY, COPY_DST, COPY_SRC, COPY_LEN, 0, 0, 0);

    start_pair(&t, "postcopy", data);
    mt_hold(&t, HOLD_BANDWIDTH);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    VGT_OK(vg_mig_poll(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, transferring, NULL,
                       &info, VGT_ERR));
    for (uint32_t round = 1; round <= 8; round++) {
        dirty_vram(&t, round);
        g_usleep(50 * 1000);
    }
    VGT_OK(vg_qmp_execute(t.src.qemu->qmp, "migrate-start-postcopy", NULL, NULL,
                          VGT_ERR));
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    /* The engines first: a COPY out of pages that may still be missing
     * (it waits for them), then every page through BAR2. */
    mt_run(&t.dgpu, &copy, 1);
    VGT_OK(vg_qtest_memread(t.dst.qemu->qt, t.dgpu.vram_addr, dst_vram,
                            VGT_VRAM_SIZE, VGT_ERR));
    VGT_OK(vg_qtest_memread(t.src.qemu->qt, t.gpu.vram_addr, src_vram,
                            VGT_VRAM_SIZE, VGT_ERR));
    memcpy(src_vram + COPY_DST, src_vram + COPY_SRC, COPY_LEN);
    for (uint64_t off = 0; off < VGT_VRAM_SIZE; off += VGT_PAGE_SIZE) {
        if (memcmp(src_vram + off, dst_vram + off, VGT_PAGE_SIZE) != 0) {
            MT_FAIL("destination VRAM differs at 0x%" G_GINT64_MODIFIER "x",
                    off);
        }
    }
    VGT_OK(vg_stats_wait(t.dst.stats, postcopy_done, NULL, MT_STATS_TIMEOUT_MS,
                         &d, VGT_ERR));
    VGT_OK(vg_stats_wait(t.src.stats, postcopy_done, NULL, MT_STATS_TIMEOUT_MS,
                         &s, VGT_ERR));
    pages = mt_stat_int(&s, "postcopy_pages");
    served = mt_stat_int(&s, "postcopy_served");
    fetched = mt_stat_int(&d, "postcopy_fetched");
    verified = vg_stats_str(&d, "postcopy_verified");
    on_demand = vg_stats_str(&d, "postcopy_on_demand");
    g_test_message("post-copy: %" G_GINT64_FORMAT
                   " pages left behind, %" G_GINT64_FORMAT
                   " fetched (%" G_GINT64_FORMAT
                   " faults), in %.1f ms; stop-copy sent %" G_GINT64_FORMAT
                   " bytes, downtime %" G_GINT64_FORMAT " ms",
                   pages, fetched, mt_stat_int(&d, "postcopy_faults"),
                   mt_stat_double(&d, "postcopy_ms"),
                   mt_stat_int(&s, "stopcopy_bytes"), info.downtime_ms);
    g_assert_cmpint(pages, >, 0); /* the dirtied MiBs at least */
    g_assert_cmpint(mt_stat_int(&d, "postcopy_pages"), ==, pages);
    g_assert_cmpint(fetched, ==, pages);
    g_assert_cmpint(served, ==, pages);
    g_assert_cmpint(mt_stat_int(&s, "final_dirty_bytes"), ==, 0);
    g_assert_cmpstr(verified, ==, "true");
    g_assert_cmpstr(on_demand, ==, "true");
    /* The destination's checksums are of what the migration delivered,
     * although its COPY ran before the last page: the source's. */
    g_assert_cmpstr(d.vram_checksum, ==, s.vram_checksum);
    g_assert_cmpstr(d.device_state_checksum, ==, s.device_state_checksum);
    mt_fence(&t.dgpu, 0x5eed);
    vg_stats_clear(&s);
    vg_stats_clear(&d);
    mt_stop(&t);
}

#define SLOW_LINK      (32ll << 20) /* max-bandwidth of the writing case */
#define QEMU_DT_MS     300          /* QEMU's default downtime-limit */
#define WRITE_SLICE_MS 60

struct writing {
    struct vg_cpu_writer *w;
    gint64 postcopy_at_us;
    bool started;
    struct vg_qmp *qmp;
};

/* Poll callback: write while pre-copy runs; ask for post-copy once it
 * has had a second. */
static int write_then_postcopy(const struct vg_mig_info *info, void *opaque,
                               struct vg_error *err)
{
    struct writing *wr = opaque;
    int ret;

    if (strcmp(info->status, "active") != 0) {
        return 0;
    }
    ret = vg_cpu_writer_run(wr->w, WRITE_SLICE_MS, err);
    if (ret >= 0 && !wr->started &&
        g_get_monotonic_time() > wr->postcopy_at_us) {
        wr->started = true;
        ret =
            vg_qmp_execute(wr->qmp, "migrate-start-postcopy", NULL, NULL, err);
    }
    return ret < 0 ? ret : 0;
}

static void test_beyond_link(void)
{
    struct vg_cpu_writer_opts wo = {
        .rate = 35000,
        .min_len = 8,
        .max_len = 64,
        .hot_bytes = 4 * MIB,
        .hot_percent = 60,
        .straddle_percent = 10,
        .batch = 256,
        .seed = 0x9057c0b1,
    };
    g_autofree uint8_t *img = g_malloc(VGT_VRAM_SIZE);
    g_autofree uint8_t *vram = g_malloc(VGT_VRAM_SIZE);
    struct writing wr = {0};
    struct vg_cpu_writer_counts c;
    struct vg_mig_info info;
    struct vg_stats d;
    uint64_t diff = 0;
    struct mt t;

    mt_start_src(&t, "postcopy-writes", NULL);
    mt_fill_vram(&t);
    VGT_OK(vg_qtest_memread(t.src.qemu->qt, t.gpu.vram_addr, img, VGT_VRAM_SIZE,
                            VGT_ERR));
    set_postcopy(t.src.qemu->qmp);
    mt_start_dst_with(&t, VGT_VRAM_ARG, NULL, NULL);
    set_postcopy(t.dst.qemu->qmp);
    mt_listen(&t);
    VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp, "downtime-limit", QEMU_DT_MS,
                                VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp, "max-bandwidth", SLOW_LINK,
                                VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp, "avail-switchover-bandwidth",
                                0, VGT_ERR));
    wo.qt = t.src.qemu->qt;
    wo.qmp = t.src.qemu->qmp;
    wo.vram_addr = t.gpu.vram_addr;
    wo.vram_size = VGT_VRAM_SIZE;
    wo.page_size = VGT_PAGE_SIZE;
    VGT_OK(vg_cpu_writer_new(&wo, &wr.w, VGT_ERR));
    wr.qmp = t.src.qemu->qmp;
    wr.postcopy_at_us = g_get_monotonic_time() + G_USEC_PER_SEC;
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_migrate_wait(&t, write_then_postcopy, &wr, &info);
    g_assert_true(wr.started);
    g_assert_cmpint(vg_cpu_writer_stopped(wr.w, VGT_ERR), ==, 1);
    mt_attach_dst(&t);
    VGT_OK(vg_qtest_memread(t.dst.qemu->qt, t.dgpu.vram_addr, vram,
                            VGT_VRAM_SIZE, VGT_ERR));
    vg_cpu_writer_counts(wr.w, &c);
    g_test_message("%" G_GUINT64_FORMAT " writes before the stop (%.0f/s), "
                   "downtime %" G_GINT64_FORMAT " ms",
                   c.before, c.rate, info.downtime_ms);
    g_assert_cmpuint(c.before, >, 0);
    if (vg_cpu_writer_match(wr.w, img, vram, &diff) < 0) {
        MT_FAIL("destination VRAM lost guest writes: first difference at "
                "0x%" G_GINT64_MODIFIER "x",
                diff);
    }
    VGT_OK(vg_stats_wait(t.dst.stats, postcopy_done, NULL, MT_STATS_TIMEOUT_MS,
                         &d, VGT_ERR));
    g_assert_cmpint(mt_stat_int(&d, "postcopy_pages"), >, 0);
    vg_stats_clear(&d);
    vg_cpu_writer_free(wr.w);
    mt_stop(&t);
}

#define FILL_OFF (60 * MIB)

static bool has_error(const struct vg_stats *st, void *opaque)
{
    return st->last_error[0] != '\0';
}

/* A slow source (each page reply 40 ms late): a page the destination
 * reads first comes on demand, ahead of the pass, and an engine FILL
 * waits for its own pages only; then the source server dies with pages
 * still missing.  The VM is lost as with RAM post-copy,
 * but the destination says why and its QEMU and server live on. */
static void test_source_lost(void)
{
    static const char *const slow[] = {"--fault", "postcopy-delay:40", NULL};
    struct mt t;
    struct vg_mig_info info;
    struct vg_stats d;
    uint64_t word = 0, want = 0;
    struct vgpu_cmd fill =
        vgpu_cmd_make(VGPU_OP_FILL, FILL_OFF, MIB, 0x7e577e57u, 0, 0, 0);

    start_pair(&t, "postcopy-lost", slow);
    migrate_postcopy_now(&t);
    mt_migrate_wait(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    /* The last filled MiB: at the end of the pass, fetched on demand. */
    VGT_OK(vg_qtest_readq(t.src.qemu->qt,
                          t.gpu.vram_addr + (MT_FILLED_MIB - 1) * MIB, &want,
                          VGT_ERR));
    VGT_OK(vg_qtest_readq(t.dst.qemu->qt,
                          t.dgpu.vram_addr + (MT_FILLED_MIB - 1) * MIB, &word,
                          VGT_ERR));
    g_assert_cmphex(word, ==, want);
    /* An engine command waits only for its own pages: a FILL of a MiB
     * completes while most of VRAM is still missing. */
    mt_run(&t.dgpu, &fill, 1);
    VGT_OK(vg_qtest_readq(t.dst.qemu->qt, t.dgpu.vram_addr + FILL_OFF + 8,
                          &word, VGT_ERR));
    g_assert_cmphex(word, ==, 0x7e577e577e577e57ull);
    VGT_OK(vg_stats_read(t.dst.stats, &d, VGT_ERR));
    g_test_message("after the FILL: %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                   " pages in, %" G_GINT64_FORMAT " device waits",
                   mt_stat_int(&d, "postcopy_fetched"),
                   mt_stat_int(&d, "postcopy_pages"),
                   mt_stat_int(&d, "postcopy_waits"));
    vg_stats_clear(&d);
    VGT_OK(vg_proc_kill(&t.src.srv->proc, SIGKILL, VGT_TIMEOUT_MS, VGT_ERR));
    VGT_OK(vg_stats_wait(t.dst.stats, has_error, NULL, MT_STATS_TIMEOUT_MS, &d,
                         VGT_ERR));
    g_test_message("destination: %s; %" G_GINT64_FORMAT " of %" G_GINT64_FORMAT
                   " pages in, %" G_GINT64_FORMAT " on a fault",
                   d.last_error, mt_stat_int(&d, "postcopy_fetched"),
                   mt_stat_int(&d, "postcopy_pages"),
                   mt_stat_int(&d, "postcopy_faults"));
    g_assert_nonnull(strstr(d.last_error, "page channel"));
    g_assert_cmpint(mt_stat_int(&d, "postcopy_faults"), >=, 1);
    g_assert_cmpint(mt_stat_int(&d, "postcopy_waits"), >=, 1);
    g_assert_cmpint(mt_stat_int(&d, "postcopy_fetched"), <,
                    mt_stat_int(&d, "postcopy_pages"));
    {
        g_autofree char *done = vg_stats_str(&d, "postcopy_done");

        g_assert_cmpstr(done, ==, "false");
    }
    vg_stats_clear(&d);
    g_assert_true(vg_proc_alive(&t.dst.qemu->proc));
    g_assert_true(vg_proc_alive(&t.dst.srv->proc));
    mt_stop(&t);
}

/* Poll callback: stop at status @opaque. */
static int at_status(const struct vg_mig_info *info, void *opaque,
                     struct vg_error *err)
{
    return !strcmp(info->status, opaque);
}

/* A TCP port of loopback free now. */
static int free_port(void)
{
    struct sockaddr_in sa = {.sin_family = AF_INET,
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    g_assert_cmpint(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    g_assert_cmpint(getsockname(fd, (struct sockaddr *)&sa, &len), ==, 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* QEMU's post-copy recovery with a vGPU: the migration channel is cut
 * (migrate-pause) while VRAM pages are still on the (slow) source; both
 * sides pause; migrate-recover and migrate with resume finish it, and the
 * destination's VRAM equals the source's. */
static void test_recover(void)
{
    static const char *const slow[] = {"--fault", "postcopy-delay:20", NULL};
    g_autofree uint8_t *src_vram = g_malloc(VGT_VRAM_SIZE);
    g_autofree uint8_t *dst_vram = g_malloc(VGT_VRAM_SIZE);
    g_autofree char *recover = NULL, *resume = NULL;
    struct vg_mig_info info;
    struct vg_stats d;
    struct mt t;
    int port;

    start_pair(&t, "postcopy-recover", slow);
    migrate_postcopy_now(&t);
    VGT_OK(vg_mig_poll(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, at_status,
                       "postcopy-active", &info, VGT_ERR));
    VGT_OK(
        vg_qmp_execute(t.src.qemu->qmp, "migrate-pause", NULL, NULL, VGT_ERR));
    VGT_OK(vg_mig_poll(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, at_status,
                       "postcopy-paused", &info, VGT_ERR));
    VGT_OK(vg_mig_poll(t.dst.qemu->qmp, MT_MIG_TIMEOUT_MS, at_status,
                       "postcopy-paused", &info, VGT_ERR));
    port = free_port();
    recover = g_strdup_printf("{\"uri\": \"tcp:127.0.0.1:%d\"}", port);
    VGT_OK(vg_qmp_execute_json(t.dst.qemu->qmp, "migrate-recover", recover,
                               NULL, VGT_ERR));
    resume = g_strdup_printf(
        "{\"uri\": \"tcp:127.0.0.1:%d\", \"resume\": true}", port);
    VGT_OK(
        vg_qmp_execute_json(t.src.qemu->qmp, "migrate", resume, NULL, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    VGT_OK(vg_qtest_memread(t.dst.qemu->qt, t.dgpu.vram_addr, dst_vram,
                            VGT_VRAM_SIZE, VGT_ERR));
    VGT_OK(vg_qtest_memread(t.src.qemu->qt, t.gpu.vram_addr, src_vram,
                            VGT_VRAM_SIZE, VGT_ERR));
    g_assert_true(memcmp(src_vram, dst_vram, VGT_VRAM_SIZE) == 0);
    VGT_OK(vg_stats_wait(t.dst.stats, postcopy_done, NULL, MT_STATS_TIMEOUT_MS,
                         &d, VGT_ERR));
    g_assert_cmpint(mt_stat_int(&d, "postcopy_fetched"), ==,
                    mt_stat_int(&d, "postcopy_pages"));
    {
        g_autofree char *ok = vg_stats_str(&d, "postcopy_verified");

        g_assert_cmpstr(ok, ==, "true");
    }
    vg_stats_clear(&d);
    mt_stop(&t);
}

/* A server without post-copy: QEMU refuses with its reason; the source
 * runs on with VRAM intact. */

/* Guest RAM pages the destination's device reaches by DMA before they
 * have arrived: one it writes, one it reads. */
#define DMA_WRITE_PAGE (200ull << 20)
#define DMA_READ_PAGE  (201ull << 20)
#define DMA_LEN        64u
#define DMA_VRAM       (8 * MIB)

/* Post-copy switched over at once, RAM's post-copy at 1 MiB/s: guest RAM
 * is still on the source when the destination's engines DMA into one page
 * and out of another (QEMU 0047, the server's DMA_UFFD).  The written page
 * must hold the source's bytes around the device's, the read must bring
 * the source's bytes into VRAM, and the migration must complete: a device
 * access to a page not received reads zeros and leaves a page QEMU then
 * cannot place. */
static void test_dma_into_missing_ram(void)
{
    struct mt t;
    struct vg_mig_info info;
    uint8_t pat[4096], got[4096], vram[DMA_LEN];
    struct vgpu_cmd cmds[2];

    for (unsigned i = 0; i < sizeof(pat); i++) {
        pat[i] = (uint8_t)(0xa5 ^ i ^ (i >> 8));
    }
    start_pair(&t, "pc-dma", NULL);
    VGT_OK(vg_qtest_memwrite(t.src.qemu->qt, DMA_WRITE_PAGE, pat, sizeof(pat),
                             VGT_ERR));
    VGT_OK(vg_qtest_memwrite(t.src.qemu->qt, DMA_READ_PAGE, pat, sizeof(pat),
                             VGT_ERR));
    VGT_OK(vg_qtest_memread(t.src.qemu->qt, t.gpu.vram_addr + DMA_VRAM, vram,
                            sizeof(vram), VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp, "max-postcopy-bandwidth",
                                1 << 20, VGT_ERR));
    mt_hold(&t, 1 << 20);
    migrate_postcopy_now(&t);
    VGT_OK(vg_mig_wait_runstate(t.dst.qemu->qmp, "running", VGT_TIMEOUT_MS,
                                VGT_ERR));
    VGT_OK(vg_vgpu_attach(t.dst.qemu->qt, &t.dgpu, VGT_ERR));
    cmds[0] = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, DMA_WRITE_PAGE, DMA_VRAM,
                            DMA_LEN, 0, 0, 0);
    cmds[1] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, DMA_VRAM, DMA_READ_PAGE,
                            DMA_LEN, 0, 0, 0);
    mt_run(&t.dgpu, cmds, 2);

    VGT_OK(vg_qtest_memread(t.dst.qemu->qt, DMA_WRITE_PAGE, got, sizeof(got),
                            VGT_ERR));
    g_assert_cmpmem(got, DMA_LEN, vram, DMA_LEN);
    g_assert_cmpmem(got + DMA_LEN, sizeof(got) - DMA_LEN, pat + DMA_LEN,
                    sizeof(pat) - DMA_LEN);
    VGT_OK(vg_qtest_memread(t.dst.qemu->qt, t.dgpu.vram_addr + DMA_VRAM, got,
                            DMA_LEN, VGT_ERR));
    g_assert_cmpmem(got, DMA_LEN, pat, DMA_LEN);

    VGT_OK(vg_mig_set_parameter(t.src.qemu->qmp, "max-postcopy-bandwidth", 0,
                                VGT_ERR));
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, &info);
    g_assert_cmpstr(info.status, ==, "completed");
    /* QEMU's fault thread polled the server's userfaultfd as it should
     * (a blocking one makes poll() report POLLERR, over and over). */
    {
        g_autofree char *log = vg_proc_log_tail(&t.dst.qemu->proc, 1 << 20);

        g_assert_null(strstr(log, "POLLERR"));
    }
    mt_stop(&t);
}

static void test_refused(void)
{
    static const char *const no_pc[] = {"--no-postcopy", NULL};
    g_autofree uint8_t *before = NULL;
    struct mt t;
    struct vg_error err = {0};

    mt_start_src(&t, "postcopy-refused", no_pc);
    mt_fill_vram(&t);
    before = mt_vram_samples(&t.gpu);
    set_postcopy(t.src.qemu->qmp);
    mt_start_dst_with(&t, VGT_VRAM_ARG, NULL, NULL);
    set_postcopy(t.dst.qemu->qmp);
    mt_listen(&t);
    g_assert_cmpint(vg_mig_start(t.src.qemu->qmp, t.uri, &err), <, 0);
    g_test_message("refused: %s", err.msg);
    g_assert_nonnull(strstr(err.msg, "not supported with postcopy"));
    mt_assert_source_intact(&t, before, 0x77);
    mt_stop(&t);
}

#define UFFD_SETTLE_MS 5000

static unsigned uffds_of(pid_t pid)
{
    struct vg_fd_census c;

    VGT_OK(vg_fd_census(pid, &c, VGT_ERR));
    return c.uffds;
}

/* The userfaultfds @pid has open once they are @want (up to
 * UFFD_SETTLE_MS: the destination cleans up in a bottom half after it
 * runs), else the last count. */
static unsigned settled_uffds(pid_t pid, unsigned want)
{
    int64_t deadline = g_get_monotonic_time() / 1000 + UFFD_SETTLE_MS;
    unsigned n;

    while ((n = uffds_of(pid)) != want &&
           g_get_monotonic_time() / 1000 < deadline) {
        g_usleep(50 * 1000);
    }
    return n;
}

static void test_advised_only(void)
{
    struct mt t;
    struct vg_mig_info info;
    struct vg_stats s, d;
    unsigned qemu_uffds, srv_uffds;

    start_pair(&t, "postcopy-advised", NULL);
    qemu_uffds = uffds_of(t.dst.qemu->proc.pid);
    srv_uffds = uffds_of(t.dst.srv->proc.pid);
    g_test_message("destination before: QEMU %u userfaultfds, server %u",
                   qemu_uffds, srv_uffds);
    mt_migrate(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &s, &d);
    g_assert_cmpuint(settled_uffds(t.dst.qemu->proc.pid, qemu_uffds), ==,
                     qemu_uffds);
    g_assert_cmpuint(settled_uffds(t.dst.srv->proc.pid, srv_uffds), ==,
                     srv_uffds);
    mt_fence(&t.dgpu, 0xad71);
    vg_stats_clear(&s);
    vg_stats_clear(&d);
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    static const char *const tcp[] = {"--postcopy-listen", "127.0.0.1", NULL};

    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/mig/postcopy/vram-on-demand", NULL, test_postcopy);
    g_test_add_data_func("/mig/postcopy/vram-on-demand-tcp", tcp,
                         test_postcopy);
    g_test_add_func("/mig/postcopy/writes-beyond-link", test_beyond_link);
    g_test_add_func("/mig/postcopy/source-lost", test_source_lost);
    g_test_add_func("/mig/postcopy/recover", test_recover);
    g_test_add_func("/mig/postcopy/refused-without-server", test_refused);
    g_test_add_func("/mig/postcopy/dma-into-missing-ram",
                    test_dma_into_missing_ram);
    g_test_add_func("/mig/postcopy/completed-in-pre-copy", test_advised_only);
    return g_test_run();
}
