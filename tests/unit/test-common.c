/* Unit tests for common/: size parsing, errors with context, log levels,
 * medians. */
#include <errno.h>
#include <glib.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "common/log.h"
#include "common/median.h"
#include "common/size.h"

static void test_size_suffixes(void)
{
    static const struct {
        const char *text;
        uint64_t bytes;
    } cases[] = {
        {"0", 0},
        {"4096", 4096},
        {"64K", 64ull << 10},
        {"64KiB", 64ull << 10},
        {"256M", 256ull << 20},
        {"256mb", 256ull << 20},
        {"4G", 4ull << 30},
        {"2T", 2ull << 40},
        {"18446744073709551615", UINT64_MAX},
    };
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        uint64_t v = 1234;
        struct vg_error err = {0};
        g_assert_cmpint(vg_parse_size(cases[i].text, 0, UINT64_MAX, &v, &err),
                        ==, 0);
        g_assert_cmpuint(v, ==, cases[i].bytes);
    }
}

static void test_size_rejects(void)
{
    static const char *const bad[] = {"",    "K",   "-1",  "1.5G",
                                      "12Q", "1 G", "0x10"};
    for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) {
        uint64_t v = 77;
        struct vg_error err = {0};
        g_assert_cmpint(vg_parse_size(bad[i], 0, UINT64_MAX, &v, &err), ==,
                        -EINVAL);
        g_assert_cmpint(err.code, ==, EINVAL);
        g_assert_nonnull(strstr(err.msg, bad[i]));
        g_assert_cmpuint(v, ==, 77); /* output untouched on failure */
    }
}

static void test_size_range_and_overflow(void)
{
    uint64_t v = 0;
    struct vg_error err = {0};

    g_assert_cmpint(vg_parse_size("4K", 8192, 65536, &v, &err), ==, -ERANGE);
    g_assert_nonnull(strstr(err.msg, "out of range"));
    g_assert_cmpint(vg_parse_size("128K", 8192, 65536, &v, &err), ==, -ERANGE);
    g_assert_cmpint(
        vg_parse_size("18446744073709551616", 0, UINT64_MAX, &v, &err), ==,
        -ERANGE);
    g_assert_cmpint(vg_parse_size("17179869184G", 0, UINT64_MAX, &v, &err), ==,
                    -ERANGE);
    g_assert_cmpint(vg_parse_size("64K", 8192, 65536, &v, &err), ==, 0);
    g_assert_cmpuint(v, ==, 65536);
}

/* Command-line sizes: the value, or the program's and option's names and
 * why on stderr. */
static void test_size_opt(void)
{
    uint64_t v = 0;

    if (g_test_subprocess()) {
        exit(vg_parse_size_opt("prog", "vram", "3Q", 0, UINT64_MAX, &v) == -1
                 ? 0
                 : 1);
    }
    g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
    g_test_trap_assert_passed();
    g_test_trap_assert_stderr("prog: --vram: '3Q': unknown suffix*");
    g_assert_cmpint(vg_parse_size_opt("prog", "vram", "2M", 0, 4 << 20, &v), ==,
                    0);
    g_assert_cmpuint(v, ==, 2 << 20);
}

static void test_error_prefix(void)
{
    struct vg_error err = {0};

    g_assert_cmpint(
        vg_error_set(&err, EFAULT, "outside the region (size %d)", 16), ==,
        -EFAULT);
    vg_error_prefix(&err, "region %d", 2);
    g_assert_cmpstr(err.msg, ==, "region 2: outside the region (size 16)");
    g_assert_cmpint(err.code, ==, EFAULT);
    vg_error_clear(&err);
    g_assert_cmpint(err.code, ==, 0);
    g_assert_cmpstr(err.msg, ==, "");
    /* A NULL error is allowed everywhere and only the return value counts. */
    g_assert_cmpint(vg_error_set(NULL, EINVAL, "x"), ==, -EINVAL);
    vg_error_prefix(NULL, "y");
}

static void test_log_levels(void)
{
    enum vg_log_level level = VG_LOG_ERROR;

    g_assert_true(vg_log_parse_level("debug", &level));
    g_assert_cmpint(level, ==, VG_LOG_DEBUG);
    g_assert_false(vg_log_parse_level("loud", &level));
    g_assert_cmpint(level, ==, VG_LOG_DEBUG);
    vg_log_set_level(VG_LOG_WARN);
    g_assert_true(vg_log_enabled(VG_LOG_ERROR));
    g_assert_false(vg_log_enabled(VG_LOG_INFO));
}

/* Odd and even counts, unsorted input, none. */
static void test_median(void)
{
    double odd[] = {5, 1, 3}, even[] = {4, 1, 3, 2}, one[] = {7};

    g_assert_cmpfloat(vg_median(odd, 3), ==, 3);
    g_assert_cmpfloat(vg_median(even, 4), ==, 2.5);
    g_assert_cmpfloat(vg_median(one, 1), ==, 7);
    g_assert_cmpfloat(vg_median(NULL, 0), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/common/size/suffixes", test_size_suffixes);
    g_test_add_func("/common/size/rejects", test_size_rejects);
    g_test_add_func("/common/size/range-overflow",
                    test_size_range_and_overflow);
    g_test_add_func("/common/size/option", test_size_opt);
    g_test_add_func("/common/error/prefix", test_error_prefix);
    g_test_add_func("/common/log/levels", test_log_levels);
    g_test_add_func("/common/median", test_median);
    return g_test_run();
}
