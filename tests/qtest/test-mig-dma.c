/*
 * test-mig-dma -- guest RAM that the vGPU writes by DMA during migration.
 *
 * The device writes guest RAM behind QEMU's back (through the shared
 * memory of the vfio-user DMA mappings); only DMA logging tells QEMU that
 * such a page must be sent again.  The migration is held in its iterative
 * phase (mt_hold()) until RAM's first pass has
 * sent every page, including the target pages (written with an old
 * pattern beforehand); then DMA_FROM_VRAM overwrites them from VRAM, the
 * limits are lifted, and the destination must see the new contents.
 *
 * The same scenario with the source server's DMA logging broken on
 * purpose (--fault no-dma-log: logging starts and reports, but marks
 * nothing) must leave the destination with the old pattern that the
 * first pass sent: the first case can tell missing DMA logging apart.
 *
 * A device may finish the DMA it had in flight on its way out of a
 * running state (--fault late-dma:GPA writes a page then), after the last
 * pre-copy sync: only the RAM sync of the downtime can find that page,
 * from the DMA logging reports QEMU asked for with STOP_COPY (patch 0062,
 * checked in the source QEMU's trace).
 */
#include "mig-test.h"

#include "qclient/vfio-trace.h"

#define NPAGES   4u
#define SRC_VRAM (10u << 20)
#define NEW_PAT  0x0d1a0d1au
#define OLD_BYTE 0x5c
#define OLD_PAT  0x5c5c5c5cu
/* Below the tests' allocations (VGT_RAM_START); the server's late-dma
 * pattern (vfio-user/vfu-data.c). */
#define LATE_GPA "0x800000"
#define LATE_PAT 0x1a7ed3a0u

/* Stop waiting once RAM's first pass is through: nothing remains to send
 * of RAM while the migration is active. */
static int first_pass_done(const struct vg_mig_info *info, void *opaque,
                           struct vg_error *err)
{
    if (strcmp(info->status, "active") != 0) {
        return 0;
    }
    return info->ram_transferred > 0 && info->ram_remaining == 0 &&
           info->ram_dirty_sync_count >= 1;
}

/* Hold the migration in pre-copy until RAM's first pass is done; the
 * source VM still runs and its server has DMA logging on. */
static void wait_first_pass(struct mt *t)
{
    char state[VG_MIG_STATUS_MAX];
    struct vg_mig_info info;

    mt_hold(t, 8 << 20);
    VGT_OK(vg_mig_start(t->src.qemu->qmp, t->uri, VGT_ERR));
    VGT_OK(vg_mig_poll(t->src.qemu->qmp, MT_MIG_TIMEOUT_MS, first_pass_done,
                       NULL, &info, VGT_ERR));
    mt_log_info("first RAM pass done", &info);
    g_assert_cmpstr(info.status, ==, "active");
    VGT_OK(vg_mig_runstate(t->src.qemu->qmp, state, sizeof(state), VGT_ERR));
    g_assert_cmpstr(state, ==, "running");
    mt_wait_dma_logging(&t->src, true);
}

/* The @len bytes at @addr of @qt's guest RAM, which must be all @pat. */
static void assert_ram(struct vg_qtest *qt, uint64_t addr, uint32_t len,
                       uint32_t pat, const char *what)
{
    g_autofree uint8_t *buf = g_malloc0(len);

    VGT_OK(vg_qtest_memread(qt, addr, buf, len, VGT_ERR));
    for (uint32_t i = 0; i < len; i += 4) {
        if (*(uint32_t *)(buf + i) != pat) {
            MT_FAIL("%s guest RAM 0x%" G_GINT64_MODIFIER "x holds 0x%08x, "
                    "expected 0x%08x",
                    what, addr + i, *(uint32_t *)(buf + i), pat);
        }
    }
}

/*
 * Source (server arguments @srv_extra) with NPAGES target pages of
 * OLD_BYTE; once RAM's first pass has sent them, the device overwrites
 * them with NEW_PAT by DMA; the migration then completes and the
 * destination is attached.  The target's address in *@target.
 */
static void dma_after_first_pass(struct mt *t, const char *tag,
                                 const char *const *srv_extra, uint64_t *target)
{
    struct vg_mig_info info;
    struct vgpu_cmd c;

    mt_start_src(t, tag, srv_extra);
    VGT_OK(vg_galloc_alloc(&t->ram, NPAGES * 4096, 4096, target, VGT_ERR));
    VGT_OK(vg_qtest_memset(t->src.qemu->qt, *target, OLD_BYTE, NPAGES * 4096,
                           VGT_ERR));
    c = vgpu_cmd_make(VGPU_OP_FILL, SRC_VRAM, NPAGES * 4096, NEW_PAT, 0, 0, 0);
    mt_run(&t->gpu, &c, 1);
    mt_start_dst(t, VGT_VRAM_ARG, NULL);
    wait_first_pass(t);

    /* The device overwrites pages that RAM pre-copy has already sent. */
    c = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, *target, SRC_VRAM, NPAGES * 4096,
                      0, 0, 0);
    mt_run(&t->gpu, &c, 1);
    assert_ram(t->src.qemu->qt, *target, NPAGES * 4096, NEW_PAT, "source");
    VGT_OK(mt_release(t, VGT_ERR));
    mt_migrate_wait(t, NULL, NULL, &info);
    mt_attach_dst(t);
}

static void test_dma_during_precopy(void)
{
    uint64_t target = 0;
    struct mt t;

    dma_after_first_pass(&t, "mig-dma", NULL, &target);
    assert_ram(t.dst.qemu->qt, target, NPAGES * 4096, NEW_PAT,
               "destination (the page written by DMA after RAM pre-copy "
               "had sent it was not re-sent: DMA logging missed it)");
    mt_stop(&t);
}

static void test_dma_log_missing(void)
{
    static const char *const fault[] = {"--fault", "no-dma-log", NULL};
    uint64_t target = 0;
    struct mt t;

    dma_after_first_pass(&t, "mig-dma-nolog", fault, &target);
    /* Nothing reported the DMA write, so only the first pass's copy came
     * (if the new data came, something else re-sent the page and the
     * first case proves nothing about DMA logging). */
    assert_ram(t.dst.qemu->qt, target, NPAGES * 4096, OLD_PAT,
               "destination (DMA write not logged, --fault no-dma-log)");
    mt_stop(&t);
}

/* The source QEMU's trace: the downtime's sync took the reports asked
 * for ahead and asked no server. */
static void assert_reports_ahead(const struct mt *t)
{
    struct vg_vfio_trace tr;

    mt_trace_read(t->src.qemu, "source", &tr);
    g_assert_cmpuint(tr.dma_reports_ahead, >=, 1);
    g_assert_cmpuint(tr.dma_reports_taken, >=, 1);
    g_assert_cmpuint(tr.dma_reports_asked_in_downtime, ==, 0);
}

static void test_dma_late(void)
{
    static const char *const fault[] = {"--fault", "late-dma:" LATE_GPA, NULL};
    const char *trace[MT_TRACE_ARGC];
    uint64_t gpa = g_ascii_strtoull(LATE_GPA, NULL, 16);
    struct vg_mig_info info;
    struct mt t;

    mt_trace_args(trace);
    mt_start_src_with(&t, "mig-dma-late", VGT_VRAM_ARG, fault, trace);
    VGT_OK(vg_qtest_memset(t.src.qemu->qt, gpa, OLD_BYTE, 4096, VGT_ERR));
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    mt_migrate(&t, NULL, NULL, &info);
    mt_attach_dst(&t);
    assert_ram(t.src.qemu->qt, gpa, 4096, LATE_PAT,
               "source (the late-dma fault wrote nothing)");
    assert_ram(t.dst.qemu->qt, gpa, 4096, LATE_PAT,
               "destination (the page the device wrote on its way out of "
               "pre-copy was not sent: the downtime's RAM sync missed it)");
    assert_reports_ahead(&t);
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/dma/write-after-precopy", test_dma_during_precopy);
    g_test_add_func("/mig/dma/no-dma-log-fault-detected", test_dma_log_missing);
    g_test_add_func("/mig/dma/late-dma-at-stop", test_dma_late);
    return g_test_run();
}
