/*
 * test-mig-faults -- migrations that must fail, or be cancelled, without
 * harming the source.
 *
 * Cancel during pre-copy (the source's DMA logging, on while held in
 * pre-copy, is stopped; then a second migration to a fresh destination
 * succeeds); the destination's vgpu-server killed mid-migration; a
 * destination whose VRAM size differs (refused before switchover, the
 * error names both sizes); a corrupted device stream (--fault
 * corrupt-stream:OFFSET on the source server: the destination device ends
 * in ERROR; a page of a version 3 stream's pre-copy is found corrupted at
 * its END, as a page written while it went would be if it never came
 * again, so the source learns of it through QEMU's return path, on on
 * both sides); a server without migration support (--no-migration: QEMU
 * blocks the migration with a reason); a multifd migration through a
 * relay that drops each channel's last device-state packet, or its last
 * sync packet and what follows, and then closes the channel, cleanly or
 * with a TCP reset, after the source completed (patches 0090-0091: the
 * destination's load fails and says which buffer never came, or that a
 * channel ended before the sync point, where it waited forever; the
 * source, resumed, runs on); x-migration-load-config-after-iter on at one
 * side only (patches 0092-0093: a destination that waits for the source's
 * DEV_CONFIG_LOAD_READY fails once its main stream is read, where it
 * waited forever).  In every case the source VM keeps running,
 * or runs again, with its VRAM intact and its vGPU working.
 */
#include <signal.h>

#include "mig-test.h"
#include "qclient/mig-relay.h"

#define HOLD_BANDWIDTH (4 << 20)
#define DST_SMALL_VRAM "32M"
#define DST_SMALL_SIZE ((uint64_t)32 << 20)

/* Poll callback: stop once VRAM data is flowing in the active phase. */
static int transferring(const struct vg_mig_info *info, void *opaque,
                        struct vg_error *err)
{
    return !strcmp(info->status, "active") && info->vfio_transferred > 0;
}

/* Start a held migration and wait until it is under way. */
static void start_held(struct mt *t)
{
    struct vg_mig_info info;

    mt_hold(t, HOLD_BANDWIDTH);
    VGT_OK(vg_mig_start(t->src.qemu->qmp, t->uri, VGT_ERR));
    VGT_OK(vg_mig_poll(t->src.qemu->qmp, MT_MIG_TIMEOUT_MS, transferring, NULL,
                       &info, VGT_ERR));
    mt_log_info("under way", &info);
    g_assert_cmpstr(info.status, ==, "active");
}

/* Source with filled VRAM, its server and QEMU given more arguments
 * @srv_extra and @qemu_extra; its samples (checked) in *@before. */
static void start_filled_src_with(struct mt *t, const char *tag,
                                  const char *const *srv_extra,
                                  const char *const *qemu_extra,
                                  uint8_t **before)
{
    g_autofree uint8_t *want = mt_expected_samples();

    mt_start_src_with(t, tag, VGT_VRAM_ARG, srv_extra, qemu_extra);
    mt_fill_vram(t);
    *before = mt_vram_samples(&t->gpu);
    mt_assert_samples(*before, want, "source before migration");
}

/* Source with filled VRAM; its samples (checked) in *@before. */
static void start_filled_src(struct mt *t, const char *tag,
                             const char *const *extra, uint8_t **before)
{
    start_filled_src_with(t, tag, extra, NULL, before);
}

static void test_cancel(void)
{
    g_autofree uint8_t *before = NULL;
    g_autofree uint8_t *after = NULL;
    struct vg_stats sst, dst;
    struct vg_mig_info info;
    struct mt t;

    start_filled_src(&t, "mig-cancel", NULL, &before);
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    start_held(&t);
    mt_wait_dma_logging(&t.src, true); /* held in pre-copy */
    VGT_OK(vg_mig_cancel(t.src.qemu->qmp, VGT_ERR));
    mt_wait_final(&t, "cancelled", &info);
    mt_wait_dma_logging(&t.src, false); /* QEMU stopped tracking */
    mt_assert_source_intact(&t, before, 0x101);
    VGT_OK(vg_stats_wait_state(t.src.stats, "running", MT_STATS_TIMEOUT_MS,
                               &sst, VGT_ERR));
    vg_stats_clear(&sst);

    /* A second migration, to a fresh destination, succeeds. */
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    after = mt_vram_samples(&t.dgpu);
    mt_assert_samples(after, before, "second destination");
    g_assert_cmpuint(mt_rd(&t.dgpu, VGPU_REG_FENCE_LO), ==, 0x101);
    mt_fence(&t.dgpu, 0x102);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

static void test_dst_server_killed(void)
{
    g_autofree uint8_t *before = NULL;
    struct vg_mig_info info;
    struct mt t;

    start_filled_src(&t, "mig-dstkill", NULL, &before);
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    start_held(&t);
    VGT_OK(vg_proc_kill(&t.dst.srv->proc, SIGKILL, VGT_TIMEOUT_MS, VGT_ERR));
    mt_wait_final(&t, "failed", &info);
    g_assert_cmpstr(info.error_desc, !=, "");
    mt_assert_source_intact(&t, before, 0x201);
    mt_stop(&t);
}

/* Whether @text names a size of @bytes in any usual spelling. */
static bool mentions_size(const char *text, uint64_t bytes)
{
    g_autofree char *low = g_ascii_strdown(text, -1);
    char forms[6][48];

    g_snprintf(forms[0], 48, "%" G_GUINT64_FORMAT, bytes);
    g_snprintf(forms[1], 48, "0x%" G_GINT64_MODIFIER "x", bytes);
    g_snprintf(forms[2], 48, "%" G_GUINT64_FORMAT "m", bytes >> 20);
    g_snprintf(forms[3], 48, "%" G_GUINT64_FORMAT " mib", bytes >> 20);
    g_snprintf(forms[4], 48, "%" G_GUINT64_FORMAT "mib", bytes >> 20);
    g_snprintf(forms[5], 48, "%" G_GUINT64_FORMAT " mb", bytes >> 20);
    for (unsigned i = 0; i < G_N_ELEMENTS(forms); i++) {
        if (strstr(low, forms[i])) {
            return true;
        }
    }
    return false;
}

/* Whether @what (@text) names both VRAM sizes; logs the finding. */
static bool names_both_sizes(const char *what, const char *text)
{
    bool both = mentions_size(text, VGT_VRAM_SIZE) &&
                mentions_size(text, DST_SMALL_SIZE);

    g_test_message("%s %s both sizes: %.400s", what,
                   both ? "names" : "does not name", text);
    return both;
}

static void test_vram_size_mismatch(void)
{
    g_autofree uint8_t *before = NULL;
    g_autofree char *srv_log = NULL;
    g_autofree char *qemu_log = NULL;
    struct vg_mig_info info;
    struct vg_stats st = {0};
    bool named;
    struct mt t;

    start_filled_src(&t, "mig-vramsize", NULL, &before);
    mt_start_dst(&t, DST_SMALL_VRAM, NULL);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_wait_final(&t, "failed", &info);
    /* Refused before switchover: the source never left "running" for
     * "postmigrate", and its device never reached stop-copy. */
    mt_assert_source_intact(&t, before, 0x301);
    VGT_OK(vg_stats_read(t.src.stats, &st, VGT_ERR));
    g_assert_cmpfloat(st.device_stopcopy_ms, <=, 0);
    vg_stats_clear(&st);
    named = names_both_sizes("query-migrate error-desc", info.error_desc);
    if (vg_stats_read(t.dst.stats, &st, NULL) == 0) {
        named =
            names_both_sizes("destination stats last_error", st.last_error) ||
            named;
        vg_stats_clear(&st);
    }
    /* The logs, for the record: they name the configured size anyway. */
    srv_log = vg_proc_log_tail(&t.dst.srv->proc, 8192);
    qemu_log = vg_proc_log_tail(&t.dst.qemu->proc, 8192);
    names_both_sizes("destination server log", srv_log);
    names_both_sizes("destination QEMU log", qemu_log);
    g_assert_true(named);
    mt_stop(&t);
}

/* The destination device refused the stream: ERROR, with the reason. */
static void assert_dst_refused(struct mt *t)
{
    struct vg_stats st;

    VGT_OK(vg_stats_wait_state(t->dst.stats, "error", MT_STATS_TIMEOUT_MS, &st,
                               VGT_ERR));
    g_test_message("destination device: %s, %s", st.state, st.last_error);
    g_assert_cmpstr(st.last_error, !=, "");
    vg_stats_clear(&st);
}

/* A destination listening, QEMU's return path on on both sides: the
 * source hears of a load that failed at the stream's end. */
static void start_dst_return_path(struct mt *t)
{
    mt_start_dst_with(t, VGT_VRAM_ARG, NULL, NULL);
    VGT_OK(
        vg_mig_set_capability(t->src.qemu->qmp, "return-path", true, VGT_ERR));
    VGT_OK(
        vg_mig_set_capability(t->dst.qemu->qmp, "return-path", true, VGT_ERR));
    mt_listen(t);
}

static void test_corrupt_stream(void)
{
    static const char *const fault[] = {"--fault", "corrupt-stream:65536",
                                        NULL};
    g_autofree uint8_t *before = NULL;
    struct vg_mig_info info;
    struct mt t;

    start_filled_src(&t, "mig-corrupt", fault, &before);
    start_dst_return_path(&t);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_wait_final(&t, "failed", &info);
    mt_assert_source_intact(&t, before, 0x401);
    assert_dst_refused(&t);
    mt_stop(&t);
}

/* Resume the source VM after a completed migration (postmigrate). */
static void resume_source(struct mt *t)
{
    VGT_OK(vg_qmp_execute(t->src.qemu->qmp, "cont", NULL, NULL, VGT_ERR));
    VGT_OK(vg_mig_wait_runstate(t->src.qemu->qmp, "running", VGT_TIMEOUT_MS,
                                VGT_ERR));
}

/* corrupt-stream:OFFSET@2 corrupts only the source server's second
 * outgoing stream: the first and third migrations complete, the second
 * fails and leaves the source intact. */
static void test_corrupt_stream_once(void)
{
    static const char *const fault[] = {"--fault", "corrupt-stream:65536@2",
                                        NULL};
    g_autofree uint8_t *before = NULL;
    struct vg_mig_info info;
    struct vg_stats st;
    struct mt t;

    start_filled_src(&t, "mig-corrupt-once", fault, &before);
    for (unsigned i = 1; i <= 3; i++) {
        start_dst_return_path(&t);
        VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
        mt_wait_final(&t, i == 2 ? "failed" : "completed", &info);
        if (i == 2) {
            mt_assert_source_intact(&t, before, 0x500 + i);
            assert_dst_refused(&t);
        } else {
            VGT_OK(vg_stats_wait(t.dst.stats, mt_stats_done, "running",
                                 MT_STATS_TIMEOUT_MS, &st, VGT_ERR));
            g_test_message("stream %u: destination %s, VRAM %s", i, st.state,
                           st.vram_checksum);
            vg_stats_clear(&st);
            resume_source(&t);
        }
        mt_stop_dst(&t);
    }
    mt_stop(&t);
}

/* Migrate from a source server with --fault=@fault (stop-copy only) and
 * want the migration to fail: the source QEMU's log (@src_log; after the
 * server's name) or the destination server's says @want, and @also if not
 * NULL, and the source keeps running with its vGPU intact (@mark). */
static void migrate_bad_piece(const char *tag, const char *fault, bool src_log,
                              const char *want, const char *also, uint32_t mark)
{
    const char *const args[] = {"--fault", fault, "--precopy=none", NULL};
    g_autofree uint8_t *before = NULL;
    g_autofree char *log = NULL, *said = NULL;
    struct vg_mig_info info;
    struct mt t;

    start_filled_src(&t, tag, args, &before);
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    mt_wait_final(&t, "failed", &info);
    g_test_message("error-desc: %s", info.error_desc);
    g_assert_true(g_file_get_contents(src_log ? t.src.qemu->proc.log
                                              : t.dst.srv->proc.log,
                                      &log, NULL, NULL));
    said = src_log ? g_strdup_printf("%s: %s", t.src.srv->socket, want)
                   : g_strdup(want);
    g_assert_nonnull(strstr(log, said));
    g_assert_true(!also || strstr(log, also));
    mt_assert_source_intact(&t, before, mark);
    mt_stop(&t);
}

/* A source server that lists a stop-copy page past the end of VRAM
 * (--fault=bad-piece, with data_vram): QEMU checks the pieces before it
 * sends any, fails the migration (its log names the read's piece) and
 * leaves the source running with its vGPU intact. */
static void test_bad_vram_piece(void)
{
    migrate_bad_piece("mig-bad-piece", "bad-piece", true, "a read's piece",
                      "lies outside", 0x601);
}

/* A source server that lists a stop-copy page 4 KiB away from where it
 * is, inside VRAM (--fault=shifted-piece): the source's QEMU sends those
 * bytes, with that place where it places them, the destination's
 * receives them, and its server refuses page data that are not at their
 * record's pages or not what was hashed, naming the record; the migration
 * fails and the source keeps running with its vGPU intact. */
static void test_shifted_vram_piece(void)
{
    migrate_bad_piece("mig-shifted-piece", "shifted-piece", false,
                      "MIG_DATA_WRITE_SHM: migration stream: PAGES_LISTED "
                      "record #",
                      NULL, 0x602);
}

static void test_no_migration_support(void)
{
    static const char *const nomig[] = {"--no-migration", NULL};
    g_autofree uint8_t *before = NULL;
    struct vg_mig_info info;
    struct vg_error e = {0};
    char state[VG_MIG_STATUS_MAX];
    struct mt t;

    start_filled_src(&t, "mig-blocked", nomig, &before);
    VGT_OK(vg_mig_query(t.src.qemu->qmp, &info, VGT_ERR));
    g_test_message("blocked-reasons: %s", info.blocked_reasons);
    g_assert_nonnull(strstr(info.blocked_reasons, "igration"));
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    g_assert_cmpint(vg_mig_start(t.src.qemu->qmp, t.uri, &e), <, 0);
    g_test_message("migrate refused: %s", e.msg);
    g_assert_nonnull(strstr(e.msg, "igration"));
    g_assert_nonnull(strstr(e.msg, t.src.srv->socket));
    mt_assert_source_intact(&t, before, 0x501);
    VGT_OK(vg_mig_runstate(t.dst.qemu->qmp, state, sizeof(state), VGT_ERR));
    g_assert_cmpstr(state, ==, "inmigrate");
    mt_stop(&t);
}

/* Whether @q exits (within VGT_TIMEOUT_MS) after its failed incoming
 * migration. */
static bool dst_exits(struct vg_qemu *q)
{
    int64_t deadline = vg_now_ms() + VGT_TIMEOUT_MS;

    while (vg_proc_alive(&q->proc) && vg_now_ms() < deadline) {
        g_usleep(50 * 1000);
    }
    return !vg_proc_alive(&q->proc);
}

/* The destination's QEMU, after its failed incoming migration, exits
 * (dst_exits()); the end of its log, which says why. */
static char *dst_exit_log(struct mt *t)
{
    bool exited = dst_exits(t->dst.qemu);
    char *log = vg_proc_log_tail(&t->dst.qemu->proc, 8192);

    g_test_message("destination QEMU %s; its log ends: %s",
                   exited ? "exited" : "still runs", log);
    g_assert_true(exited);
    return log;
}

/* A migration over 2 multifd channels through a relay
 * (qclient/mig-relay.h) that drops what @drop says of each channel's
 * last packets, then closes the channel: cleanly, as a hostile source
 * could, or with a TCP reset (@reset), as after a network fault that
 * follows the source's last write. */
struct withheld {
    const char *path; /* the test case's */
    const char *tag;
    enum vg_relay_drop drop;
    bool reset;
    const char *says[2]; /* the destination's last words, one of them */
    uint32_t mark;
};

/* The destination's log tail @log says one of @w's last words. */
static bool says_one_of(const struct withheld *w, const char *log)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(w->says); i++) {
        if (w->says[i] && strstr(log, w->says[i])) {
            return true;
        }
    }
    return false;
}

/* The source has sent everything and completes (postmigrate); the
 * destination has read the whole main stream and waits, at its last sync
 * point or for its vGPU's load thread, for data that will not come: it
 * must fail, exit and say why.  The source, resumed as libvirt does when
 * the destination fails, runs with its vGPU intact. */
static void run_withheld(const void *opaque)
{
    const struct withheld *w = opaque;
    g_autofree uint8_t *before = NULL;
    g_autofree char *relay_uri = NULL, *log = NULL;
    struct vg_relay *relay = NULL;
    struct vg_relay_counts n;
    struct vg_mig_info info;
    struct mt t;

    start_filled_src(&t, w->tag, NULL, &before);
    mt_start_dst_with(&t, VGT_VRAM_ARG, NULL, NULL);
    VGT_OK(vg_mig_set_channels(t.src.qemu->qmp, 2, VGT_ERR));
    VGT_OK(vg_mig_set_channels(t.dst.qemu->qmp, 2, VGT_ERR));
    mt_listen(&t);
    VGT_OK(
        vg_relay_start(t.uri, w->drop, w->reset, &relay, &relay_uri, VGT_ERR));
    VGT_OK(vg_mig_start(t.src.qemu->qmp, relay_uri, VGT_ERR));
    mt_wait_final(&t, "completed", &info);
    log = dst_exit_log(&t);
    vg_relay_counts(relay, &n);
    g_test_message("relay: %u connections, %u multifd, %u device, %u sync "
                   "and %u RAM packets, %u dropped, %u unparsed",
                   n.connections, n.multifd, n.device_packets, n.sync_packets,
                   n.ram_packets, n.dropped, n.unparsed);
    g_assert_true(says_one_of(w, log));
    g_assert_cmpuint(n.multifd, ==, 2);
    g_assert_cmpuint(n.unparsed, ==, 0);
    /* At least one packet of each channel: its last sync packet */
    g_assert_cmpuint(n.dropped, >=,
                     w->drop == VG_RELAY_DROP_FROM_LAST_SYNC ? 2 : 1);
    VGT_OK(vg_mig_wait_runstate(t.src.qemu->qmp, "postmigrate", VGT_TIMEOUT_MS,
                                VGT_ERR));
    resume_source(&t);
    mt_assert_source_intact(&t, before, w->mark);
    vg_relay_stop(relay);
    mt_stop(&t);
}

/* Each channel's last device buffer withheld, the channels closed or
 * reset (patch 0091: the load thread fails, naming the buffer; with a
 * reset the channel's error comes first).  Each channel's last sync
 * packet withheld with what follows, the channels closed (patch 0090:
 * the main thread at its last sync point fails; or, where a device
 * buffer followed a sync packet, the load thread first). */
static const struct withheld withheld[] = {
    {"/mig/faults/multifd-buffers-withheld",
     "mig-withheld",
     VG_RELAY_DROP_LAST_DEVICE,
     false,
     {"never came"},
     0x701},
    {"/mig/faults/multifd-buffers-withheld-reset",
     "mig-withheld-reset",
     VG_RELAY_DROP_LAST_DEVICE,
     true,
     {"Connection reset by peer"},
     0x702},
    {"/mig/faults/multifd-sync-withheld",
     "mig-withheld-sync",
     VG_RELAY_DROP_FROM_LAST_SYNC,
     false,
     {"a channel ended before the sync point", "never came"},
     0x703},
};

/* x-migration-load-config-after-iter on at one side only.  Either way
 * the source sends its device's config as the last multifd buffer, and
 * DEV_CONFIG_LOAD_READY on the main channel only where the property is
 * on.  A destination that has it on and gets no marker fails once the
 * main stream is read (patches 0092-0093; before, its load thread waited
 * forever); one that has it off fails as it reads the marker.  Whether
 * the source completed or saw the destination go first, it runs on with
 * its vGPU intact. */
struct cfg_mismatch {
    const char *path; /* the test case's */
    const char *tag;
    bool on_src; /* the property on at the source, else at the destination */
    const char *says; /* the destination's last words */
    uint32_t mark;
};

static void run_cfg_mismatch(const void *opaque)
{
    static const char *const on[] = {
        "-global", "vfio-user-pci.x-migration-load-config-after-iter=on", NULL};
    const struct cfg_mismatch *c = opaque;
    g_autofree uint8_t *before = NULL;
    g_autofree char *log = NULL;
    struct vg_mig_info info;
    struct mt t;

    start_filled_src_with(&t, c->tag, NULL, c->on_src ? on : NULL, &before);
    mt_start_dst_with(&t, VGT_VRAM_ARG, NULL, c->on_src ? NULL : on);
    VGT_OK(vg_mig_set_channels(t.src.qemu->qmp, 2, VGT_ERR));
    VGT_OK(vg_mig_set_channels(t.dst.qemu->qmp, 2, VGT_ERR));
    mt_listen(&t);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    VGT_OK(vg_mig_poll(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, NULL, NULL, &info,
                       VGT_ERR));
    mt_log_info("ended", &info);
    log = dst_exit_log(&t);
    g_assert_nonnull(strstr(log, c->says));
    if (!strcmp(info.status, "completed")) {
        VGT_OK(vg_mig_wait_runstate(t.src.qemu->qmp, "postmigrate",
                                    VGT_TIMEOUT_MS, VGT_ERR));
        resume_source(&t);
    } else {
        g_assert_cmpstr(info.status, ==, "failed");
    }
    mt_assert_source_intact(&t, before, c->mark);
    mt_stop(&t);
}

static const struct cfg_mismatch cfg_mismatch[] = {
    {"/mig/faults/config-ready-missing", "mig-cfg-missing", false,
     "DEV_CONFIG_LOAD_READY never came", 0x704},
    {"/mig/faults/config-ready-unexpected", "mig-cfg-unexpected", true,
     "got DEV_CONFIG_LOAD_READY but was disabled", 0x705},
};

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/faults/cancel", test_cancel);
    g_test_add_func("/mig/faults/dst-server-killed", test_dst_server_killed);
    g_test_add_func("/mig/faults/vram-size-mismatch", test_vram_size_mismatch);
    g_test_add_func("/mig/faults/no-migration-support",
                    test_no_migration_support);
    g_test_add_func("/mig/faults/corrupt-stream", test_corrupt_stream);
    for (unsigned i = 0; i < G_N_ELEMENTS(withheld); i++) {
        g_test_add_data_func(withheld[i].path, &withheld[i], run_withheld);
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(cfg_mismatch); i++) {
        g_test_add_data_func(cfg_mismatch[i].path, &cfg_mismatch[i],
                             run_cfg_mismatch);
    }
    g_test_add_func("/mig/faults/bad-vram-piece", test_bad_vram_piece);
    g_test_add_func("/mig/faults/shifted-vram-piece", test_shifted_vram_piece);
    g_test_add_func("/mig/faults/corrupt-stream-once",
                    test_corrupt_stream_once);
    return g_test_run();
}
