/* Unit tests for common/populate.c: a memfd mapping is populated to the
 * last byte without a byte changed, also while it is being written; a
 * mapping the kernel cannot populate stops the thread with its error; stop
 * joins a thread that has not finished, and its progress stays readable
 * until free. */
#include <errno.h>
#include <glib.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/populate.h"

#define SIZE (32u << 20)

static uint8_t *map_memfd(size_t size, int prot)
{
    int fd = memfd_create("test-populate", MFD_CLOEXEC);
    void *p;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)size), ==, 0);
    p = mmap(NULL, size, prot, MAP_SHARED, fd, 0);
    g_assert_true(p != MAP_FAILED);
    close(fd);
    return p;
}

static void wait_finished(struct vg_populate *p,
                          struct vg_populate_progress *pr)
{
    for (int i = 0; i < 2000; i++) {
        vg_populate_progress(p, pr);
        if (pr->finished) {
            return;
        }
        g_usleep(5000);
    }
    g_assert_not_reached();
}

/* Pages of [base, base + size) not resident. */
static size_t not_resident(uint8_t *base, size_t size)
{
    size_t pages = size / (size_t)getpagesize(), n = 0;
    g_autofree unsigned char *vec = g_malloc(pages);

    g_assert_cmpint(mincore(base, size, vec), ==, 0);
    for (size_t i = 0; i < pages; i++) {
        n += !(vec[i] & 1);
    }
    return n;
}

static void test_populates_all(void)
{
    uint8_t *base = map_memfd(SIZE, PROT_READ | PROT_WRITE);
    struct vg_populate_progress pr;
    struct vg_error err = {0};
    struct vg_populate *p;

    g_assert_cmpuint(not_resident(base, SIZE), ==, SIZE / getpagesize());
    memset(base + 3 * VG_POPULATE_STEP + 100, 0x5a, 4096);
    g_assert_cmpint(vg_populate_start(base, SIZE, "test", &p, &err), ==, 0);
    /* Writes while it runs stay as written. */
    for (size_t off = 0; off < SIZE; off += 1u << 20) {
        base[off + 7] = (uint8_t)(off >> 20);
    }
    wait_finished(p, &pr);
    g_assert_cmpint(pr.error, ==, 0);
    g_assert_cmpuint(pr.done, ==, SIZE);
    g_assert_cmpfloat(pr.elapsed_ms, >=, 0);
    g_assert_cmpuint(not_resident(base, SIZE), ==, 0);
    for (size_t off = 0; off < SIZE; off += 1u << 20) {
        g_assert_cmpuint(base[off + 7], ==, (uint8_t)(off >> 20));
        g_assert_cmpuint(base[off + 8], ==, 0);
    }
    g_assert_cmpuint(base[3 * VG_POPULATE_STEP + 100 + 4095], ==, 0x5a);
    vg_populate_free(p);
    munmap(base, SIZE);
}

static void test_read_only_mapping_fails(void)
{
    uint8_t *base = map_memfd(SIZE, PROT_READ);
    struct vg_populate_progress pr;
    struct vg_error err = {0};
    struct vg_populate *p;

    g_assert_cmpint(vg_populate_start(base, SIZE, "test", &p, &err), ==, 0);
    wait_finished(p, &pr);
    g_assert_cmpint(pr.error, <, 0);
    g_assert_cmpuint(pr.done, <, SIZE);
    vg_populate_free(p);
    munmap(base, SIZE);
}

static void test_stop_early(void)
{
    size_t size = 1ul << 30;
    uint8_t *base = map_memfd(size, PROT_READ | PROT_WRITE);
    struct vg_populate_progress pr;
    struct vg_error err = {0};
    struct vg_populate *p;

    g_assert_cmpint(vg_populate_start(base, size, "test", &p, &err), ==, 0);
    vg_populate_stop(p); /* joins: no thread touches base after this */
    g_assert_cmpint(munmap(base, size), ==, 0);
    vg_populate_progress(p, &pr);
    g_assert_true(pr.finished);
    g_assert_cmpuint(pr.done, <, size);
    g_assert_cmpuint(pr.done % VG_POPULATE_STEP, ==, 0);
    vg_populate_stop(p); /* again: nothing left to join */
    vg_populate_free(p);
    vg_populate_free(NULL);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/populate/populates-all", test_populates_all);
    g_test_add_func("/populate/read-only-mapping-fails",
                    test_read_only_mapping_fails);
    g_test_add_func("/populate/stop-early", test_stop_early);
    return g_test_run();
}
