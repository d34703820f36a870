/*
 * mig-test.h -- shared fixture of the live migration tests.
 *
 * A test case gets a private directory with a source (vgpu-server
 * "vgpu-src" and QEMU "qemu-src", the vGPU opened by vg_vgpu_open()) and
 * one or more destinations (vgpu-server "vgpu-dst", QEMU "qemu-dst" started
 * with -incoming defer and listening on a TCP port of loopback; a second
 * destination is "vgpu-dst2"/"qemu-dst2").  Each server writes its
 * statistics to <name>-stats.json.  After a migration, mt_attach_dst()
 * opens the vGPU of the destination without reprogramming it.  Every wait
 * is bounded (MT_MIG_TIMEOUT_MS, VGT_TIMEOUT_MS).
 */
#ifndef VGMIG_TESTS_QTEST_MIG_TEST_H
#define VGMIG_TESTS_QTEST_MIG_TEST_H

#include <stdio.h>

#include "qclient/io.h"
#include "qclient/migrate.h"
#include "qclient/vfio-trace.h"
#include "vgpu-test.h"

#define MT_MIG_TIMEOUT_MS   120000
#define MT_STATS_TIMEOUT_MS 20000
#define MT_QMP_TIMEOUT_MS   60000
#define MT_RING_ENTRIES     256u
/* Migration parameters of the source unless a test holds the migration.
 * The device's stop-copy pass resends all of VRAM, so QEMU's defaults
 * (128 MiB/s, 300 ms) never let a 64 MiB VRAM converge; and once
 * pre-copy has nothing left to send, QEMU's bandwidth estimate decays
 * towards 0, so the switchover decision needs avail-switchover-bandwidth
 * (what loopback sustains here). */
#define MT_DOWNTIME_MS          2000
#define MT_BANDWIDTH            (10ll << 30)
#define MT_SWITCHOVER_BANDWIDTH (1ll << 30)
/* Pattern FILLed into MiB @i of VRAM by mt_fill_vram(). */
#define MT_PATTERN(i) (0xa5000000u | ((uint32_t)(i) << 8) | 0x5au)
/* VRAM MiBs that mt_fill_vram() fills; the rest stay zero. */
#define MT_FILLED_MIB 48u
/* A MiB of VRAM that gets random data by DMA instead of a pattern. */
#define MT_DMA_MIB 5u

/* Fail the test case with a formatted message. */
#define MT_FAIL(...)                                                           \
    do {                                                                       \
        char *mt_msg_ = g_strdup_printf(__VA_ARGS__);                          \
        g_assertion_message(G_LOG_DOMAIN, __FILE__, __LINE__, G_STRFUNC,       \
                            mt_msg_);                                          \
        g_free(mt_msg_);                                                       \
    } while (0)

struct mt_side {
    struct vg_server *srv;
    struct vg_qemu *qemu;
    char *stats; /* path of the server's statistics file */
};

struct mt {
    char *dir;
    struct mt_side src;
    struct mt_side dst;
    unsigned ndst; /* destinations started so far */
    char *uri;     /* where dst listens */
    struct vg_galloc ram;
    struct vg_vgpu gpu;  /* on the source */
    struct vg_vgpu dgpu; /* on the destination, after mt_attach_dst() */
    bool prealloc_ram;   /* the QEMUs preallocate guest RAM (prealloc=on) */
};

/* The harness starts every server on a GPU (VGMIG_SERVER_BACKEND=cuda or
 * cuda:N): VRAM is not mapped, so QEMU traps BAR2. */
static inline bool mt_vram_on_gpu(void)
{
    const char *backend = g_getenv("VGMIG_SERVER_BACKEND");

    return backend && g_str_has_prefix(backend, "cuda");
}

/* QEMU arguments that trace the events qclient/vfio-trace.h reads:
 * "-trace EVENT" pairs, NULL-terminated. */
#define MT_TRACE_ARGC (2 * VG_VFIO_TRACE_NEVENTS + 1)
static inline void mt_trace_args(const char *args[MT_TRACE_ARGC])
{
    for (unsigned i = 0; i < VG_VFIO_TRACE_NEVENTS; i++) {
        args[2 * i] = "-trace";
        args[2 * i + 1] = vg_vfio_trace_events[i];
    }
    args[MT_TRACE_ARGC - 1] = NULL;
}

/* Parse the trace events in the log of @qemu (started with
 * mt_trace_args()) into @tr, and log what they say as @what. */
static inline void mt_trace_read(const struct vg_qemu *qemu, const char *what,
                                 struct vg_vfio_trace *tr)
{
    g_autofree char *text = NULL;
    g_autofree char *desc = NULL;
    GError *gerr = NULL;

    if (!g_file_get_contents(qemu->proc.log, &text, NULL, &gerr)) {
        MT_FAIL("reading %s: %s", qemu->proc.log, gerr->message);
    }
    VGT_OK(vg_vfio_trace_parse(text, tr, VGT_ERR));
    desc = vg_vfio_trace_describe(tr);
    g_test_message("%s trace: %s", what, desc);
}

/* Start server @name (@vram, more arguments @extra) and its QEMU @qname
 * (more arguments @qemu_extra, -incoming defer if @incoming) into
 * @side. */
static inline void mt_start_side(struct mt *t, struct mt_side *side,
                                 const char *name, const char *qname,
                                 const char *vram, const char *const *extra,
                                 const char *const *qemu_extra, bool incoming)
{
    struct vg_server_opts so = {
        .dir = t->dir,
        .vram = vram,
        .page_size = VGT_PAGE_ARG,
        .log_level = "info",
        .name = name,
        .extra_args = extra,
    };
    struct vg_qemu_opts qo = {
        .dir = t->dir,
        .name = qname,
        .ram_mib = VGT_RAM_MIB,
        .prealloc = t->prealloc_ram,
        .incoming = incoming ? "defer" : NULL,
        .extra_args = qemu_extra,
    };

    side->stats = g_strdup_printf("%s/%s-stats.json", t->dir, name);
    so.stats_file = side->stats;
    VGT_OK(vg_server_start(&so, &side->srv, VGT_ERR));
    qo.vgpu_sock = side->srv->socket;
    VGT_OK(vg_qemu_start(&qo, &side->qemu, VGT_ERR));
    /* QEMU's main loop stalls while a stop-copy runs under its lock:
     * seconds for a sanitized server on a loaded machine. */
    vg_qmp_set_timeout(side->qemu->qmp, MT_QMP_TIMEOUT_MS);
    if (side->qemu->qt) {
        vg_qtest_set_timeout(side->qemu->qt, MT_QMP_TIMEOUT_MS);
    }
}

/* Source side with VRAM @vram and more QEMU arguments @qemu_extra:
 * server, QEMU, the vGPU opened and its ring set up; its QEMU, and the
 * destinations' later, preallocate guest RAM if @prealloc_ram. */
static inline void mt_start_src_opts(struct mt *t, const char *tag,
                                     const char *vram,
                                     const char *const *srv_extra,
                                     const char *const *qemu_extra,
                                     bool prealloc_ram)
{
    memset(t, 0, sizeof(*t));
    t->prealloc_ram = prealloc_ram;
    VGT_OK(vg_tmpdir_create(tag, &t->dir, VGT_ERR));
    g_test_message("logs in %s", t->dir);
    mt_start_side(t, &t->src, "vgpu-src", "qemu-src", vram, srv_extra,
                  qemu_extra, false);
    vg_galloc_init(&t->ram, VGT_RAM_START, VGT_RAM_END);
    VGT_OK(vg_vgpu_open(t->src.qemu->qt, &t->ram, &t->gpu, VGT_ERR));
    VGT_OK(vg_vgpu_ring_init(&t->gpu, &t->ram, MT_RING_ENTRIES, VGT_ERR));
    VGT_OK(vg_vgpu_wr(&t->gpu, VGPU_REG_IRQ_MASK,
                      VGPU_IRQ_FENCE | VGPU_IRQ_ERROR, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "downtime-limit",
                                MT_DOWNTIME_MS, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "max-bandwidth", MT_BANDWIDTH,
                                VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "avail-switchover-bandwidth",
                                MT_SWITCHOVER_BANDWIDTH, VGT_ERR));
}

static inline void mt_start_src_with(struct mt *t, const char *tag,
                                     const char *vram,
                                     const char *const *srv_extra,
                                     const char *const *qemu_extra)
{
    mt_start_src_opts(t, tag, vram, srv_extra, qemu_extra, false);
}

/* Source side: servers, QEMU, the vGPU opened and its ring set up. */
static inline void mt_start_src(struct mt *t, const char *tag,
                                const char *const *srv_extra)
{
    mt_start_src_with(t, tag, VGT_VRAM_ARG, srv_extra, NULL);
}

/* Hold the migration in pre-copy.  QEMU switches over when the pending
 * data is at most bandwidth x downtime-limit: with 1000 bytes/s and 1 ms
 * that is 1 byte, and the device always has its state left for
 * stop-copy.  (Without patch 0027 a threshold of 0 would not do: QEMU
 * then compared its pending *estimate*, which leaves out the stop-copy
 * size, and a device whose pre-copy pass is done estimates 0.)
 * @bandwidth caps the pre-copy rate. */
static inline void mt_hold(struct mt *t, int64_t bandwidth)
{
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "avail-switchover-bandwidth",
                                1000, VGT_ERR));
    VGT_OK(
        vg_mig_set_parameter(t->src.qemu->qmp, "downtime-limit", 1, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(t->src.qemu->qmp, "max-bandwidth", bandwidth,
                                VGT_ERR));
}

/* Lift mt_hold(): the parameters of mt_start_src() again. */
static inline int mt_release(struct mt *t, struct vg_error *err)
{
    struct vg_qmp *qmp = t->src.qemu->qmp;
    int rc = vg_mig_set_parameter(qmp, "max-bandwidth", MT_BANDWIDTH, err);

    if (rc == 0) {
        rc = vg_mig_set_parameter(qmp, "downtime-limit", MT_DOWNTIME_MS, err);
    }
    if (rc == 0) {
        rc = vg_mig_set_parameter(qmp, "avail-switchover-bandwidth",
                                  MT_SWITCHOVER_BANDWIDTH, err);
    }
    return rc;
}

/* Stop the current destination (if any); its files stay. */
static inline void mt_stop_dst(struct mt *t)
{
    vg_qemu_free(t->dst.qemu);
    vg_server_free(t->dst.srv);
    g_free(t->dst.stats);
    g_free(t->uri);
    memset(&t->dst, 0, sizeof(t->dst));
    t->uri = NULL;
}

/* A (new) destination with VRAM @vram and more QEMU arguments
 * @qemu_extra, not yet listening: capabilities and parameters can be set
 * on it before mt_listen(). */
static inline void mt_start_dst_with(struct mt *t, const char *vram,
                                     const char *const *srv_extra,
                                     const char *const *qemu_extra)
{
    g_autofree char *name = NULL;
    g_autofree char *qname = NULL;

    mt_stop_dst(t);
    t->ndst++;
    name = t->ndst == 1 ? g_strdup("vgpu-dst")
                        : g_strdup_printf("vgpu-dst%u", t->ndst);
    qname = t->ndst == 1 ? g_strdup("qemu-dst")
                         : g_strdup_printf("qemu-dst%u", t->ndst);
    mt_start_side(t, &t->dst, name, qname, vram, srv_extra, qemu_extra, true);
}

/* The destination listens for the migration on loopback (t->uri). */
static inline void mt_listen(struct mt *t)
{
    VGT_OK(vg_mig_incoming(t->dst.qemu->qmp, &t->uri, VGT_ERR));
    g_test_message("destination %s listens on %s", t->dst.qemu->proc.name,
                   t->uri);
}

/* A (new) destination with VRAM @vram, listening for the migration. */
static inline void mt_start_dst(struct mt *t, const char *vram,
                                const char *const *srv_extra)
{
    mt_start_dst_with(t, vram, srv_extra, NULL);
    mt_listen(t);
}

static inline void mt_stop(struct mt *t)
{
    mt_stop_dst(t);
    vg_qemu_free(t->src.qemu);
    vg_server_free(t->src.srv);
    g_free(t->src.stats);
    if (g_getenv("VGMIG_KEEP_LOGS")) {
        g_test_message("logs kept in %s (VGMIG_KEEP_LOGS)", t->dir);
    } else {
        VGT_OK(vg_tmpdir_remove(t->dir, VGT_ERR));
    }
    g_free(t->dir);
    memset(t, 0, sizeof(*t));
}

static inline void mt_log_info(const char *what, const struct vg_mig_info *i)
{
    g_test_message("%s: status %s, total %" G_GINT64_FORMAT
                   " ms, downtime %" G_GINT64_FORMAT
                   " ms, RAM %" G_GINT64_FORMAT " bytes, vfio %" G_GINT64_FORMAT
                   " bytes%s%s",
                   what, i->status, i->total_time_ms, i->downtime_ms,
                   i->ram_transferred, i->vfio_transferred,
                   i->error_desc[0] ? ", error: " : "", i->error_desc);
}

/* Migrate src to the current destination and wait for "completed"; @fn
 * runs on every sample.  The final sample in @info if not NULL. */
static inline void mt_migrate_wait(struct mt *t, vg_mig_poll_fn fn,
                                   void *opaque, struct vg_mig_info *info)
{
    struct vg_mig_info local;

    info = info ? info : &local;
    VGT_OK(vg_mig_wait_completed(t->src.qemu->qmp, MT_MIG_TIMEOUT_MS, fn,
                                 opaque, info, VGT_ERR));
    mt_log_info("migration", info);
}

static inline void mt_migrate(struct mt *t, vg_mig_poll_fn fn, void *opaque,
                              struct vg_mig_info *info)
{
    VGT_OK(vg_mig_start(t->src.qemu->qmp, t->uri, VGT_ERR));
    mt_migrate_wait(t, fn, opaque, info);
}

/* Wait for the end of the migration; it must have ended as @want. */
static inline void mt_wait_final(struct mt *t, const char *want,
                                 struct vg_mig_info *info)
{
    VGT_OK(vg_mig_poll(t->src.qemu->qmp, MT_MIG_TIMEOUT_MS, NULL, NULL, info,
                       VGT_ERR));
    mt_log_info("ended", info);
    g_assert_cmpstr(info->status, ==, want);
}

/* After a completed migration: the destination runs, the source is in
 * postmigrate, and the destination's vGPU is attached as it came. */
static inline void mt_attach_dst(struct mt *t)
{
    VGT_OK(vg_mig_wait_runstate(t->dst.qemu->qmp, "running", VGT_TIMEOUT_MS,
                                VGT_ERR));
    /* QEMU says "completed" before its migration thread's last bottom
     * half moves the source from finish-migrate to postmigrate. */
    VGT_OK(vg_mig_wait_runstate(t->src.qemu->qmp, "postmigrate", VGT_TIMEOUT_MS,
                                VGT_ERR));
    VGT_OK(vg_vgpu_attach(t->dst.qemu->qt, &t->dgpu, VGT_ERR));
    g_assert_cmphex(t->dgpu.regs_addr, ==, t->gpu.regs_addr);
    g_assert_cmphex(t->dgpu.vram_addr, ==, t->gpu.vram_addr);
    g_assert_cmpuint(t->dgpu.vram_size, ==, t->gpu.vram_size);
    g_assert_cmphex(t->dgpu.ring_addr, ==, t->gpu.ring_addr);
    g_assert_cmpuint(t->dgpu.ring_entries, ==, t->gpu.ring_entries);
    for (unsigned v = 0; v < VGPU_MSIX_VECTORS; v++) {
        g_assert_cmphex(t->dgpu.msi_slot[v], ==, t->gpu.msi_slot[v]);
    }
}

static inline uint32_t mt_rd(struct vg_vgpu *gpu, uint32_t reg)
{
    uint32_t v = 0;

    VGT_OK(vg_vgpu_rd(gpu, reg, &v, VGT_ERR));
    return v;
}

/* Submit @n commands on @gpu and wait until idle; must not halt. */
static inline void mt_run(struct vg_vgpu *gpu, const struct vgpu_cmd *cmds,
                          unsigned n)
{
    uint32_t status = 0;

    VGT_OK(vg_vgpu_submit(gpu, cmds, n, VGT_ERR));
    VGT_OK(vg_vgpu_wait_idle(gpu, VGT_TIMEOUT_MS, &status, VGT_ERR));
    if (status & VGPU_STATUS_HALTED) {
        MT_FAIL("vGPU halted: ERROR_CODE %u at ring index %u",
                mt_rd(gpu, VGPU_REG_ERROR_CODE),
                mt_rd(gpu, VGPU_REG_ERROR_INDEX));
    }
}

/* FENCE @value on @gpu: the register and the MSI-X message must come;
 * the interrupt is acknowledged afterwards. */
static inline void mt_fence(struct vg_vgpu *gpu, uint32_t value)
{
    struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FENCE, value, 0, 0, 0, 0, 0);

    VGT_OK(vg_vgpu_msi_clear(gpu, VGPU_MSIX_VEC_FENCE, VGT_ERR));
    mt_run(gpu, &c, 1);
    VGT_OK(vg_vgpu_wait_reg(gpu, VGPU_REG_FENCE_LO, value, VGT_TIMEOUT_MS,
                            VGT_ERR));
    VGT_OK(vg_vgpu_msi_wait(gpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS, VGT_ERR));
    VGT_OK(vg_vgpu_wr(gpu, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE, VGT_ERR));
}

/* The random MiB that mt_fill_vram() uploads (deterministic). */
static inline uint8_t *mt_dma_data(void)
{
    uint8_t *d = g_malloc(1u << 20);
    GRand *r = g_rand_new_with_seed(0x6d696721);

    for (size_t i = 0; i < (1u << 20); i += 4) {
        uint32_t v = g_rand_int(r);
        memcpy(d + i, &v, 4);
    }
    g_rand_free(r);
    return d;
}

/* Fill MiB i < MT_FILLED_MIB of VRAM with MT_PATTERN(i) by FILL, except
 * MiB MT_DMA_MIB which gets mt_dma_data() by DMA; the rest stays zero. */
static inline void mt_fill_vram(struct mt *t)
{
    g_autofree uint8_t *data = mt_dma_data();
    struct vgpu_cmd c[MT_FILLED_MIB];
    uint64_t buf = 0;

    VGT_OK(vg_galloc_alloc(&t->ram, 1u << 20, 4096, &buf, VGT_ERR));
    VGT_OK(vg_qtest_memwrite(t->src.qemu->qt, buf, data, 1u << 20, VGT_ERR));
    for (unsigned i = 0; i < MT_FILLED_MIB; i++) {
        c[i] = i == MT_DMA_MIB
                   ? vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, (uint64_t)i << 20, buf,
                                   1u << 20, 0, 0, 0)
                   : vgpu_cmd_make(VGPU_OP_FILL, (uint64_t)i << 20, 1u << 20,
                                   MT_PATTERN(i), 0, 0, 0);
    }
    mt_run(&t->gpu, c, MT_FILLED_MIB);
}

/* 16 bytes of every VRAM page of @gpu, at an offset that moves from page
 * to page, read through BAR2: VGT_VRAM_SIZE / VGT_PAGE_SIZE * 16 bytes. */
#define MT_SAMPLE_BYTES 16u
#define MT_SAMPLES_SIZE (VGT_VRAM_SIZE / VGT_PAGE_SIZE * MT_SAMPLE_BYTES)
static inline uint64_t mt_sample_off(uint64_t page)
{
    return page * VGT_PAGE_SIZE +
           ((page * 4099u) % (VGT_PAGE_SIZE - MT_SAMPLE_BYTES) & ~3ull);
}

static inline uint8_t *mt_vram_samples(struct vg_vgpu *gpu)
{
    uint64_t pages = VGT_VRAM_SIZE / VGT_PAGE_SIZE;
    uint8_t *s = g_malloc(MT_SAMPLES_SIZE);

    for (uint64_t p = 0; p < pages; p++) {
        VGT_OK(vg_qtest_memread(gpu->qt, gpu->vram_addr + mt_sample_off(p),
                                s + p * MT_SAMPLE_BYTES, MT_SAMPLE_BYTES,
                                VGT_ERR));
    }
    return s;
}

/* The samples mt_fill_vram() must have produced. */
static inline uint8_t *mt_expected_samples(void)
{
    g_autofree uint8_t *data = mt_dma_data();
    uint64_t pages = VGT_VRAM_SIZE / VGT_PAGE_SIZE;
    uint8_t *s = g_malloc0(MT_SAMPLES_SIZE);

    for (uint64_t p = 0; p < pages; p++) {
        uint64_t off = mt_sample_off(p);
        unsigned mib = (unsigned)(off >> 20);
        uint32_t pat = MT_PATTERN(mib);

        for (unsigned b = 0; mib < MT_FILLED_MIB && b < MT_SAMPLE_BYTES;
             b += 4) {
            memcpy(s + p * MT_SAMPLE_BYTES + b,
                   mib == MT_DMA_MIB ? data + ((off + b) & 0xfffff)
                                     : (const uint8_t *)&pat,
                   4);
        }
    }
    return s;
}

/* Compare two sample sets; name the first differing page. */
static inline void mt_assert_samples(const uint8_t *got, const uint8_t *want,
                                     const char *what)
{
    for (uint64_t i = 0; i < MT_SAMPLES_SIZE; i += MT_SAMPLE_BYTES) {
        if (memcmp(got + i, want + i, MT_SAMPLE_BYTES) != 0) {
            MT_FAIL("%s: VRAM page %" G_GUINT64_FORMAT
                    " (offset 0x%" G_GINT64_MODIFIER "x) differs: 0x%08x, "
                    "expected 0x%08x",
                    what, i / MT_SAMPLE_BYTES,
                    mt_sample_off(i / MT_SAMPLE_BYTES), *(uint32_t *)(got + i),
                    *(uint32_t *)(want + i));
        }
    }
}

/* After a failed migration: the source runs, its VRAM equals @before
 * (mt_vram_samples()), its vGPU runs a fence with value @fence and raises
 * the interrupt. */
static inline void mt_assert_source_intact(struct mt *t, const uint8_t *before,
                                           uint32_t fence)
{
    g_autofree uint8_t *now = NULL;

    VGT_OK(vg_mig_wait_runstate(t->src.qemu->qmp, "running", VGT_TIMEOUT_MS,
                                VGT_ERR));
    g_assert_true(vg_proc_alive(&t->src.srv->proc));
    now = mt_vram_samples(&t->gpu);
    mt_assert_samples(now, before, "source after the failed migration");
    mt_fence(&t->gpu, fence);
    g_assert_cmphex(mt_rd(&t->gpu, VGPU_REG_ERROR_CODE), ==, VGPU_ERR_NONE);
}

/* Wait for the stats of a finished migration: a VRAM checksum is there
 * and the device is in @state. */
static inline bool mt_stats_done(const struct vg_stats *st, void *opaque)
{
    return st->vram_checksum[0] &&
           (!opaque || !g_ascii_strcasecmp(st->state, opaque));
}

/* Stats predicate: "dma_logging" is @opaque ("true" or "false"). */
static inline bool mt_stats_dma_logging(const struct vg_stats *st, void *opaque)
{
    g_autofree char *v = vg_stats_str(st, "dma_logging");

    return v && strcmp(v, opaque) == 0;
}

/* Wait until the server of @side reports DMA logging @on in its stats. */
static inline void mt_wait_dma_logging(struct mt_side *side, bool on)
{
    struct vg_stats st;

    VGT_OK(vg_stats_wait(side->stats, mt_stats_dma_logging,
                         on ? "true" : "false", MT_STATS_TIMEOUT_MS, &st,
                         VGT_ERR));
    vg_stats_clear(&st);
}

/* Integer member @name of @st (it must be there). */
static inline int64_t mt_stat_int(const struct vg_stats *st, const char *name)
{
    int64_t v = 0;

    VGT_OK(vg_stats_int(st, name, &v, VGT_ERR));
    return v;
}

/* Number member @name of @st (it must be there). */
static inline double mt_stat_double(const struct vg_stats *st, const char *name)
{
    g_autofree char *v = vg_stats_str(st, name);

    g_assert_nonnull(v);
    return g_ascii_strtod(v, NULL);
}

/* The servers counted the data requests of a stream of @bytes: a data
 * request carries at most MT_MAX_XFER bytes, and serving them took time
 * on both sides. */
#define MT_MAX_XFER (4 << 20) /* a data_shm slot; the socket: 1 MiB */
static inline void mt_assert_data_requests(const struct vg_stats *src,
                                           const struct vg_stats *dst,
                                           int64_t bytes)
{
    int64_t least = (bytes + MT_MAX_XFER - 1) / MT_MAX_XFER;

    g_assert_cmpint(mt_stat_int(src, "precopy_reads") +
                        mt_stat_int(src, "stopcopy_reads"),
                    >=, least);
    g_assert_cmpint(mt_stat_int(dst, "load_writes"), >=, least);
    g_assert_cmpfloat(mt_stat_double(dst, "load_write_ms"), >, 0);
    g_assert_cmpfloat(mt_stat_double(src, "precopy_read_ms") +
                          mt_stat_double(src, "stopcopy_read_ms"),
                      >, 0);
    /* Their hashing and copy waits are part of that time. */
    g_assert_cmpfloat(mt_stat_double(src, "data_hash_ms") +
                          mt_stat_double(src, "data_copy_ms"),
                      >, 0);
    g_assert_cmpfloat(mt_stat_double(dst, "data_hash_ms") +
                          mt_stat_double(dst, "data_copy_ms"),
                      >, 0);
    g_assert_cmpfloat(mt_stat_double(src, "data_hash_ms") +
                          mt_stat_double(src, "data_copy_ms"),
                      <=,
                      mt_stat_double(src, "precopy_read_ms") +
                          mt_stat_double(src, "stopcopy_read_ms"));
    g_assert_cmpfloat(mt_stat_double(dst, "data_hash_ms") +
                          mt_stat_double(dst, "data_copy_ms"),
                      <=, mt_stat_double(dst, "load_write_ms"));
}

/* Both servers' stats after a completed migration (source device back
 * in STOP, destination RUNNING).  The VRAM checksums (source after
 * stop-copy, destination after loading) must be equal, and so must the
 * device state checksums; the destination received exactly what this
 * session of the source sent. */
static inline void mt_assert_stats_equal(struct mt *t, struct vg_stats *src,
                                         struct vg_stats *dst)
{
    int64_t pre = 0, stop = 0;

    VGT_OK(vg_stats_wait(t->src.stats, mt_stats_done, "stop",
                         MT_STATS_TIMEOUT_MS, src, VGT_ERR));
    VGT_OK(vg_stats_wait(t->dst.stats, mt_stats_done, "running",
                         MT_STATS_TIMEOUT_MS, dst, VGT_ERR));
    VGT_OK(vg_stats_int(src, "precopy_bytes", &pre, VGT_ERR));
    VGT_OK(vg_stats_int(src, "stopcopy_bytes", &stop, VGT_ERR));
    g_test_message(
        "source: state %s, sent %" G_GINT64_FORMAT
        " bytes (pre-copy %" G_GINT64_FORMAT ", stop-copy %" G_GINT64_FORMAT
        "), stop-copy %.1f ms, VRAM %s, device %s",
        src->state, src->bytes_sent, pre, stop, src->device_stopcopy_ms,
        src->vram_checksum, src->device_state_checksum);
    g_test_message("destination: state %s, received %" G_GINT64_FORMAT
                   " bytes, VRAM %s, device %s",
                   dst->state, dst->bytes_received, dst->vram_checksum,
                   dst->device_state_checksum);
    g_assert_cmpstr(dst->vram_checksum, ==, src->vram_checksum);
    {
        g_autofree char *backend = vg_stats_str(src, "backend");

        g_assert_nonnull(backend); /* "cpu", or the GPU (docs/cuda.md) */
        g_assert_cmpstr(backend, !=, "");
    }
    g_assert_cmpstr(src->device_state_checksum, !=, "");
    g_assert_cmpstr(dst->device_state_checksum, ==, src->device_state_checksum);
    g_assert_cmpint(pre + stop, >, 0);
    g_assert_cmpint(dst->bytes_received, ==, pre + stop);
    g_assert_cmpfloat(src->device_stopcopy_ms, >=, 0);
    mt_assert_data_requests(src, dst, pre + stop);
}

#endif
