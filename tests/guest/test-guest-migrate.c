/*
 * test-guest-migrate.c -- live migration of a real guest that checks its
 * own VRAM.
 *
 * A TCG guest boots the image of `make guest-image` and runs vgpu-guest
 * (a workload profile on the vGPU, a model of all of VRAM, sample checks
 * after every step, heartbeats on the serial console).  Once it has run a
 * while, QEMU migrates it over QMP to a destination QEMU and vgpu-server
 * on this machine, with QEMU's own switchover decision (downtime-limit
 * 300 ms), and from there on to a second destination.  After each hop the
 * guest must check every page of VRAM against its model with no
 * corruption, go on making progress, and report no corrupt page ever.  A
 * last self-test flips a word behind the tool's back and requires the
 * next check to report exactly that page, word, expected and actual value.
 *
 * The pause the guest felt: the guest prints a pulse every 5 ms from a
 * thread of its own; the gap between the source's last pulse and the
 * destination's first as they arrive on the host, split at QEMU's STOP
 * and RESUME events, is printed per hop and as p50/p95 over the case
 * (VGMIG_GUEST_HOPS hops; make bench runs 20).  The no-vgpu case is its
 * baseline: the same guest and QEMU without a vGPU.  The two-vgpus case
 * gives the VM two vGPUs, each served by its own vgpu-server: the guest
 * drives both (vgpu-guest --all-devices, a workload and a model each) and
 * checks every page of both after every hop; each vGPU's two servers
 * must agree on its VRAM.  The postcopy case switches over with
 * migrate-start-postcopy at once: the guest runs on the destination while
 * its server fetches VRAM, the pages the vCPU touches first on demand.
 */
#include <inttypes.h>
#include <stddef.h>

#include "guest-test.h"

#define VRAM_ARG    "32M"
#define PAGE_ARG    "64K"
#define DOWNTIME_MS 300
#define BANDWIDTH   (10ll << 30)
/* If QEMU has not switched over by itself after this long, a downtime
 * limit and switchover bandwidth that always converge are set (noted in
 * the output); the test then still checks everything. */
#define FORCE_AFTER_MS    20000
#define FORCE_DOWNTIME_MS 10000
#define FORCE_SW_BW       (1ll << 30)
#define MIG_TIMEOUT_MS    120000
#define STATS_TIMEOUT_MS  20000
/* Workload steps the guest runs before the migration starts. */
#define WARMUP_STEPS 20
/* Migrations per case: the second starts from a destination.  The
 * environment's VGMIG_GUEST_HOPS (1 to MAX_HOPS) sets another number:
 * make bench runs 20 for the percentiles of the pause. */
#define HOPS 2
/* Hops of the RAM comparison case. */
#define RAM_HOPS 3
#define MAX_HOPS 1000
/* The guest's heartbeat (progress counters) and pulse period: the pulse
 * is the resolution of the pause measured. */
#define PULSE_MS      5
#define HEARTBEAT_ARG "--heartbeat,50,--pulse,5"
#define MAX_VGPUS     2

struct side {
    struct vg_server *srv[MAX_VGPUS];
    struct vg_qemu *qemu;
    struct gt_console *con;
    char *stats[MAX_VGPUS];
};

struct gm {
    char *dir;
    struct gt_image img;
    const char *guest_args;
    unsigned nvgpu;       /* 0: the baseline, a VM without a vGPU */
    struct side src, dst; /* the guest runs on src; dst is incoming */
    unsigned hop;         /* migrations done */
    GArray *hbs;          /* struct hb of the consoles stopped so far */
    int64_t mig_start_us; /* g_get_real_time() at the last "migrate" */
    GArray *pauses;       /* struct hop_pause of every hop */
    bool ram_check;       /* compare guest RAM on both sides at each hop */
    bool postcopy;        /* switch over with migrate-start-postcopy at once */
    int64_t pages;        /* model pages, from the ready line */
};

/* What one hop's guest felt, in microseconds. */
struct hop_pause {
    int64_t excess_us; /* felt - QEMU downtime */
    int64_t felt_us, before_stop_us, after_resume_us, downtime_us;
};

struct hb {
    int64_t seq;
    int64_t t_ms; /* arrival on the host */
};

static void side_start(struct gm *t, struct side *s, const char *name,
                       bool incoming)
{
    g_autofree char *qemu_name = g_strdup_printf("qemu-%s", name);
    const char *socks[MAX_VGPUS + 1] = {NULL};

    for (unsigned d = 0; d < t->nvgpu; d++) {
        g_autofree char *srv_name = d ? g_strdup_printf("vgpu-%s-%u", name, d)
                                      : g_strdup_printf("vgpu-%s", name);
        struct vg_server_opts so = {
            .dir = t->dir,
            .vram = VRAM_ARG,
            .page_size = PAGE_ARG,
            .log_level = "info",
            .name = srv_name,
        };

        s->stats[d] = g_strdup_printf("%s/%s-stats.json", t->dir, srv_name);
        so.stats_file = s->stats[d];
        GT_OK(vg_server_start(&so, &s->srv[d], GT_ERR));
        socks[d] = s->srv[d]->socket;
    }
    s->qemu = gt_qemu_start(t->dir, qemu_name, &t->img, socks, t->guest_args,
                            incoming, incoming && t->ram_check);
    s->con = gt_console_open(t->dir, name, s->qemu);
}

static void side_stop(struct side *s)
{
    gt_console_close(s->con);
    vg_qemu_free(s->qemu);
    for (unsigned d = 0; d < MAX_VGPUS; d++) {
        vg_server_free(s->srv[d]);
        g_free(s->stats[d]);
    }
    memset(s, 0, sizeof(*s));
}

/* Last heartbeat of @c so far: its "steps" and "pages_written" (-1 if
 * none). */
static void last_hb(struct gt_console *c, int64_t *steps, int64_t *written)
{
    *steps = *written = -1;
    g_mutex_lock(&c->lock);
    for (guint i = 0; i < c->lines->len; i++) {
        struct gt_line *l = g_ptr_array_index(c->lines, i);
        const char *kv = gt_match(l->text, "hb");

        if (kv) {
            *steps = gt_kv(kv, "steps");
            *written = gt_kv(kv, "pages_written");
        }
    }
    g_mutex_unlock(&c->lock);
}

/* Boot on the source: ready, a clean first full check, warm-up steps. */
static void boot(struct gm *t)
{
    g_autofree char *ready = NULL, *verify = NULL;
    int64_t t0 = vg_now_ms(), steps = 0;
    guint idx = 0;

    gt_wait_kind(t->src.con, &idx, "ready", GT_BOOT_TIMEOUT_MS, &ready, NULL);
    g_test_message("guest ready after %" G_GINT64_FORMAT " ms: %s",
                   vg_now_ms() - t0, ready);
    t->pages = gt_kv(gt_match(ready, "ready"), "pages");
    if (!t->nvgpu) {
        g_autofree char *hb = NULL;

        g_assert_cmpint(t->pages, ==, 0);
        gt_wait_kind(t->src.con, &idx, "hb", GT_LINE_TIMEOUT_MS, &hb, NULL);
        return;
    }
    g_assert_cmpint(gt_kv(gt_match(ready, "ready"), "devices"), ==, t->nvgpu);
    g_assert_cmpint(t->pages, ==, t->nvgpu * ((32ll << 20) / 4096));
    gt_wait_kind(t->src.con, &idx, "verify", GT_LINE_TIMEOUT_MS, &verify, NULL);
    g_assert_cmpint(gt_kv(gt_match(verify, "verify"), "pages"), ==, t->pages);
    g_assert_cmpint(gt_kv(gt_match(verify, "verify"), "corrupt"), ==, 0);
    while (steps < WARMUP_STEPS) {
        g_autofree char *hb = NULL;

        gt_wait_kind(t->src.con, &idx, "hb", GT_LINE_TIMEOUT_MS, &hb, NULL);
        steps = gt_kv(gt_match(hb, "hb"), "steps");
        g_assert_cmpint(gt_kv(gt_match(hb, "hb"), "corrupt"), ==, 0);
    }
}

struct force {
    struct vg_qmp *qmp;
    int64_t t0_ms;
    bool forced;
    bool postcopy, postcopy_asked;
};

static int force_cb(const struct vg_mig_info *info, void *opaque,
                    struct vg_error *err)
{
    struct force *f = opaque;
    int rc = 0;

    if (f->postcopy) { /* switch over at the first sample, no forcing */
        if (!f->postcopy_asked && !strcmp(info->status, "active")) {
            f->postcopy_asked = true;
            rc = vg_qmp_execute(f->qmp, "migrate-start-postcopy", NULL, NULL,
                                err);
        }
        return rc;
    }
    if (!f->forced && !strcmp(info->status, "active") &&
        vg_now_ms() - f->t0_ms > FORCE_AFTER_MS) {
        f->forced = true;
        rc = vg_mig_set_parameter(f->qmp, "downtime-limit", FORCE_DOWNTIME_MS,
                                  err);
        if (rc == 0) {
            rc = vg_mig_set_parameter(f->qmp, "avail-switchover-bandwidth",
                                      FORCE_SW_BW, err);
        }
    }
    return rc;
}

/* switchover-ack over the return path: QEMU switches over only once the
 * destination loaded the device's initial pre-copy data. */
static void ack_caps(struct vg_qmp *qmp)
{
    GT_OK(vg_mig_set_capability(qmp, "return-path", true, GT_ERR));
    GT_OK(vg_mig_set_capability(qmp, "switchover-ack", true, GT_ERR));
}

/* Save guest-physical [0, GT_RAM_MIB MiB) of @q's guest to @path. */
static void save_ram(struct vg_qemu *q, const char *path)
{
    g_autofree char *args =
        g_strdup_printf("{\"val\": 0, \"size\": %d, \"filename\": \"%s\"}",
                        GT_RAM_MIB << 20, path);

    GT_OK(vg_qmp_execute_json(q->qmp, "pmemsave", args, NULL, GT_ERR));
}

/*
 * The destination, started paused (-S), has loaded the migration; the
 * source stopped for good at switchover.  Their guest RAM must be the
 * same, page by page: a page the source wrote after it was last sent
 * would show up here, long before the guest trips over it.  Then the
 * destination runs on.
 */
static void compare_ram(struct gm *t)
{
    g_autofree char *a = g_strdup_printf("%s/ram-src-%u", t->dir, t->hop + 1);
    g_autofree char *b = g_strdup_printf("%s/ram-dst-%u", t->dir, t->hop + 1);
    g_autoptr(GString) where = g_string_new(NULL);
    char pa[4096], pb[4096];
    uint64_t pages = 0, differ = 0;
    FILE *fa, *fb;

    GT_OK(vg_mig_wait_runstate(t->dst.qemu->qmp, "paused", 20000, GT_ERR));
    save_ram(t->src.qemu, a);
    save_ram(t->dst.qemu, b);
    fa = fopen(a, "rb");
    fb = fopen(b, "rb");
    g_assert_nonnull(fa);
    g_assert_nonnull(fb);
    while (fread(pa, sizeof(pa), 1, fa) == 1) {
        g_assert_cmpuint(fread(pb, sizeof(pb), 1, fb), ==, 1);
        if (memcmp(pa, pb, sizeof(pa)) && differ++ < 8) {
            g_string_append_printf(where, " %#" PRIx64, pages * sizeof(pa));
        }
        pages++;
    }
    fclose(fa);
    fclose(fb);
    g_assert_cmpuint(pages, ==, ((uint64_t)GT_RAM_MIB << 20) / sizeof(pa));
    if (differ) {
        GT_FAIL("hop %u: %" PRIu64 " of %" PRIu64 " pages of guest RAM differ "
                "between the source and the destination after switchover "
                "(guest-physical:%s%s; both kept: %s, %s)",
                t->hop + 1, differ, pages, where->str, differ > 8 ? " ..." : "",
                a, b);
    }
    g_test_message("hop %u: guest RAM identical on both sides after "
                   "switchover (%" PRIu64 " pages of 4 KiB)",
                   t->hop + 1, pages);
    unlink(a);
    unlink(b);
    GT_OK(vg_qmp_execute_json(t->dst.qemu->qmp, "cont", NULL, NULL, GT_ERR));
}

static void migrate(struct gm *t, struct vg_mig_info *info, bool *forced)
{
    struct vg_qmp *sq = t->src.qemu->qmp;
    struct force f = {.qmp = sq, .postcopy = t->postcopy};
    g_autofree char *uri = NULL;
    char state[VG_MIG_STATUS_MAX];

    ack_caps(sq);
    ack_caps(t->dst.qemu->qmp);
    if (t->postcopy) {
        GT_OK(vg_mig_set_capability(sq, "postcopy-ram", true, GT_ERR));
        GT_OK(vg_mig_set_capability(t->dst.qemu->qmp, "postcopy-ram", true,
                                    GT_ERR));
    }
    GT_OK(vg_mig_set_parameter(sq, "max-bandwidth", BANDWIDTH, GT_ERR));
    GT_OK(vg_mig_set_parameter(sq, "downtime-limit", DOWNTIME_MS, GT_ERR));
    GT_OK(vg_mig_incoming(t->dst.qemu->qmp, &uri, GT_ERR));
    f.t0_ms = vg_now_ms();
    t->mig_start_us = g_get_real_time();
    GT_OK(vg_mig_start(sq, uri, GT_ERR));
    GT_OK(
        vg_mig_wait_completed(sq, MIG_TIMEOUT_MS, force_cb, &f, info, GT_ERR));
    *forced = f.forced;
    g_test_message(
        "hop %u: migration %s in %" G_GINT64_FORMAT
        " ms, QEMU downtime %" G_GINT64_FORMAT " ms, RAM %" G_GINT64_FORMAT
        " bytes, vfio %" G_GINT64_FORMAT " bytes%s",
        t->hop + 1, info->status, info->total_time_ms, info->downtime_ms,
        info->ram_transferred, info->vfio_transferred,
        f.forced ? " (switchover forced)" : "");
    if (t->ram_check) {
        compare_ram(t);
    }
    GT_OK(vg_mig_wait_runstate(t->dst.qemu->qmp, "running", 20000, GT_ERR));
    GT_OK(vg_mig_runstate(sq, state, sizeof(state), GT_ERR));
    g_assert_cmpstr(state, ==, "postmigrate");
}

static bool stats_done(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] && !g_ascii_strcasecmp(st->state, opaque);
}

/* A post-copy destination has every page (its checksum follows). */
static bool postcopy_done(const struct vg_stats *st, void *opaque)
{
    g_autofree char *done = vg_stats_str(st, "postcopy_done");

    return stats_done(st, opaque) && done && !strcmp(done, "true");
}

/* After a post-copy hop: every page left behind came, and their digest
 * matched the source's.  The destination's VRAM checksum is taken when
 * the last page is in, while the guest runs: it may differ from the
 * source's, and the guest's own check of every page judges it. */
static void check_postcopy(struct gm *t, unsigned dev)
{
    g_autofree char *verified = NULL;
    struct vg_stats s, d;
    int64_t pages = -1, fetched = -1, faults = -1;

    GT_OK(vg_stats_wait(t->src.stats[dev], stats_done, "stop", STATS_TIMEOUT_MS,
                        &s, GT_ERR));
    GT_OK(vg_stats_wait(t->dst.stats[dev], postcopy_done, "running",
                        STATS_TIMEOUT_MS, &d, GT_ERR));
    GT_OK(vg_stats_int(&s, "postcopy_pages", &pages, GT_ERR));
    GT_OK(vg_stats_int(&d, "postcopy_fetched", &fetched, GT_ERR));
    GT_OK(vg_stats_int(&d, "postcopy_faults", &faults, GT_ERR));
    verified = vg_stats_str(&d, "postcopy_verified");
    g_test_message("vGPU %u: post-copy left %" G_GINT64_FORMAT
                   " pages behind; %" G_GINT64_FORMAT
                   " fetched, %" G_GINT64_FORMAT " on a guest fault",
                   dev, pages, fetched, faults);
    g_assert_cmpint(fetched, ==, pages);
    g_assert_cmpstr(verified, ==, "true");
    vg_stats_clear(&s);
    vg_stats_clear(&d);
}

/* The two servers of vGPU @dev agree on its VRAM at switchover. */
static void check_stats(struct gm *t, unsigned dev)
{
    g_autofree char *logged = NULL, *log_pages = NULL;
    struct vg_stats s, d;

    GT_OK(vg_stats_wait(t->src.stats[dev], stats_done, "stop", STATS_TIMEOUT_MS,
                        &s, GT_ERR));
    GT_OK(vg_stats_wait(t->dst.stats[dev], stats_done, "running",
                        STATS_TIMEOUT_MS, &d, GT_ERR));
    /* Whether QEMU logged the guest's writes to BAR2 for the server. */
    logged = vg_stats_str(&s, "bar2_logged");
    log_pages = vg_stats_str(&s, "cpu_log_pages");
    g_test_message("vGPU %u: sent %" G_GINT64_FORMAT
                   " bytes, stop-copy %.1f ms, VRAM checksum %s, BAR2 "
                   "writes logged by QEMU: %s (pages %s)",
                   dev, s.bytes_sent, s.device_stopcopy_ms, s.vram_checksum,
                   logged ? logged : "?", log_pages ? log_pages : "?");
    g_assert_cmpstr(d.vram_checksum, ==, s.vram_checksum);
    vg_stats_clear(&s);
    vg_stats_clear(&d);
}

static gint hb_cmp(gconstpointer a, gconstpointer b)
{
    const struct hb *x = a, *y = b;

    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

static void collect_hb(struct gt_console *c, GArray *out)
{
    g_mutex_lock(&c->lock);
    for (guint i = 0; i < c->lines->len; i++) {
        struct gt_line *l = g_ptr_array_index(c->lines, i);
        const char *kv = gt_match(l->text, "hb");

        if (kv) {
            struct hb h = {.seq = gt_kv(kv, "seq"), .t_ms = l->t_ms};

            g_array_append_val(out, h);
        }
    }
    g_mutex_unlock(&c->lock);
}

/* The pulses of @c so far, in arrival order. */
static GArray *collect_pulses(struct gt_console *c)
{
    GArray *out = g_array_new(FALSE, FALSE, sizeof(struct vg_pulse));

    g_mutex_lock(&c->lock);
    for (guint i = 0; i < c->lines->len; i++) {
        struct gt_line *l = g_ptr_array_index(c->lines, i);
        const char *kv = gt_match(l->text, "pulse");

        if (kv) {
            struct vg_pulse p = {.seq = gt_kv(kv, "seq"),
                                 .gap_us = gt_kv(kv, "gap_us"),
                                 .host_us = l->t_us};

            g_array_append_val(out, p);
        }
    }
    g_mutex_unlock(&c->lock);
    return out;
}

/* When QMP event @name came from @q after the migration started. */
static int64_t event_us(struct gm *t, struct vg_qemu *q, const char *name)
{
    int64_t us = -1;

    g_assert_cmpint(
        vg_qmp_event_time(q->qmp, name, t->mig_start_us, &us, GT_ERR), ==, 1);
    return us;
}

/* The pause the guest felt at this switchover, from its pulses and
 * QEMU's STOP and RESUME events; one line per hop on stderr. */
static void report_pause(struct gm *t, const struct vg_mig_info *info)
{
    GArray *src = collect_pulses(t->src.con);
    GArray *dst = collect_pulses(t->dst.con);
    struct vg_pause p;

    GT_OK(vg_pause_measure((struct vg_pulse *)(void *)src->data, src->len,
                           (struct vg_pulse *)(void *)dst->data, dst->len,
                           event_us(t, t->src.qemu, "STOP"),
                           event_us(t, t->dst.qemu, "RESUME"), &p, GT_ERR));
    g_array_free(src, TRUE);
    g_array_free(dst, TRUE);
    g_array_append_val(t->pauses,
                       ((struct hop_pause){
                           .excess_us = p.felt_us - info->downtime_ms * 1000,
                           .felt_us = p.felt_us,
                           .before_stop_us = p.before_stop_us,
                           .after_resume_us = p.after_resume_us,
                           .downtime_us = info->downtime_ms * 1000,
                       }));
    /* The guest cannot run between STOP and RESUME. */
    g_assert_cmpint(p.felt_us, >=, p.stopped_us);
    /* One line per hop in the output of make check (prove shows stderr). */
    fprintf(stderr,
            "# %s hop %u: pause felt %.1f ms = %.1f before STOP + %.1f "
            "stopped + %.1f after RESUME (pulses every %d ms, %" G_GINT64_FORMAT
            " lost); QEMU downtime %" G_GINT64_FORMAT " ms; felt - downtime "
            "%.1f ms; guest's own clock across it %.1f ms\n",
            g_test_get_path(), t->hop, p.felt_us / 1e3, p.before_stop_us / 1e3,
            p.stopped_us / 1e3, p.after_resume_us / 1e3, PULSE_MS, p.lost,
            info->downtime_ms, p.felt_us / 1e3 - (double)info->downtime_ms,
            p.guest_gap_us / 1e3);
}

/* p50 and p95 of one member of every hop's struct hop_pause, as
 * "p50 X / p95 Y ms". */
static char *pause_pct(GArray *pauses, size_t member)
{
    g_autofree int64_t *v = g_new(int64_t, pauses->len ? pauses->len : 1);
    int64_t p50, p95;

    for (guint i = 0; i < pauses->len; i++) {
        v[i] = *(int64_t *)(void *)((char *)&g_array_index(
                                        pauses, struct hop_pause, i) +
                                    member);
    }
    p50 = vg_percentile(v, pauses->len, 50);
    p95 = vg_percentile(v, pauses->len, 95);
    return g_strdup_printf("p50 %.1f / p95 %.1f ms", p50 / 1e3, p95 / 1e3);
}

/* The pause over all hops of the case, one line on stderr. */
static void report_pauses(struct gm *t)
{
    g_autofree char *excess =
        pause_pct(t->pauses, offsetof(struct hop_pause, excess_us));
    g_autofree char *felt =
        pause_pct(t->pauses, offsetof(struct hop_pause, felt_us));
    g_autofree char *before =
        pause_pct(t->pauses, offsetof(struct hop_pause, before_stop_us));
    g_autofree char *after =
        pause_pct(t->pauses, offsetof(struct hop_pause, after_resume_us));
    g_autofree char *down =
        pause_pct(t->pauses, offsetof(struct hop_pause, downtime_us));

    fprintf(stderr,
            "# %s over %u hops: felt - QEMU downtime %s; felt %s; before "
            "STOP %s; after RESUME %s; QEMU downtime %s\n",
            g_test_get_path(), t->pauses->len, excess, felt, before, after,
            down);
}

/* The longest gap between consecutive heartbeats over the whole run,
 * and what the guest's own clock saw. */
static void report_run(struct gm *t)
{
    int64_t gap = 0, from = -1, to = -1, missing = 0;
    g_autofree char *hb = NULL;
    guint idx;

    collect_hb(t->src.con, t->hbs);
    g_array_sort(t->hbs, hb_cmp);
    for (guint i = 1; i < t->hbs->len; i++) {
        struct hb *a = &g_array_index(t->hbs, struct hb, i - 1);
        struct hb *b = &g_array_index(t->hbs, struct hb, i);

        missing += b->seq - a->seq - 1;
        if (b->t_ms - a->t_ms > gap) {
            gap = b->t_ms - a->t_ms;
            from = a->seq;
            to = b->seq;
        }
    }
    idx = gt_console_end(t->src.con);
    gt_console_send(t->src.con, "status");
    gt_wait_kind(t->src.con, &idx, "hb", GT_LINE_TIMEOUT_MS, &hb, NULL);
    g_test_message(
        "longest gap between heartbeats over the whole run: %" G_GINT64_FORMAT
        " ms (seq %" G_GINT64_FORMAT " to %" G_GINT64_FORMAT
        ", %" G_GINT64_FORMAT " lines lost); on the guest's own "
        "clock (which stands still while the VM is stopped): "
        "longest heartbeat gap %" G_GINT64_FORMAT
        " ms, longest pass of its main loop %" G_GINT64_FORMAT " ms",
        gap, from, to, missing, gt_kv(gt_match(hb, "hb"), "max_gap_ms"),
        gt_kv(gt_match(hb, "hb"), "stall_ms"));
    g_assert_cmpint(to, >, from);
}

/* After the migration: the whole model checks out on the destination,
 * and the guest goes on. */
static void check_after(struct gm *t)
{
    g_autofree char *verify = NULL, *first = NULL;
    int64_t src_steps, src_written, steps = -1, written = -1;
    int64_t deadline = vg_now_ms() + GT_LINE_TIMEOUT_MS;
    guint idx = 0;

    last_hb(t->src.con, &src_steps, &src_written);
    g_assert_cmpint(src_steps, >=, WARMUP_STEPS);
    idx = gt_console_end(t->dst.con);
    gt_console_send(t->dst.con, "verify");
    gt_wait_kind(t->dst.con, &idx, "verify", GT_LINE_TIMEOUT_MS, &verify, NULL);
    g_test_message("destination: %s", verify);
    g_assert_cmpint(gt_kv(gt_match(verify, "verify"), "pages"), ==, t->pages);
    if (gt_kv(gt_match(verify, "verify"), "corrupt") != 0) {
        gt_count_kind(t->dst.con, "CORRUPT", &first);
        GT_FAIL("hop %u: the destination's check found corrupt pages (%s); "
                "the first: %s; consoles and logs kept in %s",
                t->hop, verify, first ? first : "(no CORRUPT line)", t->dir);
    }
    /* Progress on the destination: more steps, more pages written. */
    while (steps <= src_steps + 5 || written <= src_written) {
        g_autofree char *hb = NULL;

        if (vg_now_ms() > deadline) {
            GT_FAIL(
                "no progress on the destination within %d ms: %" G_GINT64_FORMAT
                " steps, %" G_GINT64_FORMAT
                " pages written (source: %" G_GINT64_FORMAT
                ", %" G_GINT64_FORMAT ")",
                GT_LINE_TIMEOUT_MS, steps, written, src_steps, src_written);
        }
        gt_wait_kind(t->dst.con, &idx, "hb", GT_LINE_TIMEOUT_MS, &hb, NULL);
        steps = gt_kv(gt_match(hb, "hb"), "steps");
        written = gt_kv(gt_match(hb, "hb"), "pages_written");
        g_assert_cmpint(gt_kv(gt_match(hb, "hb"), "corrupt"), ==, 0);
    }
    g_test_message(
        "progress: %" G_GINT64_FORMAT " steps and %" G_GINT64_FORMAT
        " pages written at the source's last heartbeat, %" G_GINT64_FORMAT
        " and %" G_GINT64_FORMAT " on the destination",
        src_steps, src_written, steps, written);
    if (gt_count_kind(t->src.con, "CORRUPT", &first) ||
        gt_count_kind(t->dst.con, "CORRUPT", &first)) {
        GT_FAIL("the guest found corruption: %s", first);
    }
}

/* Self-test of the checker where the guest runs now: a flipped word
 * must be reported as it is. */
static void check_detection(struct gm *t)
{
    g_autofree char *inj = NULL, *verify = NULL, *bad = NULL, *exit_line = NULL;
    struct gt_console *c = t->src.con;
    guint idx = gt_console_end(c);
    const char *i, *b;

    gt_console_send(c, "inject");
    gt_wait_kind(c, &idx, "injected", GT_LINE_TIMEOUT_MS, &inj, NULL);
    gt_console_send(c, "verify");
    gt_wait_kind(c, &idx, "CORRUPT", GT_LINE_TIMEOUT_MS, &bad, NULL);
    gt_wait_kind(c, &idx, "verify", GT_LINE_TIMEOUT_MS, &verify, NULL);
    g_test_message("self-test: %s -> %s", inj, bad);
    i = gt_match(inj, "injected");
    b = gt_match(bad, "CORRUPT");
    g_assert_cmpint(gt_kv(gt_match(verify, "verify"), "corrupt"), ==, 1);
    g_assert_cmpint(gt_kv(b, "page"), ==, gt_kv(i, "page"));
    g_assert_cmpint(gt_kv(b, "word"), ==, gt_kv(i, "word"));
    g_assert_cmpint(gt_kv(b, "expected"), ==, gt_kv(i, "expected"));
    g_assert_cmpint(gt_kv(b, "actual"), ==, gt_kv(i, "actual"));
    g_assert_cmpint(gt_kv(b, "words"), ==, 1);
    /* quit: a last full check, and the exit status says corruption. */
    gt_console_send(c, "quit");
    gt_wait_kind(c, &idx, "done", GT_LINE_TIMEOUT_MS, &exit_line, NULL);
    g_assert_cmpint(gt_kv(gt_match(exit_line, "done"), "corrupt"), >=, 1);
}

/* A pulse on @c: the guest runs there. */
static void wait_pulse(struct gt_console *c)
{
    g_autofree char *pulse = NULL;
    guint idx = 0;

    gt_wait_kind(c, &idx, "pulse", GT_LINE_TIMEOUT_MS, &pulse, NULL);
}

/* Without a vGPU: quit, and the guest says it is done. */
static void quit(struct gm *t)
{
    g_autofree char *done = NULL;
    guint idx = gt_console_end(t->src.con);

    gt_console_send(t->src.con, "quit");
    gt_wait_kind(t->src.con, &idx, "done", GT_LINE_TIMEOUT_MS, &done, NULL);
    g_assert_cmpint(gt_kv(gt_match(done, "done"), "corrupt"), ==, 0);
}

/* Migrate the guest to a new destination and check it there; the old
 * source is stopped and the destination becomes the source. */
static void hop(struct gm *t)
{
    g_autofree char *name = g_strdup_printf("dst%u", t->hop + 1);
    struct vg_mig_info info;
    bool forced = false;

    side_start(t, &t->dst, name, true);
    migrate(t, &info, &forced);
    t->hop++;
    for (unsigned d = 0; d < t->nvgpu; d++) {
        if (t->postcopy) {
            check_postcopy(t, d);
        } else {
            check_stats(t, d);
        }
    }
    if (t->nvgpu) {
        check_after(t);
    }
    wait_pulse(t->dst.con);
    if (!t->ram_check) { /* its pause includes the comparison */
        report_pause(t, &info);
    }
    collect_hb(t->src.con, t->hbs);
    side_stop(&t->src);
    t->src = t->dst;
    memset(&t->dst, 0, sizeof(t->dst));
}

/* HOPS, or VGMIG_GUEST_HOPS if set (a bad value fails the test). */
static unsigned hops(void)
{
    const char *v = g_getenv("VGMIG_GUEST_HOPS");
    guint64 n = HOPS;
    g_autoptr(GError) gerr = NULL;

    if (v && !g_ascii_string_to_unsigned(v, 10, 1, MAX_HOPS, &n, &gerr)) {
        GT_FAIL("VGMIG_GUEST_HOPS=%s: %s", v, gerr->message);
    }
    return (unsigned)n;
}

/* Boot with @nvgpu vGPUs, migrate @hops times, check the checker (with a
 * vGPU), stop. */
static void run_case_pc(const char *tag, const char *guest_args, unsigned hops,
                        unsigned nvgpu, bool ram_check, bool postcopy)
{
    struct gm t = {.guest_args = guest_args,
                   .nvgpu = nvgpu,
                   .ram_check = ram_check,
                   .postcopy = postcopy};

    t.hbs = g_array_new(FALSE, FALSE, sizeof(struct hb));
    t.pauses = g_array_new(FALSE, FALSE, sizeof(struct hop_pause));
    gt_image_get(&t.img);
    GT_OK(vg_tmpdir_create(tag, &t.dir, GT_ERR));
    g_test_message("logs in %s; guest: vgpu-guest %s", t.dir, guest_args);
    side_start(&t, &t.src, "src", false);
    boot(&t);
    while (t.hop < hops) {
        hop(&t);
    }
    report_run(&t);
    if (t.pauses->len) {
        report_pauses(&t);
    }
    if (!nvgpu) {
        quit(&t);
    } else {
        check_detection(&t);
    }
    side_stop(&t.src);
    GT_OK(vg_tmpdir_remove(t.dir, GT_ERR));
    g_free(t.dir);
    g_array_free(t.hbs, TRUE);
    g_array_free(t.pauses, TRUE);
    gt_image_clear(&t.img);
}

static void run_case(const char *tag, const char *guest_args, unsigned hops,
                     unsigned nvgpu, bool ram_check)
{
    run_case_pc(tag, guest_args, hops, nvgpu, ram_check, false);
}

/* Every device engine and guest CPU stores at once. */
static void test_all(void)
{
    run_case("guest-all", "--profile,all,--seed,7," HEARTBEAT_ARG, hops(), 1,
             false);
}

/* Guest CPU stores through the BAR2 mapping only: what the device cannot
 * see itself. */
static void test_cpu_writes(void)
{
    run_case("guest-cpu",
             "--profile,cpu-writes,--interval,5,--seed,11," HEARTBEAT_ARG,
             hops(), 1, false);
}

/* The guest's RAM, not only its VRAM, arrives exactly as the source left
 * it: the destination waits paused at each hop until both are compared.
 * (Under TCG, QEMU's RAM dirty log lost writes to pages it had already
 * collected as dirty; qemu-patches/0018.) */
static void test_ram_identical(void)
{
    run_case("guest-ram",
             "--profile,cpu-writes,--interval,5,--seed,13," HEARTBEAT_ARG,
             RAM_HOPS, 1, true);
}

/* The baseline of the pause: the same guest and QEMU without a vGPU,
 * only RAM to migrate.  What it feels beyond QEMU's downtime is not the
 * vGPU's doing. */
static void test_no_vgpu(void)
{
    run_case("guest-novgpu", "--no-device," HEARTBEAT_ARG, hops(), 0, false);
}

/* Two vGPUs, both driven by the guest with every engine and CPU stores,
 * each checked page by page after every hop. */
static void test_two_vgpus(void)
{
    run_case("guest-two", "--profile,all,--seed,7,--all-devices," HEARTBEAT_ARG,
             hops(), 2, false);
}

/* Post-copy: switched over at once, the guest runs on the destination
 * while VRAM arrives, its vCPU's touches of missing pages fetched on
 * demand; every engine and CPU stores, every page checked after each
 * hop. */
static void test_postcopy(void)
{
    run_case_pc("guest-postcopy", "--profile,all,--seed,17," HEARTBEAT_ARG,
                hops(), 1, false, true);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/guest/migrate/all", test_all);
    g_test_add_func("/guest/migrate/cpu-writes", test_cpu_writes);
    g_test_add_func("/guest/migrate/ram-identical", test_ram_identical);
    g_test_add_func("/guest/migrate/no-vgpu", test_no_vgpu);
    g_test_add_func("/guest/migrate/two-vgpus", test_two_vgpus);
    g_test_add_func("/guest/migrate/postcopy", test_postcopy);
    return g_test_run();
}
