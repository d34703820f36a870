/*
 * Unit tests of DMA logging in vfu-dma: pages written through
 * vfu_dma_ptr(write=true) are reported once per report, at any report
 * page size, only inside the logged ranges; reads are not logged; bounds;
 * the test-only fault that drops the marks (--fault no-dma-log); which
 * ranges the device can write at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vfio-user/vfu-dma.h"

#define IOVA 0x100000ull
#define LEN  (1u << 20)

static struct vfu_dma *setup(int *fd)
{
    struct vfu_dma *dma;
    struct vg_error err;

    *fd = memfd_create("ram", MFD_ALLOW_SEALING);
    g_assert_cmpint(*fd, >=, 0);
    g_assert_cmpint(ftruncate(*fd, LEN), ==, 0);
    g_assert_cmpint(fcntl(*fd, F_ADD_SEALS, F_SEAL_SHRINK), ==, 0);
    g_assert_cmpint(vfu_dma_new(8, &dma, &err), ==, 0);
    g_assert_cmpint(vfu_dma_map(dma, IOVA, LEN, *fd, 0, true, true, &err), ==,
                    0);
    return dma;
}

static void test_log_report(void)
{
    struct vfu_dma_log_range r = {IOVA, LEN};
    uint64_t ps = 4096, bm[4];
    struct vg_error err;
    struct vfu_dma *dma;
    int fd;

    dma = setup(&fd);
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, LEN, 4096, bm, &err), ==,
                    -EINVAL);
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, &r, 1, &err), ==, 0);
    g_assert_cmpuint(ps, ==, 4096);
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, &r, 1, &err), ==, -EBUSY);
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x1ff0, 0x20, true)); /* 1, 2 */
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x9000, 8, false));   /* read */
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x80000, 1, true));   /* 128 */
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 256 * 4096, 4096, bm, &err),
                    ==, 0);
    g_assert_cmphex(bm[0], ==, 0x6);
    g_assert_cmphex(bm[1], ==, 0);
    g_assert_cmphex(bm[2], ==, 1);
    /* cleared by the report */
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 256 * 4096, 4096, bm, &err),
                    ==, 0);
    g_assert_cmphex(bm[0] | bm[2], ==, 0);
    /* a bigger report page: bits merge */
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x3000, 0x2000, true));
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, LEN, 0x10000, bm, &err), ==,
                    0);
    g_assert_cmphex(bm[0], ==, 0x1);
    /* a page partly outside the report range stays logged */
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x5000, 4, true));
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(
        vfu_dma_log_report(dma, IOVA + 0x5800, 0x800, 0x800, bm, &err), ==, 0);
    g_assert_cmphex(bm[0], ==, 0x1);
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 0x10000, 4096, bm, &err), ==,
                    0);
    g_assert_cmphex(bm[0], ==, 0x20);
    /* bad reports */
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, LEN, 3000, bm, &err), ==,
                    -EINVAL);
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 0, 4096, bm, &err), ==,
                    -EINVAL);
    vfu_dma_log_stop(dma);
    g_assert_false(vfu_dma_logging(dma));
    vfu_dma_free(dma);
    close(fd);
}

/* Reports that start and end inside a word of the log: pages around them
 * stay logged, whatever word they are in. */
static void test_log_report_words(void)
{
    struct vfu_dma_log_range r = {IOVA, LEN};
    uint64_t ps = 4096, bm[4];
    struct vg_error err;
    struct vfu_dma *dma;
    int fd;

    dma = setup(&fd);
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, &r, 1, &err), ==, 0);
    static const unsigned written[] = {62, 63, 64, 65, 127, 130};
    for (unsigned i = 0; i < G_N_ELEMENTS(written); i++) {
        g_assert_nonnull(
            vfu_dma_ptr(dma, IOVA + written[i] * 4096ull, 1, true));
    }
    /* pages 63 to 127: 63, 64, 65 and 127 */
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(
        vfu_dma_log_report(dma, IOVA + 63 * 4096, 65 * 4096, 4096, bm, &err),
        ==, 0);
    g_assert_cmphex(bm[0], ==, 0x7);
    g_assert_cmphex(bm[1], ==, 1ull << (127 - 63 - 64));
    /* what is left: 62 and 130 */
    memset(bm, 0, sizeof(bm));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 256 * 4096, 4096, bm, &err),
                    ==, 0);
    g_assert_cmphex(bm[0], ==, 1ull << 62);
    g_assert_cmphex(bm[1], ==, 0);
    g_assert_cmphex(bm[2], ==, 1ull << (130 - 128));
    vfu_dma_free(dma);
    close(fd);
}

static void test_log_start_bounds(void)
{
    struct vfu_dma_log_range r[2] = {{IOVA, LEN}, {IOVA + 0x1000, 0x1000}};
    struct vg_error err;
    struct vfu_dma *dma;
    uint64_t ps = 4096;
    int fd;

    dma = setup(&fd);
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, r, 2, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "overlaps"));
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, r, 0, &err), ==, -EINVAL);
    ps = 3000;
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, r, 1, &err), ==, -EINVAL);
    ps = 4096;
    r[0].length = 1ull << 50;
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, r, 1, &err), ==, -E2BIG);
    r[0] = (struct vfu_dma_log_range){UINT64_MAX - 10, 100};
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, r, 1, &err), ==, -EINVAL);
    ps = 512; /* below the minimum: the device picks 4096 */
    r[0] = (struct vfu_dma_log_range){IOVA, LEN};
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, r, 1, &err), ==, 0);
    g_assert_cmpuint(ps, ==, 4096);
    g_assert_false(vfu_dma_ptr(dma, IOVA + LEN, 1, true)); /* unmapped */
    vfu_dma_free(dma);                                     /* stops logging */
    close(fd);
}

/* With the fault set, logging works but a write marks nothing. */
static void test_log_drop_fault(void)
{
    struct vfu_dma_log_range r = {IOVA, LEN};
    uint64_t ps = 4096, bm[4] = {0};
    struct vg_error err;
    struct vfu_dma *dma;
    int fd;

    dma = setup(&fd);
    vfu_dma_log_set_drop(dma, true);
    g_assert_cmpint(vfu_dma_log_start(dma, &ps, &r, 1, &err), ==, 0);
    g_assert_true(vfu_dma_logging(dma));
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x2000, 0x3000, true));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 256 * 4096, 4096, bm, &err),
                    ==, 0);
    g_assert_cmphex(bm[0] | bm[1] | bm[2] | bm[3], ==, 0);
    vfu_dma_log_set_drop(dma, false);
    g_assert_nonnull(vfu_dma_ptr(dma, IOVA + 0x2000, 1, true));
    g_assert_cmpint(vfu_dma_log_report(dma, IOVA, 256 * 4096, 4096, bm, &err),
                    ==, 0);
    g_assert_cmphex(bm[0], ==, 0x4);
    vfu_dma_free(dma);
    close(fd);
}

/* Only a writable mapping with an fd is memory the device can write: a
 * range overlapping none (one without an fd, a read-only one, a gap) is
 * one a DMA log report of can only come back clean. */
static void test_writable_overlap(void)
{
    struct vg_error err;
    struct vfu_dma *dma;
    int fd;

    dma = setup(&fd); /* [IOVA, +LEN) writable, with an fd */
    g_assert_cmpint(vfu_dma_map(dma, 0x1000000, LEN, -1, 0, true, true, &err),
                    ==, 0);
    g_assert_cmpint(vfu_dma_map(dma, 0x2000000, LEN, fd, 0, true, false, &err),
                    ==, 0);
    g_assert_true(vfu_dma_writable_overlap(dma, IOVA, 1));
    g_assert_true(vfu_dma_writable_overlap(dma, IOVA + LEN - 1, 0x10000));
    g_assert_true(vfu_dma_writable_overlap(dma, 0, IOVA + 1));
    g_assert_false(vfu_dma_writable_overlap(dma, 0, IOVA));
    g_assert_false(vfu_dma_writable_overlap(dma, IOVA + LEN, 0x1000));
    g_assert_false(vfu_dma_writable_overlap(dma, 0x1000000, LEN)); /* no fd */
    g_assert_false(vfu_dma_writable_overlap(dma, 0x2000000, LEN)); /* ro */
    vfu_dma_free(dma);
    close(fd);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vfu-dma/log-report", test_log_report);
    g_test_add_func("/vfu-dma/log-report-words", test_log_report_words);
    g_test_add_func("/vfu-dma/log-start-bounds", test_log_start_bounds);
    g_test_add_func("/vfu-dma/log-drop-fault", test_log_drop_fault);
    g_test_add_func("/vfu-dma/writable-overlap", test_writable_overlap);
    return g_test_run();
}
