/* Unit tests for qclient/pause.c: splitting a switchover pause, and
 * percentiles. */
#include <errno.h>
#include <glib.h>
#include <string.h>

#include "qclient/pause.h"

/* Source pulses every 5 ms up to t=100 ms, a stop at 130 ms, a resume at
 * 180 ms, the destination's first pulse at 195 ms. */
static void test_split(void)
{
    struct vg_pulse src[] = {{10, 5000, 90000}, {11, 5000, 100000}};
    struct vg_pulse dst[] = {{12, 42000, 195000}, {13, 5000, 200000}};
    struct vg_error err = {0};
    struct vg_pause p;

    g_assert_cmpint(vg_pause_measure(src, 2, dst, 2, 130000, 180000, &p, &err),
                    ==, 0);
    g_assert_cmpint(p.felt_us, ==, 95000);
    g_assert_cmpint(p.before_stop_us, ==, 30000);
    g_assert_cmpint(p.stopped_us, ==, 50000);
    g_assert_cmpint(p.after_resume_us, ==, 15000);
    g_assert_cmpint(p.guest_gap_us, ==, 42000);
    g_assert_cmpint(p.lost, ==, 0);
}

static void test_refused(void)
{
    struct vg_pulse src[] = {{20, 5000, 100000}};
    struct vg_pulse dst[] = {{20, 5000, 200000}};
    struct vg_pulse later[] = {{23, 5000, 200000}};
    struct vg_error err = {0};
    struct vg_pause p = {0};

    g_assert_cmpint(vg_pause_measure(src, 0, dst, 1, 1, 2, &p, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "source"));
    g_assert_cmpint(vg_pause_measure(src, 1, dst, 0, 1, 2, &p, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "destination"));
    g_assert_cmpint(vg_pause_measure(src, 1, dst, 1, 1, 2, &p, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "does not follow"));
    g_assert_cmpint(vg_pause_measure(src, 1, later, 1, 5, 4, &p, &err), ==,
                    -EINVAL);
    g_assert_nonnull(strstr(err.msg, "before STOP"));
    g_assert_cmpint(vg_pause_measure(src, 1, later, 1, 4, 5, &p, &err), ==, 0);
    g_assert_cmpint(p.lost, ==, 2);
}

static void test_percentile(void)
{
    int64_t v[20], one = 7;

    for (int i = 0; i < 20; i++) {
        v[i] = 20 - i; /* 20 .. 1, unsorted */
    }
    g_assert_cmpint(vg_percentile(v, 20, 50), ==, 10);
    g_assert_cmpint(vg_percentile(v, 20, 95), ==, 19);
    g_assert_cmpint(vg_percentile(v, 20, 100), ==, 20);
    g_assert_cmpint(vg_percentile(v, 20, 0), ==, 1);
    g_assert_cmpint(vg_percentile(&one, 1, 95), ==, 7);
    g_assert_cmpint(vg_percentile(v, 0, 95), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/pause/split", test_split);
    g_test_add_func("/pause/refused", test_refused);
    g_test_add_func("/pause/percentile", test_percentile);
    return g_test_run();
}
