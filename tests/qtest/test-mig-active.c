/*
 * test-mig-active -- live migration of a vGPU that keeps computing.
 *
 * While the migration runs, batches of commands go to the source's ring
 * (a 32 MiB FILL that the device runs in slices, a COPY of its first MiB,
 * a SCATTER_ADD into a table, a FENCE).  The migration is held in its
 * iterative phase (mt_hold(): QEMU's switchover threshold at 0) while the
 * batches go in, so that no MMIO reaches a stopped device (qtest is not
 * stopped with the VM), then the last burst is submitted and the limits
 * are lifted: commands are still in flight at switchover.  Afterwards the two
 * servers' VRAM checksums at switchover must be equal, the destination finishes
 * the ring (FENCE reaches the last value), its VRAM equals what the batches
 * compute (nothing lost, nothing run twice: SCATTER_ADD is not idempotent), and
 * it keeps running more batches.
 */
#include "mig-test.h"

#define A_OFF       0u
#define A_LEN       (32u << 20)
#define B_OFF       (32u << 20)
#define B_LEN       (1u << 20)
#define TABLE_OFF   (40u << 20)
#define ROWS        1024u
#define ROW_BYTES   256u
#define IDX_OFF     (44u << 20)
#define IDX_COUNT   512u
#define HOLD_MS     2500
#define BURST       6u
#define MAX_BATCHES 200u

struct workload {
    struct mt *t;
    uint32_t row_hits[ROWS]; /* how often each row is in the index array */
    unsigned batches;        /* submitted */
    int64_t hold_until;      /* submit batches until then */
    bool released;           /* the limits are lifted */
    int64_t next_log_ms;     /* progress messages after the release */
};

static uint32_t pattern(unsigned batch)
{
    return 0x3c000000u | batch;
}

static uint32_t float_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, 4);
    return u;
}

/* Index array (random rows) into VRAM by DMA, table zeroed. */
static void setup_workload(struct workload *w)
{
    g_autofree uint32_t *idx = g_malloc(IDX_COUNT * 4);
    GRand *r = g_rand_new_with_seed(0x61637476);
    struct vgpu_cmd c[2];
    uint64_t buf = 0;

    for (unsigned i = 0; i < IDX_COUNT; i++) {
        idx[i] = g_rand_int_range(r, 0, ROWS);
        w->row_hits[idx[i]]++;
    }
    g_rand_free(r);
    VGT_OK(vg_galloc_alloc(&w->t->ram, IDX_COUNT * 4, 4096, &buf, VGT_ERR));
    VGT_OK(vg_qtest_memwrite(w->t->src.qemu->qt, buf, idx, IDX_COUNT * 4,
                             VGT_ERR));
    c[0] = vgpu_cmd_make(VGPU_OP_DMA_TO_VRAM, IDX_OFF, buf, IDX_COUNT * 4, 0, 0,
                         0);
    c[1] = vgpu_cmd_make(VGPU_OP_FILL, TABLE_OFF, ROWS * ROW_BYTES, 0, 0, 0, 0);
    mt_run(&w->t->gpu, c, 2);
}

/* Submit batch number w->batches + 1 on @gpu without waiting. */
static void submit_batch(struct workload *w, struct vg_vgpu *gpu)
{
    unsigned k = ++w->batches;
    struct vgpu_cmd c[4] = {
        vgpu_cmd_make(VGPU_OP_FILL, A_OFF, A_LEN, pattern(k), 0, 0, 0),
        vgpu_cmd_make(VGPU_OP_COPY, B_OFF, A_OFF, B_LEN, 0, 0, 0),
        vgpu_cmd_make(VGPU_OP_SCATTER_ADD, TABLE_OFF, ROWS, ROW_BYTES, IDX_OFF,
                      IDX_COUNT, float_bits(1.0f)),
        vgpu_cmd_make(VGPU_OP_FENCE, k, 0, 0, 0, 0, 0),
    };

    VGT_OK(vg_vgpu_submit(gpu, c, 4, VGT_ERR));
}

/* Lift the limits that hold the migration in pre-copy. */
static int release(struct workload *w, struct vg_error *err)
{
    w->released = true;
    return mt_release(w->t, err);
}

/* Poll callback: a batch whenever the ring has drained, while the VM runs
 * and the hold lasts; then a burst and the release. */
static int drive(const struct vg_mig_info *info, void *opaque,
                 struct vg_error *err)
{
    struct workload *w = opaque;
    char state[VG_MIG_STATUS_MAX];
    uint32_t status = 0;
    int rc;

    if (w->released && vg_now_ms() >= w->next_log_ms) {
        w->next_log_ms = vg_now_ms() + 2000;
        g_test_message("after release: %s, RAM %" G_GINT64_FORMAT
                       " sent, %" G_GINT64_FORMAT
                       " remaining, vfio %" G_GINT64_FORMAT
                       ", expected downtime %" G_GINT64_FORMAT
                       " ms, %" G_GINT64_FORMAT " syncs",
                       info->status, info->ram_transferred, info->ram_remaining,
                       info->vfio_transferred, info->expected_downtime_ms,
                       info->ram_dirty_sync_count);
    }
    if (w->released || strcmp(info->status, "active") != 0) {
        return 0;
    }
    rc = vg_mig_runstate(w->t->src.qemu->qmp, state, sizeof(state), err);
    if (rc < 0 || strcmp(state, "running") != 0) {
        return rc;
    }
    if (vg_now_ms() >= w->hold_until || w->batches + BURST >= MAX_BATCHES) {
        for (unsigned i = 0; i < BURST; i++) {
            submit_batch(w, &w->t->gpu);
        }
        rc = vg_vgpu_rd(&w->t->gpu, VGPU_REG_STATUS, &status, err);
        g_test_message("burst submitted: %u batches in all, device %s; RAM "
                       "%" G_GINT64_FORMAT " vfio %" G_GINT64_FORMAT
                       " bytes so far",
                       w->batches, status & VGPU_STATUS_BUSY ? "busy" : "idle",
                       info->ram_transferred, info->vfio_transferred);
        return rc < 0 ? rc : release(w, err);
    }
    rc = vg_vgpu_rd(&w->t->gpu, VGPU_REG_STATUS, &status, err);
    if (rc == 0 && !(status & VGPU_STATUS_BUSY)) {
        submit_batch(w, &w->t->gpu);
    }
    return rc;
}

/* VRAM of @gpu must hold what @w->batches batches compute. */
static void check_vram(struct workload *w, struct vg_vgpu *gpu,
                       const char *where)
{
    g_autofree float *table = g_malloc(ROWS * ROW_BYTES);
    uint32_t want = pattern(w->batches), v = 0;
    const uint64_t at[] = {A_OFF, A_OFF + A_LEN / 2 + 4092, A_OFF + A_LEN - 4,
                           B_OFF, B_OFF + B_LEN - 4};

    for (unsigned i = 0; i < G_N_ELEMENTS(at); i++) {
        VGT_OK(vg_qtest_readl(gpu->qt, gpu->vram_addr + at[i], &v, VGT_ERR));
        if (v != want) {
            MT_FAIL("%s: VRAM 0x%" G_GINT64_MODIFIER "x is 0x%08x, batch %u "
                    "wrote 0x%08x",
                    where, at[i], v, w->batches, want);
        }
    }
    VGT_OK(vg_qtest_memread(gpu->qt, gpu->vram_addr + TABLE_OFF, table,
                            ROWS * ROW_BYTES, VGT_ERR));
    for (unsigned r = 0; r < ROWS; r++) {
        float expect = (float)(w->row_hits[r] * w->batches);

        for (unsigned j = 0; j < ROW_BYTES / 4; j++) {
            if (table[r * (ROW_BYTES / 4) + j] != expect) {
                MT_FAIL("%s: table row %u col %u is %g, expected %g (%u "
                        "batches, %u hits per batch)",
                        where, r, j, table[r * (ROW_BYTES / 4) + j], expect,
                        w->batches, w->row_hits[r]);
            }
        }
    }
}

/* The destination completes the ring: FENCE reaches the last batch. */
static void finish_on_dst(struct workload *w)
{
    struct vg_vgpu *gpu = &w->t->dgpu;
    uint32_t status = 0;

    VGT_OK(vg_vgpu_wait_idle(gpu, VGT_TIMEOUT_MS, &status, VGT_ERR));
    g_assert_cmphex(status & VGPU_STATUS_HALTED, ==, 0);
    g_assert_cmpuint(mt_rd(gpu, VGPU_REG_FENCE_LO), ==, w->batches);
    g_assert_cmpuint(mt_rd(gpu, VGPU_REG_RING_HEAD), ==,
                     mt_rd(gpu, VGPU_REG_RING_TAIL));
    check_vram(w, gpu, "destination after switchover");
}

static void test_active(void)
{
    struct workload w = {0};
    struct vg_stats sst, dst;
    struct vg_mig_info info;
    struct mt t;

    mt_start_src(&t, "mig-active", NULL);
    w.t = &t;
    setup_workload(&w);
    submit_batch(&w, &t.gpu);
    mt_start_dst(&t, VGT_VRAM_ARG, NULL);
    mt_hold(&t, 16 << 20);
    w.hold_until = vg_now_ms() + HOLD_MS;
    mt_migrate(&t, drive, &w, &info);
    g_assert_true(w.released);
    g_assert_cmpuint(w.batches, >=, 2 + BURST);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    g_test_message("%u batches before switchover; VRAM sent %" G_GINT64_FORMAT
                   " bytes for %" G_GUINT64_FORMAT " bytes of VRAM",
                   w.batches, sst.bytes_sent, VGT_VRAM_SIZE);
    finish_on_dst(&w);
    /* The workload goes on at the destination, with its interrupts. */
    VGT_OK(vg_vgpu_wr(&t.dgpu, VGPU_REG_IRQ_STATUS, VGPU_IRQ_FENCE, VGT_ERR));
    VGT_OK(vg_vgpu_msi_clear(&t.dgpu, VGPU_MSIX_VEC_FENCE, VGT_ERR));
    for (unsigned i = 0; i < 3; i++) {
        submit_batch(&w, &t.dgpu);
    }
    VGT_OK(vg_vgpu_wait_reg(&t.dgpu, VGPU_REG_FENCE_LO, w.batches,
                            VGT_TIMEOUT_MS, VGT_ERR));
    VGT_OK(vg_vgpu_msi_wait(&t.dgpu, VGPU_MSIX_VEC_FENCE, VGT_TIMEOUT_MS,
                            VGT_ERR));
    check_vram(&w, &t.dgpu, "destination, later batches");
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/active/workload", test_active);
    return g_test_run();
}
