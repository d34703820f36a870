/*
 * test-mig-modes -- live migration in every pre-copy and dirty-tracking
 * mode of vgpu-server (--precopy=iterative|one-shot|none x
 * --dirty-track=hybrid|hash|none).
 *
 * VRAM gets known contents (FILL, DMA), then, while the migration is held
 * in pre-copy, three kinds of writer change it: a FILL (exact log), a
 * SCATTER_ADD (opaque kernel) and guest CPU writes through the BAR2
 * mapping (invisible to the server, logged by QEMU).  Both servers' VRAM
 * checksums must be equal and samples of every page read through BAR2
 * must match.  Hybrid tracking must get the CPU writes from QEMU's log
 * and hash only the opaque write-set after the baseline; with
 * --no-region-log (a server predating the extension) it must hash all of
 * VRAM instead, and still lose nothing.
 *
 * Idle device, iterative + hybrid: stop-copy sends (almost) no pages, the
 * MIG_DATA_SIZE estimate QEMU got last is within 10% of what stop-copy
 * sent, and QEMU converges with its default downtime-limit and
 * switchover bandwidth (only max-bandwidth raised).
 *
 * A device with no pre-copy data (--precopy=none) and all of its VRAM
 * left for stop-copy: QEMU must ask for its stop-copy size before it
 * switches over, and not switch over while that exceeds what its
 * downtime limit allows (patch 0027: before its first bandwidth sample
 * QEMU used to complete on a pending estimate of 0 without asking).
 */
#include "mig-test.h"

#define IDX_OFF   (49u << 20)
#define TABLE_OFF (50u << 20)
#define FILL_OFF  (52u << 20)
#define CPU_OFF   (55u << 20)
#define ROWS      256u
#define ROW_BYTES 1024u
#define IDX_COUNT 64u
#define HOLD_BW   (256ll << 20)

struct mode {
    const char *precopy;
    const char *track;
    bool no_region_log; /* vgpu-server --no-region-log */
};

#define NPAGES     ((int64_t)(VGT_VRAM_SIZE / VGT_PAGE_SIZE))
#define CPU_WRITES 8u /* by write_during_precopy(), 8 distinct 4 KiB pages */

static uint32_t float_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

/* The indices of the SCATTER_ADD, written by the guest CPU through BAR2. */
static void write_indices(struct mt *t)
{
    uint32_t idx[IDX_COUNT];

    for (unsigned i = 0; i < IDX_COUNT; i++) {
        idx[i] = (i * 37u) % ROWS;
    }
    VGT_OK(vg_qtest_memwrite(t->src.qemu->qt, t->gpu.vram_addr + IDX_OFF, idx,
                             sizeof(idx), VGT_ERR));
}

/* While pre-copy runs: the three kinds of writer change VRAM, also pages
 * sent already (MiB 0 and 1 were filled before). */
static void write_during_precopy(struct mt *t)
{
    struct vgpu_cmd c[2] = {
        vgpu_cmd_make(VGPU_OP_FILL, FILL_OFF, 1u << 20, 0x0dd0f111u, 0, 0, 0),
        vgpu_cmd_make(VGPU_OP_SCATTER_ADD, TABLE_OFF, ROWS, ROW_BYTES, IDX_OFF,
                      IDX_COUNT, float_bits(2.5f)),
    };

    mt_run(&t->gpu, c, 2);
    for (unsigned i = 0; i < CPU_WRITES; i++) {
        uint64_t off = i < 4 ? CPU_OFF + i * 70000u : (i - 4) * 300000u + 8;

        VGT_OK(vg_qtest_writel(t->src.qemu->qt, t->gpu.vram_addr + off,
                               0xc0de0000u | i, VGT_ERR));
    }
}

/* Poll callback: stop polling once VFIO sent *@opaque bytes. */
static int vfio_sent(const struct vg_mig_info *info, void *opaque,
                     struct vg_error *err)
{
    return info->vfio_transferred >= *(int64_t *)opaque ? 1 : 0;
}

/* Wait until QEMU has moved @bytes of the device's pre-copy data. */
static void wait_vfio_sent(struct mt *t, int64_t bytes)
{
    struct vg_mig_info info;

    VGT_OK(vg_mig_poll(t->src.qemu->qmp, MT_MIG_TIMEOUT_MS, vfio_sent, &bytes,
                       &info, VGT_ERR));
    g_assert_cmpstr(info.status, ==, "active");
}

/* Round 0 of an idle device after mt_fill_vram(): its non-zero MiBs. */
#define ROUND0_BYTES ((int64_t)MT_FILLED_MIB << 20)

static void log_stats(const char *what, const struct vg_stats *st)
{
    g_autofree char *pm = vg_stats_str(st, "precopy_mode");
    g_autofree char *tm = vg_stats_str(st, "dirty_track_mode");

    g_test_message(
        "%s: %s/%s rounds %" G_GINT64_FORMAT ", pre-copy %" G_GINT64_FORMAT
        " B, stop-copy %" G_GINT64_FORMAT " B (pages %" G_GINT64_FORMAT
        " B, estimate %" G_GINT64_FORMAT
        " B), device stop-copy %.3f ms, hashed %" G_GINT64_FORMAT
        " pages, throttle %" G_GINT64_FORMAT "%%",
        what, pm, tm, mt_stat_int(st, "rounds"),
        mt_stat_int(st, "precopy_bytes"), mt_stat_int(st, "stopcopy_bytes"),
        mt_stat_int(st, "final_dirty_bytes"),
        mt_stat_int(st, "stopcopy_estimate_bytes"), st->device_stopcopy_ms,
        mt_stat_int(st, "pages_hashed"), mt_stat_int(st, "throttle_percent"));
}

static void check_modes(const struct vg_stats *st, const struct mode *md)
{
    g_autofree char *pm = vg_stats_str(st, "precopy_mode");
    g_autofree char *tm = vg_stats_str(st, "dirty_track_mode");

    g_assert_cmpstr(pm, ==, md->precopy);
    g_assert_cmpstr(tm, ==, md->track);
}

/* Where hybrid tracking learnt of the guest's writes through BAR2. */
static void check_cpu_log(const struct vg_stats *st, const struct mode *md)
{
    g_autofree char *logged = vg_stats_str(st, "bar2_logged");
    int64_t log_pages = mt_stat_int(st, "cpu_log_pages");
    int64_t hashed = mt_stat_int(st, "pages_hashed");

    g_test_message("BAR2 logged by QEMU: %s, %" G_GINT64_FORMAT
                   " pages in its logs, %" G_GINT64_FORMAT " pages hashed",
                   logged, log_pages, hashed);
    g_assert_cmpstr(logged, ==, md->no_region_log ? "false" : "true");
    if (md->no_region_log) {
        g_assert_cmpint(log_pages, ==, 0);
        /* the baseline, then every page again at least at stop-copy */
        g_assert_cmpint(hashed, >=, 2 * NPAGES);
    } else {
        g_assert_cmpint(log_pages, >=, CPU_WRITES);
        /* the baseline plus the SCATTER_ADD's table, not the mapping */
        g_assert_cmpint(hashed, <, NPAGES + NPAGES / 8);
    }
}

static void test_mode(gconstpointer data)
{
    const struct mode *md = data;
    g_autofree char *pa = g_strdup_printf("--precopy=%s", md->precopy);
    g_autofree char *ta = g_strdup_printf("--dirty-track=%s", md->track);
    g_autofree char *tag = g_strdup_printf("mig-%s-%s", md->precopy, md->track);
    const char *extra[] = {pa, ta, md->no_region_log ? "--no-region-log" : NULL,
                           NULL};
    g_autofree uint8_t *src_samples = NULL;
    g_autofree uint8_t *dst_samples = NULL;
    struct vg_stats sst, dst, st;
    struct mt t;

    mt_start_src(&t, tag, extra);
    mt_fill_vram(&t);
    write_indices(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, extra);
    mt_hold(&t, HOLD_BW);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    VGT_OK(vg_stats_wait_state(t.src.stats, "PRE_COPY", MT_STATS_TIMEOUT_MS,
                               &st, VGT_ERR));
    vg_stats_clear(&st);
    if (strcmp(md->precopy, "none") != 0) {
        wait_vfio_sent(&t, ROUND0_BYTES); /* round 0 through */
    }
    write_during_precopy(&t);
    if (strcmp(md->precopy, "iterative") == 0) {
        wait_vfio_sent(&t, ROUND0_BYTES + (1 << 20)); /* a later round */
    }
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, NULL);
    src_samples = mt_vram_samples(&t.gpu);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    log_stats("source", &sst);
    check_modes(&sst, md);
    if (strcmp(md->precopy, "iterative") == 0 &&
        strcmp(md->track, "hybrid") == 0) {
        check_cpu_log(&sst, md);
    }
    dst_samples = mt_vram_samples(&t.dgpu);
    mt_assert_samples(dst_samples, src_samples, "destination");
    g_assert_cmphex(src_samples[0], !=, 0);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

/* QEMU's default downtime-limit and switchover bandwidth, max-bandwidth
 * raised (mt's). */
static void qemu_defaults(struct mt *t)
{
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "max-bandwidth", MT_BANDWIDTH,
                                VGT_ERR));
    VGT_OK(
        vg_mig_set_parameter(t->src.qemu->qmp, "downtime-limit", 300, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "avail-switchover-bandwidth",
                                0, VGT_ERR));
}

enum idle_how {
    IDLE_MT,       /* mt's parameters */
    IDLE_DEFAULTS, /* qemu_defaults() from the start */
    IDLE_ROUNDS,   /* held in pre-copy past round 0, then qemu_defaults() */
};

/* Start the migration of an idle device and wait for it. */
static void run_idle(struct mt *t, enum idle_how how)
{
    if (how == IDLE_DEFAULTS) {
        qemu_defaults(t);
    }
    if (how != IDLE_ROUNDS) {
        mt_migrate(t, NULL, NULL, NULL);
        return;
    }
    mt_hold(t, MT_BANDWIDTH);
    VGT_OK(vg_mig_start(t->src.qemu->qmp, t->uri, VGT_ERR));
    wait_vfio_sent(t, ROUND0_BYTES);
    g_usleep(100 * 1000); /* a few empty rounds */
    qemu_defaults(t);
    mt_migrate_wait(t, NULL, NULL, NULL);
}

/* An idle device migrates in mode @md; the stop-copy estimate is checked
 * in iterative mode, and that stop-copy sends (almost) no pages once
 * round 0 is through (IDLE_ROUNDS). */
static void migrate_idle(const struct mode *md, enum idle_how how)
{
    g_autofree char *pa = g_strdup_printf("--precopy=%s", md->precopy);
    g_autofree char *ta = g_strdup_printf("--dirty-track=%s", md->track);
    const char *extra[] = {pa, ta, NULL};
    struct vg_stats sst, dst;
    int64_t est, stop, pages;
    struct mt t;

    mt_start_src(&t, "mig-idle", extra);
    mt_fill_vram(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, extra);
    run_idle(&t, how);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    log_stats(how == IDLE_MT ? "idle" : "idle, QEMU defaults", &sst);
    check_modes(&sst, md);
    est = mt_stat_int(&sst, "stopcopy_estimate_bytes");
    stop = mt_stat_int(&sst, "stopcopy_bytes");
    pages = mt_stat_int(&sst, "final_dirty_bytes");
    if (how == IDLE_ROUNDS) {
        g_assert_cmpint(pages, <=, 4 * VGT_PAGE_SIZE);
    }
    /* Pages not read yet count as non-zero in the estimate: a switchover
     * inside round 0 (QEMU's defaults on a loaded machine) may estimate
     * the never-written part of VRAM, which then goes as ZEROS records. */
    if (strcmp(md->precopy, "iterative") == 0) {
        g_assert_cmpint(est * 10, >=, stop * 9);
        g_assert_cmpint(est * 10, <=,
                        stop * 11 + (int64_t)(VGT_VRAM_SIZE -
                                              ((uint64_t)MT_FILLED_MIB << 20)) *
                                        10);
    }
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

static void test_idle_defaults(void)
{
    static const struct mode md = {"iterative", "hybrid", false};

    migrate_idle(&md, IDLE_DEFAULTS);
}

static void test_idle_rounds(void)
{
    static const struct mode md = {"iterative", "hybrid", false};

    migrate_idle(&md, IDLE_ROUNDS);
}

static void test_idle_stop_and_copy(void)
{
    static const struct mode md = {"none", "hybrid", false};

    migrate_idle(&md, IDLE_MT);
}

/* A device whose stop-copy holds all of VRAM (64 MiB) does not fit a
 * 10 ms downtime at 64 MiB/s: QEMU asks its size and keeps migrating
 * (checked for 1.5 s) until mt's parameters are back.  Guest RAM is
 * preallocated, so that RAM's first pass (all zero pages) is done before
 * QEMU's first bandwidth sample, as on a real host. */
static void test_stop_copy_size_asked(void)
{
    static const char *const extra[] = {"--precopy=none", NULL};
    struct vg_mig_info info;
    struct vg_stats sst, dst;
    struct vg_qmp *qmp;
    struct mt t;

    mt_start_src_opts(&t, "mig-size-asked", VGT_VRAM_ARG, extra, NULL, true);
    mt_fill_vram(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, extra);
    qmp = t.src.qemu->qmp;
    VGT_OK(vg_mig_set_parameter(qmp, "max-bandwidth", 64ll << 20, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(qmp, "downtime-limit", 10, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(qmp, "avail-switchover-bandwidth", 0, VGT_ERR));
    VGT_OK(vg_mig_start(qmp, t.uri, VGT_ERR));
    g_usleep(1500 * 1000);
    VGT_OK(vg_mig_query(qmp, &info, VGT_ERR));
    g_assert_cmpstr(info.status, ==, "active");
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, NULL);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    /* the last MIG_DATA_SIZE before STOP_COPY */
    g_assert_cmpint(mt_stat_int(&sst, "stopcopy_estimate_bytes"), >=,
                    (int64_t)MT_FILLED_MIB << 20);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    static const char *const precopy[] = {"iterative", "one-shot", "none"};
    static const char *const track[] = {"hybrid", "hash", "none"};
    static struct mode modes[9];
    static const struct mode old_server = {"iterative", "hybrid", true};

    g_test_init(&argc, &argv, NULL);
    for (unsigned i = 0; i < 9; i++) {
        g_autofree char *path = NULL;

        modes[i] = (struct mode){precopy[i / 3], track[i % 3], false};
        path = g_strdup_printf("/mig/modes/%s/%s", modes[i].precopy,
                               modes[i].track);
        g_test_add_data_func(path, &modes[i], test_mode);
    }
    g_test_add_data_func("/mig/modes/iterative/hybrid-no-region-log",
                         &old_server, test_mode);
    g_test_add_func("/mig/modes/idle/iterative-qemu-defaults",
                    test_idle_defaults);
    g_test_add_func("/mig/modes/idle/iterative-rounds", test_idle_rounds);
    g_test_add_func("/mig/modes/idle/stop-and-copy", test_idle_stop_and_copy);
    g_test_add_func("/mig/modes/none/stop-copy-size-asked",
                    test_stop_copy_size_asked);
    return g_test_run();
}
