/*
 * Unit tests of the pre-copy planner (mig-rounds): mode names, when a
 * drained round may start the next one, and GPU auto-converge (the
 * throttle rises after MIG_CONVERGE_ROUNDS rounds of dirtying at least
 * MIG_CONVERGE_PERCENT % of what was drained, is capped, and paces the
 * command processor, counting the time it takes away).
 */
#include <glib.h>

#include "vfio-migration/mig-rounds.h"

static void test_names(void)
{
    enum mig_precopy_mode pm;
    enum mig_track_mode tm;
    enum mig_gpu_hash gh;

    g_assert_cmpint(mig_precopy_mode_parse("one-shot", &pm), ==, 0);
    g_assert_cmpint(pm, ==, MIG_PRECOPY_ONE_SHOT);
    g_assert_cmpstr(mig_precopy_mode_name(pm), ==, "one-shot");
    g_assert_cmpint(mig_track_mode_parse("hash", &tm), ==, 0);
    g_assert_cmpstr(mig_track_mode_name(tm), ==, "hash");
    g_assert_cmpint(mig_precopy_mode_parse("often", &pm), ==, -1);
    g_assert_cmpint(mig_track_mode_parse("", &tm), ==, -1);
    g_assert_null(mig_track_mode_name((enum mig_track_mode)7));
    g_assert_cmpint(mig_gpu_hash_parse("both", &gh), ==, 0);
    g_assert_cmpint(gh, ==, MIG_GPU_HASH_BOTH);
    g_assert_cmpstr(mig_gpu_hash_name(MIG_GPU_HASH_SOURCE), ==, "source");
    g_assert_cmpstr(mig_gpu_hash_name((enum mig_gpu_hash)0), ==, "auto");
    g_assert_cmpint(mig_gpu_hash_parse("none", &gh), ==, 0);
    g_assert_cmpint(gh, ==, MIG_GPU_HASH_NONE);
    g_assert_cmpint(mig_gpu_hash_parse("gpu", &gh), ==, -1);
    g_assert_cmpint(gh, ==, MIG_GPU_HASH_NONE); /* untouched */
}

static void test_epoch_rate(void)
{
    struct mig_rounds r;

    mig_rounds_init(&r, MIG_PRECOPY_ITERATIVE, true, 1000);
    g_assert_false(mig_rounds_want_epoch(&r, 1000 + MIG_EPOCH_MIN_MS / 2));
    g_assert_true(mig_rounds_want_epoch(&r, 1000 + MIG_EPOCH_MIN_MS));
    mig_rounds_epoch(&r, 0, 100, 1030);
    g_assert_false(mig_rounds_want_epoch(&r, 1031));
    mig_rounds_init(&r, MIG_PRECOPY_ONE_SHOT, true, 0);
    g_assert_false(mig_rounds_want_epoch(&r, 1e9));
    mig_rounds_init(&r, MIG_PRECOPY_NONE, true, 0);
    g_assert_false(mig_rounds_want_epoch(&r, 1e9));
}

static void test_converge(void)
{
    struct mig_rounds r;
    double t = 0;

    mig_rounds_init(&r, MIG_PRECOPY_ITERATIVE, true, 0);
    for (unsigned i = 0; i < MIG_CONVERGE_ROUNDS - 1; i++) {
        mig_rounds_epoch(&r, 200, 100, t += 50);
    }
    g_assert_cmpuint(mig_rounds_throttle_percent(&r), ==, 0);
    /* rounds shrinking below the threshold: start over */
    mig_rounds_epoch(&r, MIG_CONVERGE_PERCENT - 1, 100, t += 50);
    for (unsigned i = 0; i < MIG_CONVERGE_ROUNDS - 1; i++) {
        mig_rounds_epoch(&r, 200, 100, t += 50);
    }
    g_assert_cmpuint(mig_rounds_throttle_percent(&r), ==, 0);
    /* a working set rewritten every round: as much dirtied as drained */
    mig_rounds_epoch(&r, MIG_CONVERGE_PERCENT, 100, t += 50);
    g_assert_cmpuint(mig_rounds_throttle_percent(&r), ==, 10);
    for (unsigned i = 0; i < 100; i++) {
        mig_rounds_epoch(&r, 200, 100, t += 50);
    }
    g_assert_cmpuint(mig_rounds_throttle_percent(&r), ==,
                     MIG_THROTTLE_MAX * 10);
    g_assert_cmpuint(r.max_level, ==, MIG_THROTTLE_MAX);
    g_assert_cmpuint(r.throttle_rounds, >, 90);
}

static void test_no_tracking_no_throttle(void)
{
    struct mig_rounds r;

    mig_rounds_init(&r, MIG_PRECOPY_ITERATIVE, false, 0);
    for (unsigned i = 0; i < 20; i++) {
        mig_rounds_epoch(&r, 200, 100, i * 50.0);
    }
    g_assert_cmpuint(mig_rounds_throttle_percent(&r), ==, 0);
}

static void test_pacing(void)
{
    struct mig_rounds r;

    mig_rounds_init(&r, MIG_PRECOPY_ITERATIVE, true, 0);
    mig_rounds_stepped(&r, 0, 1);
    g_assert_cmpfloat(mig_rounds_step_wait_ms(&r, 1), ==, 0);
    r.level = 5; /* 50%: as long idle as it ran */
    mig_rounds_stepped(&r, 10, 12);
    g_assert_cmpfloat(mig_rounds_step_wait_ms(&r, 12), ==, 2);
    g_assert_cmpfloat(mig_rounds_step_wait_ms(&r, 14), ==, 0);
    r.level = 9; /* 90%: nine times as long idle */
    mig_rounds_stepped(&r, 20, 21);
    g_assert_cmpfloat(mig_rounds_step_wait_ms(&r, 21), >, 8.99);
    g_assert_cmpfloat(mig_rounds_step_wait_ms(&r, 21), <, 9.01);
    /* held: 2 ms at 50 %, 9 ms at 90 %, nothing unthrottled */
    g_assert_cmpfloat(r.held_ms, >, 10.99);
    g_assert_cmpfloat(r.held_ms, <, 11.01);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-rounds/names", test_names);
    g_test_add_func("/mig-rounds/epoch-rate", test_epoch_rate);
    g_test_add_func("/mig-rounds/converge", test_converge);
    g_test_add_func("/mig-rounds/no-tracking", test_no_tracking_no_throttle);
    g_test_add_func("/mig-rounds/pacing", test_pacing);
    return g_test_run();
}
