/*
 * Unit tests of common/nt-copy.c: every vector unit this CPU has copies
 * exactly what memcpy() would, for every alignment of source and
 * destination and lengths around the 64-byte lines, and writes nothing
 * outside [dst, dst + len); the widest unit is the default.
 */
#include <errno.h>
#include <glib.h>
#include <stdint.h>
#include <string.h>

#include "common/nt-copy.h"

#define SPAN  4096u
#define GUARD 128u

static void check_unit(const char *unit)
{
    static uint8_t src[SPAN + 64], dst[SPAN + 2 * GUARD + 64];
    const size_t lens[] = {0, 1, 63, 64, 65, 127, 128, 129, 1000, 1024, 4095};

    if (vg_nt_copy_use(unit) < 0) {
        g_test_skip("this CPU lacks the unit");
        return;
    }
    for (size_t i = 0; i < sizeof(src); i++) {
        src[i] = (uint8_t)(i * 131 + 7);
    }
    for (unsigned sa = 0; sa < 64; sa += 7) {
        for (unsigned da = 0; da < 64; da += 5) {
            for (size_t k = 0; k < G_N_ELEMENTS(lens); k++) {
                uint8_t *d = dst + GUARD + da;

                memset(dst, 0xa5, sizeof(dst));
                vg_nt_copy(d, src + sa, lens[k]);
                vg_nt_fence();
                g_assert_cmpmem(d, lens[k], src + sa, lens[k]);
                for (uint8_t *g = dst; g < d; g++) {
                    g_assert_cmphex(*g, ==, 0xa5);
                }
                for (uint8_t *g = d + lens[k]; g < dst + sizeof(dst); g++) {
                    g_assert_cmphex(*g, ==, 0xa5);
                }
            }
        }
    }
    g_assert_cmpstr(vg_nt_copy_unit(), ==, unit);
}

static void test_unit(gconstpointer unit)
{
    check_unit(unit);
}

static void test_default_and_unknown(void)
{
    const char *widest = __builtin_cpu_supports("avx512f") ? "avx512"
                         : __builtin_cpu_supports("avx2")  ? "avx2"
                                                           : "sse2";

    g_assert_cmpstr(vg_nt_copy_unit(), ==, widest);
    g_assert_cmpint(vg_nt_copy_use("mmx"), ==, -ENOTSUP);
    g_assert_cmpstr(vg_nt_copy_unit(), ==, widest);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    /* first: the default before any vg_nt_copy_use() */
    g_test_add_func("/nt-copy/default", test_default_and_unknown);
    g_test_add_data_func("/nt-copy/avx512", "avx512", test_unit);
    g_test_add_data_func("/nt-copy/avx2", "avx2", test_unit);
    g_test_add_data_func("/nt-copy/sse2", "sse2", test_unit);
    return g_test_run();
}
