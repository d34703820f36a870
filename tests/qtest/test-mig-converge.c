/*
 * test-mig-converge -- GPU auto-converge, end to end.
 *
 * The migration is held in pre-copy with a small bandwidth while the test
 * keeps FILLing a quarter of VRAM: every round the vGPU dirties more than
 * the stream drains, so after MIG_CONVERGE_ROUNDS rounds the server
 * throttles the command processor.  The test waits until the stats file
 * says so (it is rewritten when the throttle rises), checks that the
 * throttle took time from the device, then lifts the limits: the
 * migration completes, both VRAM checksums are equal, the destination
 * runs unthrottled (the throttle ends with the session).
 */
#include "mig-test.h"

#include "vfio-migration/mig-rounds.h"

#define WORK_OFF   (16u << 20)
#define WORK_LEN   (16u << 20)
#define HOLD_BW    (24ll << 20)
#define MAX_FILLS  4000u
#define WAIT_LIMIT 90000 /* ms */

/* FILL the work area with @pattern and wait for it. */
static void dirty_work_area(struct mt *t, uint32_t pattern)
{
    struct vgpu_cmd c =
        vgpu_cmd_make(VGPU_OP_FILL, WORK_OFF, WORK_LEN, pattern, 0, 0, 0);

    mt_run(&t->gpu, &c, 1);
}

static void test_converge(void)
{
    const char *extra[] = {"--precopy=iterative", "--dirty-track=hybrid", NULL};
    int64_t deadline = g_get_monotonic_time() / 1000 + WAIT_LIMIT;
    struct vg_stats st = {0}, sst, dst;
    unsigned fills = 0;
    int64_t level = 0;

    struct mt t;

    mt_start_src(&t, "mig-converge", extra);
    mt_fill_vram(&t);
    mt_start_dst(&t, VGT_VRAM_ARG, extra);
    mt_hold(&t, HOLD_BW);
    VGT_OK(vg_mig_start(t.src.qemu->qmp, t.uri, VGT_ERR));
    VGT_OK(vg_stats_wait_state(t.src.stats, "PRE_COPY", MT_STATS_TIMEOUT_MS,
                               &st, VGT_ERR));
    vg_stats_clear(&st);
    while (level < 10 && fills < MAX_FILLS &&
           g_get_monotonic_time() / 1000 < deadline) {
        dirty_work_area(&t, MT_PATTERN(1000 + fills));
        fills++;
        if (fills % 8 == 0) {
            VGT_OK(vg_stats_read(t.src.stats, &st, VGT_ERR));
            level = mt_stat_int(&st, "throttle_percent");
            vg_stats_clear(&st);
        }
    }
    g_test_message(
        "%u FILLs of %u MiB until the throttle reached %" G_GINT64_FORMAT "%%",
        fills, WORK_LEN >> 20, level);
    g_assert_cmpint(level, >=, 10);
    /* Some more work under the throttle, then let the migration finish. */
    for (unsigned i = 0; i < 16; i++) {
        dirty_work_area(&t, MT_PATTERN(5000 + i));
    }
    VGT_OK(mt_release(&t, VGT_ERR));
    mt_migrate_wait(&t, NULL, NULL, NULL);
    mt_attach_dst(&t);
    mt_assert_stats_equal(&t, &sst, &dst);
    g_test_message(
        "source: throttle %" G_GINT64_FORMAT "%%, %" G_GINT64_FORMAT
        " rounds throttled, %.1f ms taken from the vGPU, %" G_GINT64_FORMAT
        " rounds",
        mt_stat_int(&sst, "throttle_percent"),
        mt_stat_int(&sst, "throttle_rounds"),
        mt_stat_double(&sst, "throttle_held_ms"), mt_stat_int(&sst, "rounds"));
    g_assert_cmpint(mt_stat_int(&sst, "throttle_percent"), >=, 10);
    g_assert_cmpfloat(mt_stat_double(&sst, "throttle_held_ms"), >, 0.0);
    g_assert_cmpint(mt_stat_int(&sst, "rounds"), >=, MIG_CONVERGE_ROUNDS + 1);
    /* The destination's session was a load: no throttle there. */
    g_assert_cmpint(mt_stat_int(&dst, "throttle_percent"), ==, 0);
    vg_stats_clear(&sst);
    vg_stats_clear(&dst);
    mt_stop(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig/converge/throttle", test_converge);
    return g_test_run();
}
