/*
 * Unit tests of the pieces of each page a stop-copy sends
 * (vfio-migration/mig-written.h): the pieces a byte range touches; an
 * epoch's pieces join the pass, added to a page it holds and starting
 * over for one new to it; anything but the guest CPU's log, an epoch that
 * may not leave parts, or a page the log said nothing of, sends it whole;
 * and whether a page's last send went by reference.
 */
#include <glib.h>

#include "vfio-migration/mig-written.h"

#define PAGE   (64u << 10)
#define PIECE  (PAGE / 64)
#define NPAGES 130u /* three bitmap words, the last partly */

static void test_touched(void)
{
    /* 8 bytes inside piece 0 of page 2, and across pieces 5 and 6 */
    g_assert_cmphex(mig_written_touched(2, PAGE, 2 * PAGE + 100, 8), ==, 1);
    g_assert_cmphex(mig_written_touched(2, PAGE, 2 * PAGE + 6 * PIECE - 4, 8),
                    ==, 3ull << 5);
    /* A 4 KiB granule is four pieces; the last piece of the page */
    g_assert_cmphex(mig_written_touched(0, PAGE, 8192, 4096), ==, 0xfull << 8);
    g_assert_cmphex(mig_written_touched(1, PAGE, 2 * PAGE - 1, 1), ==,
                    1ull << 63);
    /* Across a page boundary: each page gets its own part */
    g_assert_cmphex(mig_written_touched(3, PAGE, 4 * PAGE - 6, 12), ==,
                    1ull << 63);
    g_assert_cmphex(mig_written_touched(4, PAGE, 4 * PAGE - 6, 12), ==, 1);
    /* A range over the whole page, one outside it, an empty one */
    g_assert_cmphex(mig_written_touched(1, PAGE, 0, 8 * PAGE), ==,
                    MIG_WRITTEN_WHOLE);
    g_assert_cmphex(mig_written_touched(1, PAGE, 3 * PAGE, 8), ==, 0);
    g_assert_cmphex(mig_written_touched(1, PAGE, PAGE, 0), ==, 0);
    /* With 4 KiB pages a piece is 64 bytes */
    g_assert_cmphex(mig_written_touched(0, 4096, 64, 65), ==, 6);
}

static void set(uint64_t *bm, uint64_t p)
{
    bm[p / 64] |= 1ull << (p % 64);
}

/* Pages 1 (the CPU's pieces), 70 (an engine's write) and 129 (dirty with
 * no log: found by hash) join an empty pass; then page 1 again. */
static void test_merge(void)
{
    struct mig_written *w = mig_written_new(NPAGES);
    uint64_t dirty[3] = {0}, pass[3] = {0};

    mig_written_cpu(w, 1, 0x3);
    mig_written_cpu(w, 1, 0x30);
    mig_written_whole(w, 70);
    mig_written_cpu(w, 70, 0x1); /* after a whole write: still whole */
    set(dirty, 1);
    set(dirty, 70);
    set(dirty, 129);
    mig_written_merge(w, dirty, pass, 0, 3, true);
    g_assert_cmphex(mig_written_pass(w, 1), ==, 0x33);
    g_assert_cmphex(mig_written_pass(w, 70), ==, MIG_WRITTEN_WHOLE);
    g_assert_cmphex(mig_written_pass(w, 129), ==, MIG_WRITTEN_WHOLE);

    /* Still in the pass: the next epoch's pieces add to its own */
    set(pass, 1);
    mig_written_cpu(w, 1, 0x100);
    mig_written_merge(w, dirty, pass, 0, 1, true);
    g_assert_cmphex(mig_written_pass(w, 1), ==, 0x133);
    /* Sent meanwhile (not in the pass): it starts over */
    pass[0] = 0;
    mig_written_cpu(w, 1, 0x8);
    mig_written_merge(w, dirty, pass, 0, 1, true);
    g_assert_cmphex(mig_written_pass(w, 1), ==, 0x8);
    /* The merge cleared the epoch's pieces: no log now, so whole */
    mig_written_merge(w, dirty, pass, 0, 1, true);
    g_assert_cmphex(mig_written_pass(w, 1), ==, MIG_WRITTEN_WHOLE);
    mig_written_free(w);
}

/* An epoch that may not leave parts sends the page whole, and only the
 * merged words' pieces start over. */
static void test_merge_whole_epoch(void)
{
    struct mig_written *w = mig_written_new(NPAGES);
    uint64_t dirty[3] = {0}, pass[3] = {0};

    mig_written_cpu(w, 2, 0x4);
    mig_written_cpu(w, 66, 0x4);
    set(dirty, 2);
    set(dirty, 66);
    mig_written_merge(w, dirty, pass, 0, 1, false);
    g_assert_cmphex(mig_written_pass(w, 2), ==, MIG_WRITTEN_WHOLE);
    g_assert_cmphex(mig_written_pass(w, 66), ==, 0); /* word 1 not merged */
    mig_written_merge(w, dirty, pass, 1, 2, true);
    g_assert_cmphex(mig_written_pass(w, 66), ==, 0x4);
    mig_written_free(w);
}

static void test_by_ref(void)
{
    struct mig_written *w = mig_written_new(NPAGES);

    g_assert_false(mig_written_by_ref(w, 63));
    mig_written_sent(w, 60, 10, true);
    g_assert_true(mig_written_by_ref(w, 60));
    g_assert_true(mig_written_by_ref(w, 64));
    g_assert_true(mig_written_by_ref(w, 69));
    g_assert_false(mig_written_by_ref(w, 70));
    mig_written_sent(w, 63, 2, false);
    g_assert_true(mig_written_by_ref(w, 62));
    g_assert_false(mig_written_by_ref(w, 63));
    g_assert_false(mig_written_by_ref(w, 64));
    g_assert_true(mig_written_by_ref(w, 65));
    mig_written_free(w);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-written/touched", test_touched);
    g_test_add_func("/mig-written/merge", test_merge);
    g_test_add_func("/mig-written/merge-whole-epoch", test_merge_whole_epoch);
    g_test_add_func("/mig-written/by-ref", test_by_ref);
    return g_test_run();
}
