/*
 * test-mig-multi -- live migration of a VM with several vGPUs (issue 17).
 *
 * One QEMU with N vfio-user-pci devices ("vgpu0".."vgpu<N-1>"), each
 * served by its own vgpu-server, migrates to another QEMU with N fresh
 * servers.  QEMU migrates several VFIO devices only if all of them
 * advertise VFIO_MIGRATION_P2P; it then stops them in two steps (every
 * device to RUNNING_P2P or PRE_COPY_P2P before any goes further), and
 * starts the destination's the same way (STOP -> RUNNING_P2P -> RUNNING).
 *
 * Each device gets its own VRAM contents (FILL patterns that name the
 * device, a MiB of random data by DMA) and SCRATCH register; the
 * migration is held in pre-copy while every device runs more commands
 * (FILLs over sent and over zero MiBs), then released.  Afterwards, for
 * every device: the destination server's VRAM and device state checksums
 * equal its source server's (every byte), the destination received what
 * the source sent, pre-copy sent data, VRAM sampled through BAR2 on the
 * destination is what the commands computed, the registers came along,
 * the source's devices all differ from each other (no device was loaded
 * from another's stream), each source server's log shows the P2P states
 * on the way (PRE_COPY -> PRE_COPY_P2P -> STOP_COPY) and each destination
 * server's log STOP -> RUNNING_P2P -> RUNNING, QEMU read each source
 * device's DMA log but never for memory the server cannot write (the
 * BARs of all the devices: patch 0055), and every destination vGPU keeps
 * working.  Data-driven: 1, 2 and 4 vGPUs; with 1, QEMU asks for no P2P
 * state of its own (patch 0088) and the server still passes through it.
 */
#include "mig-test.h"
#include "qclient/vfio-trace.h"

#define MM_MAX 4u
/* FILL pattern of MiB @i of device @d before the migration, and of the
 * MiBs rewritten while it is held in pre-copy. */
#define MM_PATTERN(d, i)                                                       \
    (0xa5000000u | ((uint32_t)(d) << 20) | ((i) << 8) | 0x5au)
#define MM_PATTERN2(d, i)                                                      \
    (0x3c000000u | ((uint32_t)(d) << 20) | ((i) << 8) | 0xc3u)
#define MM_FILLED_MIB 48u /* MiBs filled before the migration */
#define MM_DMA_MIB    5u  /* ... except this one: random data by DMA */
/* Rewritten during pre-copy: MiBs [8, 16) (sent already) and [56, 60)
 * (zero until then). */
#define MM_RW_A_START 8u
#define MM_RW_A_END   16u
#define MM_RW_B_START 56u
#define MM_RW_B_END   60u
#define MM_HOLD_BW    (256ll << 20)
/* Pre-copy data of every device sent before the workload starts: most
 * of round 0 (MM_FILLED_MIB MiB of data, the rest zero runs). */
#define MM_PRECOPY_MIB 40u

struct mm_side {
    struct vg_server *srv[MM_MAX];
    char *stats[MM_MAX];
    struct vg_qemu *qemu;
};

struct mm {
    char *dir;
    unsigned n; /* vGPUs */
    struct mm_side src, dst;
    char *uri;
    struct vg_galloc ram;
    struct vg_vgpu gpu[MM_MAX];  /* source */
    struct vg_vgpu dgpu[MM_MAX]; /* destination, after the migration */
};

/* N servers "vgpu-<role><d>" and their QEMU "qemu-<role>" with N vGPUs. */
static void mm_start_side(struct mm *t, struct mm_side *side, const char *role,
                          bool incoming)
{
    const char *more[MM_MAX] = {NULL}; /* vgpu1.., NULL-terminated */
    const char *trace[MT_TRACE_ARGC];
    g_autofree char *qname = g_strdup_printf("qemu-%s", role);
    struct vg_qemu_opts qo = {
        .dir = t->dir,
        .name = qname,
        .ram_mib = VGT_RAM_MIB,
        .incoming = incoming ? "defer" : NULL,
        .vgpu_socks = more,
        .extra_args = trace,
    };

    mt_trace_args(trace);
    for (unsigned d = 0; d < t->n; d++) {
        g_autofree char *name = g_strdup_printf("vgpu-%s%u", role, d);
        struct vg_server_opts so = {
            .dir = t->dir,
            .vram = VGT_VRAM_ARG,
            .page_size = VGT_PAGE_ARG,
            .log_level = "info",
            .name = name,
        };

        side->stats[d] = g_strdup_printf("%s/%s-stats.json", t->dir, name);
        so.stats_file = side->stats[d];
        VGT_OK(vg_server_start(&so, &side->srv[d], VGT_ERR));
        if (d > 0) {
            more[d - 1] = side->srv[d]->socket;
        }
    }
    qo.vgpu_sock = side->srv[0]->socket;
    VGT_OK(vg_qemu_start(&qo, &side->qemu, VGT_ERR));
    vg_qmp_set_timeout(side->qemu->qmp, MT_QMP_TIMEOUT_MS);
    vg_qtest_set_timeout(side->qemu->qt, MT_QMP_TIMEOUT_MS);
}

static void mm_stop_side(struct mm_side *side)
{
    vg_qemu_free(side->qemu);
    for (unsigned d = 0; d < MM_MAX; d++) {
        vg_server_free(side->srv[d]);
        g_free(side->stats[d]);
    }
    memset(side, 0, sizeof(*side));
}

/* The switchover parameters of mig-test.h's source (@hold: QEMU never
 * switches over and pre-copy runs at MM_HOLD_BW, as mt_hold()). */
static void mm_params(struct mm *t, bool hold)
{
    struct vg_qmp *qmp = t->src.qemu->qmp;

    VGT_OK(vg_mig_set_parameter(qmp, "max-bandwidth",
                                hold ? MM_HOLD_BW : MT_BANDWIDTH, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(qmp, "downtime-limit",
                                hold ? 1 : MT_DOWNTIME_MS, VGT_ERR));
    VGT_OK(vg_mig_set_parameter(qmp, "avail-switchover-bandwidth",
                                hold ? 1000 : MT_SWITCHOVER_BANDWIDTH,
                                VGT_ERR));
}

/*
 * QEMU's trace of @side: every device state change it sent without
 * waiting it waited for, none moved a device out of P2P before all had
 * reached it, and each switchover had the changes of all @n devices in
 * flight at once (patch 0060): to P2P and to the final state, at least
 * 2 x @n changes.  A device alone is not moved to P2P first at any VM
 * state change (patch 0088): one change at its switchover.  The downtime's RAM
 * sync asked no server for a DMA logging report and took at least @reports from
 * those asked for with STOP_COPY (patch 0062): one per device on the source.
 */
static void mm_check_trace(const struct mm_side *side, unsigned n,
                           unsigned reports, const char *what)
{
    struct vg_vfio_trace tr;

    mt_trace_read(side->qemu, what, &tr);
    if (n == 1) {
        g_assert_cmpuint(tr.p2p_skipped, >=, 1); /* and the source's boot */
    } else {
        g_assert_cmpuint(tr.p2p_skipped, ==, 0);
    }
    g_assert_cmpuint(tr.state_sends, >=, n == 1 ? 1 : 2 * n);
    g_assert_cmpuint(tr.state_waits, ==, tr.state_sends);
    g_assert_cmpuint(tr.state_p2p_left_early, ==, 0);
    g_assert_cmpuint(tr.state_in_flight_max, ==, n);
    g_assert_cmpuint(tr.dma_reports_taken, >=, reports);
    g_assert_cmpuint(tr.dma_reports_asked_in_downtime, ==, 0);
}

/* The random MiB device @d gets by DMA (deterministic). */
static uint8_t *mm_dma_data(unsigned d)
{
    uint8_t *data = g_malloc(1u << 20);
    GRand *r = g_rand_new_with_seed(0x6d756c74u + d);

    for (size_t i = 0; i < (1u << 20); i += 4) {
        uint32_t v = g_rand_int(r);
        memcpy(data + i, &v, 4);
    }
    g_rand_free(r);
    return data;
}

static bool mm_rewritten(unsigned mib)
{
    return (mib >= MM_RW_A_START && mib < MM_RW_A_END) ||
           (mib >= MM_RW_B_START && mib < MM_RW_B_END);
}

/* VRAM of device @d before the migration: MM_PATTERN FILLs, random data
 * by DMA in MiB MM_DMA_MIB, zero above MM_FILLED_MIB. */
static void mm_fill(struct mm *t, unsigned d)
{
    g_autofree uint8_t *data = mm_dma_data(d);
    struct vgpu_cmd c[MM_FILLED_MIB];
    uint64_t buf = 0;

    VGT_OK(vg_galloc_alloc(&t->ram, 1u << 20, 4096, &buf, VGT_ERR));
    VGT_OK(vg_qtest_memwrite(t->src.qemu->qt, buf, data, 1u << 20, VGT_ERR));
    for (unsigned i = 0; i < MM_FILLED_MIB; i++) {
        c[i] = i == MM_DMA_MIB
                   ? vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, (uint64_t)i << 20, buf,
                                   1u << 20, 0, 0, 0)
                   : vgpu_cmd_make(VGPU_OP_FILL, (uint64_t)i << 20, 1u << 20,
                                   MM_PATTERN(d, i), 0, 0, 0);
    }
    mt_run(&t->gpu[d], c, MM_FILLED_MIB);
}

/* The commands run on every device while the migration is in pre-copy:
 * submitted to all devices first, so that they run side by side. */
static void mm_workload(struct mm *t)
{
    for (unsigned d = 0; d < t->n; d++) {
        struct vgpu_cmd
            c[MM_RW_A_END - MM_RW_A_START + MM_RW_B_END - MM_RW_B_START];
        unsigned k = 0;

        for (unsigned i = 0; i < 64; i++) {
            if (mm_rewritten(i)) {
                c[k++] = vgpu_cmd_make(VGPU_OP_FILL, (uint64_t)i << 20,
                                       1u << 20, MM_PATTERN2(d, i), 0, 0, 0);
            }
        }
        VGT_OK(vg_vgpu_submit(&t->gpu[d], c, k, VGT_ERR));
    }
    for (unsigned d = 0; d < t->n; d++) {
        uint32_t status = 0;

        VGT_OK(vg_vgpu_wait_idle(&t->gpu[d], VGT_TIMEOUT_MS, &status, VGT_ERR));
        g_assert_false(status & VGPU_STATUS_HALTED);
        mt_fence(&t->gpu[d], 0x100 + d);
    }
}

/* The samples (mt_vram_samples()) device @d must show at the end. */
static uint8_t *mm_expected_samples(unsigned d)
{
    g_autofree uint8_t *data = mm_dma_data(d);
    uint64_t pages = VGT_VRAM_SIZE / VGT_PAGE_SIZE;
    uint8_t *s = g_malloc0(MT_SAMPLES_SIZE);

    for (uint64_t p = 0; p < pages; p++) {
        uint64_t off = mt_sample_off(p);
        unsigned mib = (unsigned)(off >> 20);
        uint32_t pat =
            mm_rewritten(mib) ? MM_PATTERN2(d, mib) : MM_PATTERN(d, mib);

        if (mib >= MM_FILLED_MIB && !mm_rewritten(mib)) {
            continue; /* zero */
        }
        for (unsigned b = 0; b < MT_SAMPLE_BYTES; b += 4) {
            memcpy(s + p * MT_SAMPLE_BYTES + b,
                   mib == MM_DMA_MIB ? data + ((off + b) & 0xfffff)
                                     : (const uint8_t *)&pat,
                   4);
        }
    }
    return s;
}

/* Poll callback: the devices sent *@opaque bytes in pre-copy. */
static int mm_vfio_sent(const struct vg_mig_info *info, void *opaque,
                        struct vg_error *err)
{
    if (vg_mig_status_final(info->status)) {
        return vg_error_set(err, EIO, "migration ended in pre-copy: %s %s",
                            info->status, info->error_desc);
    }
    return info->vfio_transferred >= *(int64_t *)opaque;
}

static bool mm_stats_state(const struct vg_stats *st, void *opaque)
{
    return !g_ascii_strcasecmp(st->state, opaque);
}

/* Server @srv's log has the line of the device state change @arc. */
static void mm_assert_logged(struct vg_server *srv, const char *arc)
{
    g_autofree char *log = NULL;
    g_autofree char *line = g_strdup_printf("device state %s\n", arc);

    g_assert_true(g_file_get_contents(srv->proc.log, &log, NULL, NULL));
    if (!strstr(log, line)) {
        MT_FAIL("%s: no \"%s\" in its log", srv->proc.name, arc);
    }
}

/* Source and destination of device @d: equal checksums, the stream
 * complete, pre-copy used, the P2P states passed through. */
static void mm_check_pair(struct mm *t, unsigned d, char *src_vram)
{
    struct vg_stats sst, dst;
    int64_t pre = 0, stop = 0, reports = 0, idle = 0;

    VGT_OK(vg_stats_wait(t->src.stats[d], mt_stats_done, "stop",
                         MT_STATS_TIMEOUT_MS, &sst, VGT_ERR));
    VGT_OK(vg_stats_wait(t->dst.stats[d], mt_stats_done, "running",
                         MT_STATS_TIMEOUT_MS, &dst, VGT_ERR));
    VGT_OK(vg_stats_int(&sst, "precopy_bytes", &pre, VGT_ERR));
    VGT_OK(vg_stats_int(&sst, "stopcopy_bytes", &stop, VGT_ERR));
    VGT_OK(vg_stats_int(&sst, "dma_log_reports", &reports, VGT_ERR));
    VGT_OK(vg_stats_int(&sst, "dma_log_reports_idle", &idle, VGT_ERR));
    g_test_message(
        "vgpu%u: sent %" G_GINT64_FORMAT " bytes (pre-copy %" G_GINT64_FORMAT
        ", stop-copy %" G_GINT64_FORMAT "), VRAM %s / %s, device %s / %s",
        d, sst.bytes_sent, pre, stop, sst.vram_checksum, dst.vram_checksum,
        sst.device_state_checksum, dst.device_state_checksum);
    g_assert_cmpstr(sst.vram_checksum, !=, "");
    g_assert_cmpstr(dst.vram_checksum, ==, sst.vram_checksum);
    g_assert_cmpstr(sst.device_state_checksum, !=, "");
    g_assert_cmpstr(dst.device_state_checksum, ==, sst.device_state_checksum);
    /* n x MM_PRECOPY_MIB in all, and no device sends more than its VRAM's
     * MM_FILLED_MIB in round 0: each sent a good part. */
    g_assert_cmpint(pre, >, 16 << 20);
    g_assert_cmpint(dst.bytes_received, ==, pre + stop);
    /* QEMU read the device's DMA log of guest RAM, and never of memory
     * the server cannot write (the other devices' BARs, ROMs). */
    g_test_message("vgpu%u: %" G_GINT64_FORMAT
                   " DMA log reports, %" G_GINT64_FORMAT
                   " of memory it cannot write",
                   d, reports, idle);
    g_assert_cmpint(reports, >, 0);
    g_assert_cmpint(idle, ==, 0);
    g_assert_cmpstr(sst.last_error, ==, "");
    g_assert_cmpstr(dst.last_error, ==, "");
    g_strlcpy(src_vram, sst.vram_checksum, sizeof(sst.vram_checksum));
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);

    mm_assert_logged(t->src.srv[d], "PRE_COPY -> PRE_COPY_P2P");
    mm_assert_logged(t->src.srv[d], "PRE_COPY_P2P -> STOP_COPY");
    mm_assert_logged(t->src.srv[d], "STOP_COPY -> STOP");
    mm_assert_logged(t->dst.srv[d], "RESUMING -> STOP");
    mm_assert_logged(t->dst.srv[d], "STOP -> RUNNING_P2P");
    mm_assert_logged(t->dst.srv[d], "RUNNING_P2P -> RUNNING");
}

static void test_multi(gconstpointer data)
{
    unsigned n = GPOINTER_TO_UINT(data);
    struct vg_pci_windows win = VG_PCI_WINDOWS_INIT;
    char src_vram[MM_MAX][64];
    uint32_t scratch[MM_MAX];
    struct vg_mig_info info;
    g_autofree char *tag = g_strdup_printf("mig-multi%u", n);
    struct mm t = {.n = n};

    g_assert_cmpuint(n, <=, MM_MAX);
    VGT_OK(vg_tmpdir_create(tag, &t.dir, VGT_ERR));
    g_test_message("logs in %s", t.dir);

    /* Source: N vGPUs with their own contents. */
    mm_start_side(&t, &t.src, "src", false);
    vg_galloc_init(&t.ram, VGT_RAM_START, VGT_RAM_END);
    for (unsigned d = 0; d < n; d++) {
        VGT_OK(vg_vgpu_open_nth(t.src.qemu->qt, &t.ram, d, &win, &t.gpu[d],
                                VGT_ERR));
        VGT_OK(vg_vgpu_ring_init(&t.gpu[d], &t.ram, MT_RING_ENTRIES, VGT_ERR));
        VGT_OK(vg_vgpu_wr(&t.gpu[d], VGPU_REG_IRQ_MASK,
                          VGPU_IRQ_FENCE | VGPU_IRQ_ERROR, VGT_ERR));
        scratch[d] = 0x5c000000u | d;
        VGT_OK(vg_vgpu_wr(&t.gpu[d], VGPU_REG_SCRATCH, scratch[d], VGT_ERR));
        mm_fill(&t, d);
        mt_fence(&t.gpu[d], 0x10 + d);
    }

    /* No two vGPUs' BARs overlap (qclient/pci-window.c). */
    for (unsigned d = 0; d < n; d++) {
        for (unsigned e = d + 1; e < n; e++) {
            g_assert_true(
                t.gpu[d].vram_addr + t.gpu[d].vram_size <= t.gpu[e].vram_addr ||
                t.gpu[e].vram_addr + t.gpu[e].vram_size <= t.gpu[d].vram_addr);
            g_assert_cmphex(t.gpu[d].regs_addr, !=, t.gpu[e].regs_addr);
        }
    }

    /* Migrate, held in pre-copy while every device computes. */
    mm_start_side(&t, &t.dst, "dst", true);
    VGT_OK(vg_mig_incoming(t.dst.qemu->qmp, &t.uri, VGT_ERR));
    mm_params(&t, true);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    for (unsigned d = 0; d < n; d++) {
        struct vg_stats st;

        VGT_OK(vg_stats_wait(t.src.stats[d], mm_stats_state, "PRE_COPY",
                             MT_STATS_TIMEOUT_MS, &st, VGT_ERR));
        vg_stats_clear(&st);
    }
    {
        int64_t want = (int64_t)n * MM_PRECOPY_MIB << 20;

        VGT_OK(vg_mig_poll(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, mm_vfio_sent,
                           &want, &info, VGT_ERR));
        mt_log_info("pre-copy", &info);
    }
    mm_workload(&t);
    VGT_OK(vg_mig_query(t.src.qemu->qmp, &info, VGT_ERR));
    g_assert_cmpstr(info.status, ==, "active"); /* still held */
    mm_params(&t, false);
    VGT_OK(vg_mig_wait_completed(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, NULL, NULL,
                                 &info, VGT_ERR));
    mt_log_info("migration", &info);
    g_assert_true(info.has_vfio);
    g_assert_cmpint(info.vfio_transferred, >, 0);

    /* Every device: checksums, stream, P2P states. */
    for (unsigned d = 0; d < n; d++) {
        mm_check_pair(&t, d, src_vram[d]);
        for (unsigned e = 0; e < d; e++) {
            g_assert_cmpstr(src_vram[e], !=, src_vram[d]);
        }
    }

    /* The destination's vGPUs: as they came, their VRAM as computed, and
     * working. */
    VGT_OK(vg_mig_wait_runstate(t.dst.qemu->qmp, "running", VGT_TIMEOUT_MS,
                                VGT_ERR));
    for (unsigned d = 0; d < n; d++) {
        g_autofree uint8_t *want = mm_expected_samples(d);
        g_autofree uint8_t *got = NULL;
        g_autofree char *what = g_strdup_printf("destination vgpu%u", d);
        struct vgpu_cmd c = vgpu_cmd_make(VGPU_OP_FILL, 62u << 20, 1u << 20,
                                          0x600d0000u | d, 0, 0, 0);
        uint32_t v = 0;

        VGT_OK(vg_vgpu_attach_nth(t.dst.qemu->qt, d, &t.dgpu[d], VGT_ERR));
        g_assert_cmphex(t.dgpu[d].regs_addr, ==, t.gpu[d].regs_addr);
        g_assert_cmphex(t.dgpu[d].vram_addr, ==, t.gpu[d].vram_addr);
        g_assert_cmphex(t.dgpu[d].ring_addr, ==, t.gpu[d].ring_addr);
        g_assert_cmphex(mt_rd(&t.dgpu[d], VGPU_REG_SCRATCH), ==, scratch[d]);
        g_assert_cmphex(mt_rd(&t.dgpu[d], VGPU_REG_FENCE_LO), ==, 0x100 + d);
        got = mt_vram_samples(&t.dgpu[d]);
        mt_assert_samples(got, want, what);
        mt_run(&t.dgpu[d], &c, 1);
        mt_fence(&t.dgpu[d], 0x200 + d);
        VGT_OK(vg_qtest_readl(t.dst.qemu->qt,
                              t.dgpu[d].vram_addr + (62u << 20) + 64, &v,
                              VGT_ERR));
        g_assert_cmphex(v, ==, 0x600d0000u | d);
        g_assert_true(vg_proc_alive(&t.src.srv[d]->proc));
        g_assert_true(vg_proc_alive(&t.dst.srv[d]->proc));
    }
    mm_check_trace(&t.src, n, n, "source");
    mm_check_trace(&t.dst, n, 0, "destination");

    mm_stop_side(&t.dst);
    mm_stop_side(&t.src);
    g_free(t.uri);
    if (g_getenv("VGMIG_KEEP_LOGS")) {
        g_test_message("logs kept in %s (VGMIG_KEEP_LOGS)", t.dir);
    } else {
        VGT_OK(vg_tmpdir_remove(t.dir, VGT_ERR));
    }
    g_free(t.dir);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/mig/multi/1-vgpu", GUINT_TO_POINTER(1), test_multi);
    g_test_add_data_func("/mig/multi/2-vgpus", GUINT_TO_POINTER(2), test_multi);
    g_test_add_data_func("/mig/multi/4-vgpus", GUINT_TO_POINTER(4), test_multi);
    return g_test_run();
}
