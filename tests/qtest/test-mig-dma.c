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
 */
#include "mig-test.h"

#define NPAGES   4u
#define SRC_VRAM (10u << 20)
#define NEW_PAT  0x0d1a0d1au
#define OLD_BYTE 0x5c

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

static void test_dma_during_precopy(void)
{
    g_autofree uint8_t *page = g_malloc(NPAGES * 4096);
    struct vg_mig_info info;
    struct vgpu_cmd c[2];
    char state[VG_MIG_STATUS_MAX];
    uint64_t target = 0;
    struct mt t;

    mt_start_src(&t, "mig-dma", NULL);
    VGT_OK(vg_galloc_alloc(&t.ram, NPAGES * 4096, 4096, &target, VGT_ERR));
    VGT_OK(vg_qtest_memset(t.src.qemu->qt, target, OLD_BYTE, NPAGES * 4096,
                           VGT_ERR));
    c[0] =
        vgpu_cmd_make(VGPU_OP_FILL, SRC_VRAM, NPAGES * 4096, NEW_PAT, 0, 0, 0);
    mt_run(&t.gpu, c, 1);
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    mt_hold(&t, 8 << 20);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    VGT_OK(vg_mig_poll(t.src.qemu->qmp, MT_MIG_TIMEOUT_MS, first_pass_done,
                       NULL, &info, VGT_ERR));
    mt_log_info("first RAM pass done", &info);
    g_assert_cmpstr(info.status, ==, "active");
    VGT_OK(vg_mig_runstate(t.src.qemu->qmp, state, sizeof(state), VGT_ERR));
    g_assert_cmpstr(state, ==, "running");

    /* The device overwrites pages that RAM pre-copy has already sent. */
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_FROM_VRAM, target, SRC_VRAM, NPAGES * 4096,
                         0, 0, 0);
    mt_run(&t.gpu, c, 1);
    VGT_OK(
        vg_qtest_memread(t.src.qemu->qt, target, page, NPAGES * 4096, VGT_ERR));
    for (unsigned i = 0; i < NPAGES * 4096; i += 4) {
        g_assert_cmphex(*(uint32_t *)(page + i), ==, NEW_PAT);
    }
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, &info);
    mt_attach_dst(&t);

    memset(page, 0, NPAGES * 4096);
    VGT_OK(
        vg_qtest_memread(t.dst.qemu->qt, target, page, NPAGES * 4096, VGT_ERR));
    for (unsigned i = 0; i < NPAGES * 4096; i += 4) {
        if (*(uint32_t *)(page + i) != NEW_PAT) {
            MT_FAIL("destination guest RAM 0x%" G_GINT64_MODIFIER
                    "x holds 0x%08x, the device wrote 0x%08x by DMA after "
                    "RAM pre-copy had sent the page (not re-sent: DMA "
                    "logging missed it)",
                    target + i, *(uint32_t *)(page + i), NEW_PAT);
        }
    }
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/dma/write-after-precopy", test_dma_during_precopy);
    return g_test_run();
}
