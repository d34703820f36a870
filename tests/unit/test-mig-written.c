/*
 * Unit tests of the pieces of each page a stop-copy sends
 * (vfio-migration/mig-written.h): the pieces a byte range touches; an
 * epoch's pieces join the pass, added to a page it holds and starting
 * over for one new to it; anything but the guest CPU's log, an epoch that
 * may not leave parts, or a page the log said nothing of, sends it whole;
 * and whether a page's last send went by reference; and what a stop-copy
 * beginning now would send, kept through any sequence of writes, merges
 * and sends as a recount of every page finds it.
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

    mig_written_cpu(w, 1, 0x3, false);
    mig_written_cpu(w, 1, 0x30, false);
    mig_written_whole(w, 70, false);
    mig_written_cpu(w, 70, 0x1, false); /* after a whole write: still whole */
    set(dirty, 1);
    set(dirty, 70);
    set(dirty, 129);
    mig_written_merge(w, dirty, pass, 0, 3, true);
    g_assert_cmphex(mig_written_pass(w, 1), ==, 0x33);
    g_assert_cmphex(mig_written_pass(w, 70), ==, MIG_WRITTEN_WHOLE);
    g_assert_cmphex(mig_written_pass(w, 129), ==, MIG_WRITTEN_WHOLE);

    /* Still in the pass: the next epoch's pieces add to its own */
    set(pass, 1);
    mig_written_cpu(w, 1, 0x100, true);
    mig_written_merge(w, dirty, pass, 0, 1, true);
    g_assert_cmphex(mig_written_pass(w, 1), ==, 0x133);
    /* Sent meanwhile (not in the pass): it starts over */
    pass[0] = 0;
    mig_written_leave(w, 1);
    mig_written_cpu(w, 1, 0x8, false);
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

    mig_written_cpu(w, 2, 0x4, false);
    mig_written_cpu(w, 66, 0x4, false);
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

/* A model of the pages: the pass and each page's masks as the header
 * defines them. */
struct model {
    uint64_t pass[3], cpu[NPAGES], mask[NPAGES], grown;
};

static bool in(const uint64_t *bm, uint64_t p)
{
    return bm[p / 64] >> (p % 64) & 1;
}

static uint64_t model_pending(const struct model *md, uint64_t p)
{
    return in(md->pass, p) ? md->mask[p] | md->cpu[p] : md->cpu[p];
}

static void model_write(struct model *md, uint64_t p, uint64_t mask)
{
    uint64_t old = model_pending(md, p);

    md->cpu[p] |= mask;
    md->grown += (uint64_t)(__builtin_popcountll(model_pending(md, p)) -
                            __builtin_popcountll(old));
}

static void model_merge(struct model *md, const uint64_t *dirty, unsigned w0,
                        unsigned w1, bool parts)
{
    for (uint64_t p = w0 * 64; p < w1 * 64 && p < NPAGES; p++) {
        if (in(dirty, p)) {
            uint64_t now = parts && md->cpu[p] ? md->cpu[p] : MIG_WRITTEN_WHOLE;

            md->mask[p] = in(md->pass, p) ? md->mask[p] | now : now;
        }
        md->cpu[p] = 0;
    }
    for (unsigned i = w0; i < w1; i++) {
        md->pass[i] |= dirty[i];
    }
}

static void count(struct mig_written_sum *s, uint64_t mask)
{
    if (mask == MIG_WRITTEN_WHOLE) {
        s->whole++;
    } else if (mask) {
        s->parts++;
        s->pieces += (uint64_t)__builtin_popcountll(mask);
    }
}

static void check_sums(const struct mig_written *w, const struct model *md)
{
    struct mig_written_sum want[2] = {{0}};
    struct mig_written_sum got[2] = {mig_written_in_pass(w),
                                     mig_written_fresh(w)};

    for (uint64_t p = 0; p < NPAGES; p++) {
        count(&want[in(md->pass, p) ? 0 : 1], model_pending(md, p));
        if (in(md->pass, p)) {
            g_assert_cmphex(mig_written_pass(w, p), ==, md->mask[p]);
        }
    }
    for (unsigned i = 0; i < 2; i++) {
        g_assert_cmpuint(got[i].whole, ==, want[i].whole);
        g_assert_cmpuint(got[i].parts, ==, want[i].parts);
        g_assert_cmpuint(got[i].pieces, ==, want[i].pieces);
    }
    g_assert_cmpuint(mig_written_grown(w), ==, md->grown);
}

/* Random writes (mostly of a few pieces, some whole), sends of pages of
 * the pass, and merges of random dirty sets (with and without parts, of
 * all words or some, mostly holding the pages written, sometimes not),
 * each followed by a recount against the model. */
static void test_sums(void)
{
    struct mig_written *w = mig_written_new(NPAGES);
    struct model md = {.grown = 0};
    GRand *rng = g_rand_new_with_seed(52053);

    for (unsigned step = 0; step < 20000; step++) {
        uint64_t p = g_rand_int_range(rng, 0, NPAGES);
        unsigned op = g_rand_int_range(rng, 0, 100);

        if (op < 60) {
            uint64_t mask = 1ull << g_rand_int_range(rng, 0, 64);

            mig_written_cpu(w, p, mask, in(md.pass, p));
            model_write(&md, p, mask);
        } else if (op < 65) {
            mig_written_whole(w, p, in(md.pass, p));
            model_write(&md, p, MIG_WRITTEN_WHOLE);
        } else if (op < 95) {
            if (in(md.pass, p)) {
                mig_written_leave(w, p);
                md.pass[p / 64] &= ~(1ull << (p % 64));
                md.cpu[p] = 0;
            }
        } else {
            uint64_t dirty[3] = {0};
            bool parts = g_rand_boolean(rng);
            bool with_cpu = g_rand_int_range(rng, 0, 4) != 0;
            unsigned w0 = g_rand_int_range(rng, 0, 3);
            unsigned w1 = g_rand_int_range(rng, w0 + 1, 4);

            for (uint64_t q = 0; q < NPAGES; q++) {
                if ((with_cpu && md.cpu[q]) ||
                    g_rand_int_range(rng, 0, 50) == 0) {
                    set(dirty, q);
                }
            }
            mig_written_merge(w, dirty, md.pass, w0, w1, parts);
            model_merge(&md, dirty, w0, w1, parts);
        }
        check_sums(w, &md);
    }
    g_rand_free(rng);
    mig_written_free(w);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-written/touched", test_touched);
    g_test_add_func("/mig-written/merge", test_merge);
    g_test_add_func("/mig-written/merge-whole-epoch", test_merge_whole_epoch);
    g_test_add_func("/mig-written/by-ref", test_by_ref);
    g_test_add_func("/mig-written/sums", test_sums);
    return g_test_run();
}
