/*
 * test-mig-cpu-writes -- guest CPU writes to VRAM through BAR2 at full
 * rate, right up to and through the switchover, in every pre-copy and
 * dirty-tracking mode (and with a server that does not take QEMU's log).
 *
 * The writer (qclient/cpu-writer.h) makes tens of thousands of writes of
 * 8 to 64 bytes a second, most in a hot set, the rest anywhere, some
 * across a page boundary, and records each against QEMU's STOP event.
 * The whole VRAM of the destination is read back and must equal what
 * VRAM held before plus every write made before the stop (and any prefix
 * of the ones in flight at it); both servers' checksums must name such a
 * VRAM too.  The device's last stop-copy estimate must bound what
 * stop-copy then sent: sent <= 1.2 x estimate + 1 MiB.  A writer this
 * fast dirties VRAM faster than the link drains it, so QEMU must not
 * switch over by itself with its default downtime limit; after
 * FORCE_AFTER_MS the test raises the limit and QEMU switches over on
 * the estimate it then gets.  Where QEMU logs the writes (hybrid
 * tracking) and pages went in pre-copy, stop-copy sends the pages written
 * only by them since as the 1 KiB pieces in QEMU's 4 KiB granules (stream
 * version 4): it must have, and sent fewer bytes than those pages hold.
 * With the servers on a GPU (VGMIG_SERVER_BACKEND=cuda, gpu-run.sh's
 * qtest step) BAR2 is trapped: every write reaches the source's server as
 * a message among the migration's own, which must still be answered in
 * time, QEMU logs none (no pieces), and the destination's checksum alone
 * names its VRAM (64 MiB read back through a trapped BAR2 take minutes).
 *
 * VGMIG_STRESS=N adds /mig/cpu-writes/stress: N migrations in iterative
 * + hybrid mode with writers of random rate and shape, most converging
 * by themselves, each checked the same way (see docs/dirty-tracking.md);
 * VGMIG_STRESS_SEED picks the sequence.
 */
#include "mig-test.h"
#include "qclient/cpu-writer.h"

#define HEAVY_RATE     35000u
#define HOT_BYTES      (4ull << 20)
#define LINK_BW        (64ll << 20) /* max-bandwidth: round 0 takes ~1 s */
#define QEMU_DT_MS     300          /* QEMU's default downtime-limit */
#define FORCE_DT_MS    60000
#define FORCE_AFTER_MS 4000
#define WRITE_SLICE_MS 60 /* writing per poll sample (then 20 ms off) */
#define MIB            (1ll << 20)

struct mode {
    const char *precopy;
    const char *track;
    bool no_region_log;
};

struct run {
    struct mt *t;
    struct vg_cpu_writer *w;
    gint64 t0_us, force_after_us;
    bool forced;
};

/* VRAM as mt_fill_vram() leaves it. */
static uint8_t *filled_image(void)
{
    g_autofree uint8_t *dma = mt_dma_data();
    uint8_t *img = g_malloc0(VGT_VRAM_SIZE);

    for (unsigned i = 0; i < MT_FILLED_MIB; i++) {
        uint32_t pat = MT_PATTERN(i);

        for (uint64_t b = 0; i != MT_DMA_MIB && b < (1u << 20); b += 4) {
            memcpy(img + ((uint64_t)i << 20) + b, &pat, 4);
        }
    }
    memcpy(img + ((uint64_t)MT_DMA_MIB << 20), dma, 1u << 20);
    return img;
}

/* A limit and a switchover bandwidth (QEMU's own estimate decays once
 * pre-copy has nothing to send) under which any estimate fits. */
static int force_switchover(struct vg_qmp *qmp, struct vg_error *err)
{
    int ret = vg_mig_set_parameter(qmp, "avail-switchover-bandwidth",
                                   MT_SWITCHOVER_BANDWIDTH, err);

    return ret < 0
               ? ret
               : vg_mig_set_parameter(qmp, "downtime-limit", FORCE_DT_MS, err);
}

/* Poll callback: write, and raise the downtime limit once it is time. */
static int on_sample(const struct vg_mig_info *info, void *opaque,
                     struct vg_error *err)
{
    struct run *r = opaque;
    int ret;

    if (strcmp(info->status, "active") != 0) {
        return 0;
    }
    ret = vg_cpu_writer_run(r->w, WRITE_SLICE_MS, err);
    if (ret >= 0 && !r->forced &&
        g_get_monotonic_time() - r->t0_us > r->force_after_us) {
        r->forced = true;
        ret = force_switchover(r->t->src.qemu->qmp, err);
    }
    return ret < 0 ? ret : 0;
}

/* Destination VRAM, both checksums and the estimate, against the writer:
 * the VRAM read back and its checksum, or with VRAM on a GPU (BAR2
 * trapped: reading it back takes minutes) the checksum alone (the image
 * with which prefix of the writes in flight it names). */
static int64_t check_result(struct mt *t, struct vg_cpu_writer *w, uint8_t *img,
                            uint64_t min_writes, const char *what)
{
    uint64_t k = vg_cpu_writer_uncertain(w), diff = 0;
    g_autofree uint64_t *sums = g_new(uint64_t, k + 1);
    g_autofree uint8_t *vram = g_malloc(VGT_VRAM_SIZE);
    struct vg_cpu_writer_counts c;
    struct vg_stats s, d;
    int64_t got, est, sent, pieces, pieces_bytes;

    vg_cpu_writer_counts(w, &c);
    g_test_message("%s: STOP at %.6f s; %" G_GUINT64_FORMAT " writes "
                   "before it (the last replied %.3f ms before it), "
                   "%" G_GUINT64_FORMAT " in flight, %" G_GUINT64_FORMAT
                   " after (the last replied %.3f ms after it); %.0f "
                   "writes/s",
                   what, (double)c.stop_us / 1e6, c.before,
                   -(double)c.last_before_us / 1000.0, c.in_flight, c.after,
                   (double)c.last_reply_us / 1000.0, c.rate);
    g_assert_cmpint(c.stop_us, >, 0);
    g_assert_cmpuint(c.before, >=, min_writes);
    VGT_OK(vg_stats_wait(t->src.stats, mt_stats_done, "stop",
                         MT_STATS_TIMEOUT_MS, &s, VGT_ERR));
    VGT_OK(vg_stats_wait(t->dst.stats, mt_stats_done, "running",
                         MT_STATS_TIMEOUT_MS, &d, VGT_ERR));
    vg_cpu_writer_checksums(w, img, VGT_PAGE_SIZE,
                            mt_stat_int(&d, "stream_version") >= 5, sums);
    if (mt_vram_on_gpu()) {
        got = vg_cpu_writer_find_sum(d.vram_checksum, sums, k + 1);
        if (got < 0) {
            MT_FAIL("%s: destination VRAM checksum %s names no VRAM with "
                    "every write made before the stop",
                    what, d.vram_checksum);
        }
    } else {
        VGT_OK(vg_qtest_memread(t->dgpu.qt, t->dgpu.vram_addr, vram,
                                VGT_VRAM_SIZE, VGT_ERR));
        got = vg_cpu_writer_match(w, img, vram, &diff);
        if (got < 0) {
            MT_FAIL("%s: destination VRAM lost guest writes: first difference "
                    "at 0x%" G_GINT64_MODIFIER "x",
                    what, diff);
        }
        g_assert_cmpint(vg_cpu_writer_find_sum(d.vram_checksum, sums, k + 1),
                        ==, got);
    }
    /* Writes that land after the stop may land while the source server
     * takes its checksum: it names the VRAM sent only without them. */
    if (k == 0) {
        g_assert_cmpint(vg_cpu_writer_find_sum(s.vram_checksum, sums, 1), ==,
                        0);
    }
    est = mt_stat_int(&s, "stopcopy_estimate_bytes");
    sent = mt_stat_int(&s, "stopcopy_bytes");
    g_test_message("%s: stop-copy estimate %.1f MiB, sent %.1f MiB, rounds "
                   "%" G_GINT64_FORMAT ", CPU log pages %" G_GINT64_FORMAT,
                   what, (double)est / MIB, (double)sent / MIB,
                   mt_stat_int(&s, "rounds"), mt_stat_int(&s, "cpu_log_pages"));
    g_assert_cmpint(sent * 10, <=, est * 12 + 10 * MIB);
    pieces = mt_stat_int(&s, "pieces_pages");
    pieces_bytes = mt_stat_int(&s, "pieces_bytes");
    g_test_message("%s: %" G_GINT64_FORMAT " pages sent as %" G_GINT64_FORMAT
                   " bytes of pieces",
                   what, pieces, pieces_bytes);
    g_assert_cmpint(pieces_bytes, <, pieces * VGT_PAGE_SIZE + (pieces == 0));
    vg_stats_clear(&s);
    vg_stats_clear(&d);
    return pieces;
}

/* Migrate while @wo's writer runs; check everything.  Returns the pages
 * stop-copy sent as pieces. */
static int64_t migrate_writing(struct mt *t, struct vg_cpu_writer_opts *wo,
                               int64_t bandwidth, gint64 force_after_ms,
                               const char *what)
{
    g_autofree uint8_t *img = filled_image();
    struct run r = {.t = t, .force_after_us = force_after_ms * 1000};
    int64_t pieces;

    wo->qt = t->src.qemu->qt;
    wo->qmp = t->src.qemu->qmp;
    wo->vram_addr = t->gpu.vram_addr;
    wo->vram_size = VGT_VRAM_SIZE;
    wo->page_size = VGT_PAGE_SIZE;
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "downtime-limit", QEMU_DT_MS,
                                VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "max-bandwidth", bandwidth,
                                VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "avail-switchover-bandwidth",
                                0, VGT_ERR));
    VGT_OK(vg_cpu_writer_new(wo, &r.w, VGT_ERR));
    r.t0_us = g_get_monotonic_time();
    mt_migrate(t, on_sample, &r, NULL);
    g_assert_cmpint(vg_cpu_writer_stopped(r.w, VGT_ERR), ==, 1);
    mt_attach_dst(t);
    g_test_message("%s: %s", what,
                   r.forced ? "switched over after the limit was raised"
                            : "QEMU switched over by itself");
    pieces = check_result(t, r.w, img, 1, what);
    vg_cpu_writer_free(r.w);
    return pieces;
}

static struct vg_cpu_writer_opts heavy_writer(uint64_t seed)
{
    return (struct vg_cpu_writer_opts){
        .rate = HEAVY_RATE,
        .min_len = 8,
        .max_len = 64,
        .hot_bytes = HOT_BYTES,
        .hot_percent = 60,
        .straddle_percent = 10,
        .batch = 256,
        .seed = seed,
    };
}

static void test_mode(gconstpointer data)
{
    const struct mode *md = data;
    g_autofree char *pa = g_strdup_printf("--precopy=%s", md->precopy);
    g_autofree char *ta = g_strdup_printf("--dirty-track=%s", md->track);
    const char *extra[] = {pa, ta, md->no_region_log ? "--no-region-log" : NULL,
                           NULL};
    struct vg_cpu_writer_opts wo = heavy_writer(0x63707577);
    int64_t pieces;
    struct mt t;

    mt_start_src(&t, "mig-cpu-writes", extra);
    mt_fill_vram(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, extra);
    pieces = migrate_writing(&t, &wo, LINK_BW, FORCE_AFTER_MS, "heavy writer");
    if (!g_str_equal(md->precopy, "none") && g_str_equal(md->track, "hybrid") &&
        !md->no_region_log && !mt_vram_on_gpu()) {
        g_assert_cmpint(pieces, >, 0);
    } else {
        g_assert_cmpint(pieces, ==, 0);
    }
    mt_stop(&t);
}

/* One stress migration: a writer of random rate and shape. */
static void stress_one(unsigned i, GRand *rng)
{
    static const uint32_t rates[] = {800, 5000, 20000, HEAVY_RATE};
    const char *extra[] = {"--precopy=iterative", "--dirty-track=hybrid", NULL};
    struct vg_cpu_writer_opts wo = heavy_writer(g_rand_int(rng));
    g_autofree char *what = g_strdup_printf("stress %u", i);
    struct mt t;

    wo.rate = rates[g_rand_int_range(rng, 0, 4)];
    wo.min_len = (uint32_t)g_rand_int_range(rng, 1, 9);
    wo.hot_percent = (unsigned)g_rand_int_range(rng, 0, 101);
    mt_start_src(&t, "mig-cpu-stress", extra);
    mt_fill_vram(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, extra);
    g_test_message("%s: %u writes/s of %u..%u bytes, %u%% hot", what, wo.rate,
                   wo.min_len, wo.max_len, wo.hot_percent);
    migrate_writing(&t, &wo, MT_BANDWIDTH,
                    g_rand_int_range(rng, 2000, 2 * FORCE_AFTER_MS), what);
    mt_stop(&t);
}

static void test_stress(gconstpointer data)
{
    unsigned n = GPOINTER_TO_UINT(data);
    const char *seed = g_getenv("VGMIG_STRESS_SEED");
    GRand *rng = g_rand_new_with_seed(seed ? (guint32)strtoul(seed, NULL, 0)
                                           : 0x73747273u);

    for (unsigned i = 0; i < n; i++) {
        stress_one(i, rng);
    }
    g_rand_free(rng);
}

int main(int argc, char **argv)
{
    static const char *const precopy[] = {"iterative", "one-shot", "none"};
    static const char *const track[] = {"hybrid", "hash", "none"};
    static struct mode modes[9];
    static const struct mode old_server = {"iterative", "hybrid", true};
    const char *stress = g_getenv("VGMIG_STRESS");

    g_test_init(&argc, &argv, NULL);
    for (unsigned i = 0; i < 9; i++) {
        g_autofree char *path = NULL;

        modes[i] = (struct mode){precopy[i / 3], track[i % 3], false};
        path = g_strdup_printf("/mig/cpu-writes/%s/%s", modes[i].precopy,
                               modes[i].track);
        g_test_add_data_func(path, &modes[i], test_mode);
    }
    g_test_add_data_func("/mig/cpu-writes/iterative/hybrid-no-region-log",
                         &old_server, test_mode);
    if (stress && atoi(stress) > 0) {
        g_test_add_data_func("/mig/cpu-writes/stress",
                             GUINT_TO_POINTER((unsigned)atoi(stress)),
                             test_stress);
    }
    return g_test_run();
}
