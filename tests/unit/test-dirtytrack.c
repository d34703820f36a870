/*
 * Unit tests for dirty-track/: the hash pool, the API's error paths, and
 * randomized runs against a brute-force reference (a copy of memory at the
 * previous epoch) with every kind of writer: a changed page is never missed.
 */
#include <errno.h>
#include <glib.h>
#include <stdlib.h>
#include <string.h>

#include "common/error.h"
#include "dirty-track/dirtytrack.h"
#include "dirty-track/hash-pool.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)

static struct dt_tracker *new_tracker(const uint8_t *base, uint64_t size,
                                      uint32_t page_size, unsigned threads,
                                      uint64_t seed)
{
    struct dt_config cfg = {base, size, page_size, threads,
                            seed, NULL, NULL,      false};
    struct dt_tracker *t = NULL;
    struct vg_error err = {0};

    g_assert_cmpint(dt_new(&cfg, &t, &err), ==, 0);
    g_assert_nonnull(t);
    return t;
}

static bool test_bit(const uint64_t *map, uint64_t p)
{
    return map[p / 64] >> (p % 64) & 1;
}

/* Run an epoch; return the dirty pages as a freshly allocated bitmap. */
static uint64_t *epoch(struct dt_tracker *t, struct dt_epoch_stats *st)
{
    uint64_t *dirty = g_new(uint64_t, dt_bitmap_words(t));
    struct vg_error err = {0};

    memset(dirty, 0xa5, dt_bitmap_words(t) * sizeof(uint64_t));
    g_assert_cmpint(dt_epoch(t, dirty, st, &err), ==, 0);
    return dirty;
}

/* The same epoch in halves (dt_epoch_begin/ready/end), asking for random
 * amounts: every prefix dt_epoch_ready() calls final must already equal
 * @final, the dirty set dt_epoch() computed on a twin tracker. */
static uint64_t *epoch_split(struct dt_tracker *t, const uint64_t *final,
                             struct dt_epoch_stats *st)
{
    uint64_t *dirty = g_new(uint64_t, dt_bitmap_words(t));
    uint64_t pages = dt_pages(t), ready = 0;
    struct vg_error err = {0};

    memset(dirty, 0xa5, dt_bitmap_words(t) * sizeof(uint64_t));
    g_assert_cmpint(dt_epoch_begin(t, dirty, &err), ==, 0);
    g_assert_cmpint(dt_epoch_begin(t, dirty, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "open"));
    while (ready < pages) {
        uint64_t got =
            dt_epoch_ready(t, ready + 1 + (uint64_t)g_random_int_range(0, 200));

        g_assert_cmpuint(got, >, ready);
        g_assert_cmpuint(got, <=, pages);
        g_assert_true(got == pages || got % 64 == 0);
        g_assert_cmpmem(dirty, (got + 63) / 64 * 8, final, (got + 63) / 64 * 8);
        ready = got;
    }
    dt_epoch_end(t, st);
    return dirty;
}

/* Assert that the dirty pages are exactly @want (a -1 terminated list). */
static void assert_dirty(struct dt_tracker *t, const int *want)
{
    g_autofree uint64_t *dirty = epoch(t, NULL);
    uint64_t n = 0;

    for (; want[n] >= 0; n++) {
        g_assert_true(test_bit(dirty, (uint64_t)want[n]));
    }
    for (uint64_t w = 0; w < dt_bitmap_words(t); w++) {
        n -= (uint64_t)__builtin_popcountll(dirty[w]);
    }
    g_assert_cmpuint(n, ==, 0);
}

/* ---------------------------------------------------------------- pool -- */

static void count_chunk(void *arg, uint64_t chunk)
{
    __atomic_fetch_add(&((unsigned *)arg)[chunk], 1, __ATOMIC_RELAXED);
}

static void test_pool_chunks(void)
{
    static const unsigned threads[] = {1, 2, 5};
    static const uint64_t nchunks[] = {0, 1, 7, 1000};
    struct vg_error err = {0};
    struct dt_pool *pool;

    for (unsigned i = 0; i < G_N_ELEMENTS(threads); i++) {
        g_assert_cmpint(dt_pool_new(threads[i], &pool, &err), ==, 0);
        g_assert_cmpuint(dt_pool_threads(pool), ==, threads[i]);
        for (unsigned j = 0; j < G_N_ELEMENTS(nchunks); j++) {
            unsigned counts[1000] = {0};
            dt_pool_run(pool, nchunks[j], count_chunk, counts);
            for (uint64_t c = 0; c < G_N_ELEMENTS(counts); c++) {
                g_assert_cmpuint(counts[c], ==, c < nchunks[j] ? 1 : 0);
            }
        }
        dt_pool_free(pool);
    }
    dt_pool_free(NULL);
}

/* Jobs in quick succession, run and started: no chunk of one job goes
 * to another or is lost, whichever thread wakes late. */
static void test_pool_many_jobs(void)
{
    struct vg_error err = {0};
    struct dt_pool *pool;

    g_assert_cmpint(dt_pool_new(5, &pool, &err), ==, 0);
    for (unsigned i = 0; i < 20000; i++) {
        unsigned counts[4] = {0}, n = 1 + i % 3;

        if (i % 2) {
            dt_pool_run(pool, n, count_chunk, counts);
        } else {
            dt_pool_start(pool, n, count_chunk, counts);
            dt_pool_wait(pool);
        }
        for (unsigned c = 0; c < G_N_ELEMENTS(counts); c++) {
            g_assert_cmpuint(counts[c], ==, c < n ? 1 : 0);
        }
    }
    dt_pool_free(pool);
}

static void test_pool_errors(void)
{
    struct vg_error err = {0};
    struct dt_pool *pool = NULL;

    g_assert_cmpint(dt_pool_new(0, &pool, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "0 threads"));
    g_assert_cmpint(dt_pool_new(DT_POOL_MAX_THREADS + 1, &pool, &err), ==,
                    -EINVAL);
    g_assert_null(pool);
}

/* ---------------------------------------------------------- API errors -- */

static void test_config_errors(void)
{
    static uint8_t mem[8 * 4096];
    static const struct {
        struct dt_config cfg;
        const char *msg;
    } cases[] = {
        {{NULL, sizeof(mem), 4096, 1, 0, NULL, NULL, false}, "base is NULL"},
        {{mem, sizeof(mem), 2048, 1, 0, NULL, NULL, false}, "page size 2048"},
        {{mem, sizeof(mem), 12288, 1, 0, NULL, NULL, false}, "page size 12288"},
        {{mem, sizeof(mem), 4096 + 1, 1, 0, NULL, NULL, false}, "power of two"},
        {{mem, 4 * MIB, 4 * MIB, 1, 0, NULL, NULL, false}, "page size 4194304"},
        {{mem, sizeof(mem) - 1, 4096, 1, 0, NULL, NULL, false},
         "multiple of the page size"},
        {{mem, 0, 4096, 1, 0, NULL, NULL, false}, "VRAM size 0x0"},
        {{mem, sizeof(mem), 0, 1, 0, NULL, NULL, false},
         "size 0x8000: must be"}, /* 64 KiB */
        {{mem, sizeof(mem), 4096, 0, 0, NULL, NULL, false}, "0 threads"},
        {{mem, sizeof(mem), 4096, DT_THREADS_MAX + 1, 0, NULL, NULL, false},
         "65 threads"},
    };
    struct dt_tracker *t = NULL;
    struct vg_error err = {0};

    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_assert_cmpint(dt_new(&cases[i].cfg, &t, &err), ==, -EINVAL);
        g_assert_cmpint(err.code, ==, EINVAL);
        g_assert_true(g_str_has_prefix(err.msg, "dirty tracker: "));
        g_assert_nonnull(strstr(err.msg, cases[i].msg));
        g_assert_null(t);
    }
    g_assert_cmpint(dt_new(NULL, &t, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "NULL config"));
    g_assert_cmpint(dt_new(&cases[0].cfg, NULL, NULL), ==, -EINVAL);
    dt_free(NULL);
}

static void test_range_errors(void)
{
    static uint8_t mem[8 * 4096];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 1);
    uint64_t log[2] = {~0ull, ~0ull}, dirty[1];
    struct vg_error err = {0};

    g_assert_cmpint(dt_mark_exact(t, 0, sizeof(mem) + 1, &err), ==, -ERANGE);
    g_assert_nonnull(strstr(err.msg, "exact write at 0x0+0x8001: outside"));
    g_assert_cmpint(dt_mark_exact(t, sizeof(mem), 1, &err), ==, -ERANGE);
    g_assert_cmpint(dt_mark_exact(t, sizeof(mem) + 1, 0, &err), ==, -ERANGE);
    g_assert_cmpint(dt_mark_opaque(t, UINT64_MAX - 1, 4, &err), ==, -ERANGE);
    g_assert_nonnull(strstr(err.msg, "opaque write-set at 0xfffffffffffffffe"));
    g_assert_cmpint(dt_mark_opaque(t, 4096, UINT64_MAX, &err), ==, -ERANGE);
    /* Edges that are inside. */
    g_assert_cmpint(dt_mark_exact(t, sizeof(mem), 0, &err), ==, 0);
    g_assert_cmpint(dt_mark_opaque(t, sizeof(mem) - 1, 1, &err), ==, 0);

    g_assert_cmpint(dt_merge_log(t, 0, log, 8, 3, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "granularity 0x3"));
    g_assert_cmpint(dt_merge_log(t, 0, log, 8, 0, &err), ==, -EINVAL);
    g_assert_cmpint(dt_merge_log(t, 0, NULL, 8, 4096, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "NULL bitmap"));
    g_assert_cmpint(dt_merge_log(t, 0, log, 1ull << 60, 4096, &err), ==,
                    -ERANGE);
    g_assert_nonnull(strstr(err.msg, "overflow"));
    g_assert_cmpint(dt_merge_log(t, 4096, log, 8, 4096, &err), ==, -ERANGE);
    g_assert_nonnull(strstr(err.msg, "dirty log at 0x1000+0x8000"));
    g_assert_cmpint(dt_merge_log(t, 0, NULL, 0, 4096, &err), ==, 0);

    g_assert_cmpint(dt_epoch(t, NULL, NULL, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "epoch 1: NULL dirty bitmap"));
    g_assert_cmpint(dt_epoch_begin(t, NULL, &err), ==, -EINVAL);
    g_assert_nonnull(strstr(err.msg, "epoch 1: NULL dirty bitmap"));
    /* no epoch open: everything is ready, and end only gives the stats */
    g_assert_cmpuint(dt_epoch_ready(t, 1), ==, dt_pages(t));
    dt_epoch_end(t, NULL);
    g_assert_cmpint(dt_epoch(t, dirty, NULL, &err), ==, 0);
    /* The failed marks marked nothing; the good opaque mark found no change. */
    assert_dirty(t, (const int[]){-1});
    g_assert_false(dt_page_is_zero(t, 8));
    dt_free(t);
}

/* ----------------------------------------------------------- behaviour -- */

static void test_first_epoch(void)
{
    const uint64_t pages = 70, size = pages * 64 * KIB;
    g_autofree uint8_t *mem = g_malloc0(size);
    struct dt_tracker *t;
    struct dt_epoch_stats st;

    memset(mem + 64 * KIB, 7, 64 * KIB);
    t = new_tracker(mem, size, 0, 3, 0);
    g_assert_cmpuint(dt_page_size(t), ==, DT_PAGE_SIZE_DEFAULT);
    g_assert_cmpuint(dt_pages(t), ==, pages);
    g_assert_cmpuint(dt_bitmap_words(t), ==, 2);
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.epoch, ==, 0);

    g_autofree uint64_t *dirty = epoch(t, &st);
    g_assert_cmpuint(dirty[0], ==, ~0ull);
    g_assert_cmpuint(dirty[1], ==, (1ull << 6) - 1); /* no bits past the end */
    g_assert_cmpuint(st.epoch, ==, 1);
    g_assert_cmpuint(st.pages, ==, pages);
    g_assert_cmpuint(st.pages_hashed, ==, pages);
    g_assert_cmpuint(st.dirty, ==, pages);
    g_assert_cmpuint(st.dirty_baseline, ==, pages);
    g_assert_cmpuint(st.dirty_exact + st.dirty_hash, ==, 0);
    g_assert_cmpuint(st.zero, ==, pages - 1);
    g_assert_cmpfloat(st.hash_gbps, >, 0);
    g_assert_false(dt_page_is_zero(t, 1));
    g_assert_true(dt_page_is_zero(t, 0));
    g_assert_true(dt_page_is_zero(t, pages - 1));
    g_assert_false(dt_page_is_zero(t, pages));

    /* Nothing marked: nothing hashed, nothing dirty. */
    assert_dirty(t, (const int[]){-1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.epoch, ==, 2);
    g_assert_cmpuint(st.pages_hashed, ==, 0);
    g_assert_false(dt_page_is_zero(t, 0)); /* not hashed by the last epoch */
    dt_free(t);
}

/* An epoch with no page to hash (only exact marks, as in an idle device's
 * stop-copy) is done by the caller within dt_epoch_begin(), whatever the
 * pool's size, and takes no hashing time; one with pages to hash still
 * finds them with the pool. */
static void test_epoch_without_hashing(void)
{
    const uint64_t pages = 64 * 64 + 3, size = pages * 4096;
    g_autofree uint8_t *mem = g_malloc0(size);
    struct dt_tracker *t = new_tracker(mem, size, 4096, 4, 7);
    g_autofree uint64_t *base = epoch(t, NULL);
    g_autofree uint64_t *dirty = g_new0(uint64_t, dt_bitmap_words(t));
    struct dt_epoch_stats st;
    struct vg_error err = {0};

    g_assert_cmpint(dt_mark_exact(t, 4096 * 9, 1, &err), ==, 0);
    g_assert_cmpint(dt_mark_exact(t, size - 1, 1, &err), ==, 0);
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 0);
    g_assert_cmpint(dt_epoch_begin(t, dirty, &err), ==, 0);
    g_assert_cmpuint(dt_epoch_ready(t, 0), ==, pages); /* all final now */
    dt_epoch_end(t, &st);
    g_assert_cmpuint(st.dirty_exact, ==, 2);
    g_assert_cmpuint(st.pages_hashed, ==, 0);
    g_assert_cmpuint(st.hash_ns, ==, 0);
    g_assert_true(test_bit(dirty, 9));
    g_assert_true(test_bit(dirty, pages - 1));

    mem[4096 * 4000] = 1;
    g_assert_cmpint(dt_mark_opaque(t, 4096 * 3990, 4096 * 20, &err), ==, 0);
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 20);
    g_assert_cmpint(dt_epoch_begin(t, dirty, &err), ==, 0);
    g_assert_cmpuint(dt_epoch_ready(t, pages), ==, pages);
    dt_epoch_end(t, &st);
    g_assert_cmpuint(st.pages_hashed, ==, 20);
    g_assert_cmpuint(st.dirty, ==, 1);
    g_assert_true(test_bit(dirty, 4000));
    g_assert_cmpfloat(st.hash_gbps, >, 0);
    dt_free(t);
}

static void test_precision(void)
{
    static uint8_t mem[16 * 4096];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 42);
    struct dt_epoch_stats st;

    g_assert_cmpuint(dt_pages_to_hash(t), ==, 16); /* the baseline */
    assert_dirty(t, (const int[]){0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                  14, 15, -1});
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 0);
    mem[3 * 4096 + 5] = 1; /* unmarked: missed, as documented */
    g_assert_cmpint(dt_mark_opaque(t, 5 * 4096, 4096, NULL), ==, 0);
    g_assert_cmpint(dt_mark_exact(t, 7 * 4096 + 100, 1, NULL), ==, 0);
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 1); /* exact ones are not */
    assert_dirty(t, (const int[]){7, -1});        /* 5 unchanged, 7 exact */

    dt_mark_all_opaque(t);
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 16);
    assert_dirty(t, (const int[]){3, 7, -1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.dirty_hash, ==, 1);     /* page 3 */
    g_assert_cmpuint(st.dirty_baseline, ==, 1); /* 7: not hashed since */
    g_assert_cmpuint(st.pages_hashed, ==, 16);

    /* An opaque range that straddles pages 9 and 10, written in 10 only. */
    g_assert_cmpint(dt_mark_opaque(t, 10 * 4096 - 1, 2, NULL), ==, 0);
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 2);
    mem[10 * 4096] = 9;
    assert_dirty(t, (const int[]){10, -1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.pages_hashed, ==, 2);
    dt_free(t);
}

/*
 * An exact write changes a page and an opaque writer later restores its old
 * content: comparing with the hash from before the exact write would miss it.
 */
static void test_stale_hash_after_exact(void)
{
    static uint8_t mem[4 * 4096];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 7);
    struct dt_epoch_stats st;

    assert_dirty(t, (const int[]){0, 1, 2, 3, -1});
    memset(mem + 2 * 4096, 0xbb, 4096);
    g_assert_cmpint(dt_mark_exact(t, 2 * 4096, 4096, NULL), ==, 0);
    assert_dirty(t, (const int[]){2, -1});
    memset(mem + 2 * 4096, 0, 4096); /* back to the first epoch's content */
    g_assert_cmpint(dt_mark_opaque(t, 0, sizeof(mem), NULL), ==, 0);
    assert_dirty(t, (const int[]){2, -1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.dirty_baseline, ==, 1);
    g_assert_cmpuint(st.zero, ==, 4);
    /* Now hashed again: an unchanged page is not reported. */
    g_assert_cmpint(dt_mark_opaque(t, 0, sizeof(mem), NULL), ==, 0);
    assert_dirty(t, (const int[]){-1});
    dt_free(t);
}

/*
 * A page hashed by an epoch, changed before it is sent, sent with the new
 * content, then changed back: the receiver holds the in-between content,
 * so the next epoch must report the page.  The baseline is what was sent.
 */
static void test_revert_after_send(void)
{
    static uint8_t mem[4 * 4096];
    uint8_t copy[4096];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 11);

    memset(mem + 4096, 0xaa, 4096);
    assert_dirty(t, (const int[]){0, 1, 2, 3, -1}); /* hashed: 0xaa */
    memset(mem + 4096, 0xcc, 4096);                 /* after the hash */
    memcpy(copy, mem + 4096, sizeof(copy));         /* what is sent */
    dt_note_sent(t, 1, 1, copy);
    memset(mem + 4096, 0xaa, 4096); /* back to the hashed content */
    dt_note_sent_zero(t, 3, 1);     /* page 3 went as a zero page */
    mem[3 * 4096 + 7] = 1;
    mem[3 * 4096 + 7] = 0; /* written and reverted: still zero */
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){1, -1});
    /* An exact write before the send is covered by the send. */
    memset(mem + 2 * 4096, 0x11, 4096);
    g_assert_cmpint(dt_mark_exact(t, 2 * 4096, 4096, NULL), ==, 0);
    dt_note_sent(t, 2, 1, mem + 2 * 4096);
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){-1});
    /* Baselines outside the range are ignored, not written. */
    dt_note_sent_zero(t, 3, 5);
    dt_note_sent(t, 4, 1, copy);
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){-1});
    dt_free(t);
}

/* dt_note_sent() in two steps (the hashes computed elsewhere) leaves the
 * same baselines: a page that changed back after its copy was sent is
 * reported, one that did not is not. */
static void test_note_sent_hashes(void)
{
    static uint8_t mem[4 * 4096];
    uint8_t copy[4096];
    uint64_t h[2];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 11);

    memset(mem + 4096, 0xaa, 4096);
    memset(mem + 2 * 4096, 0xbb, 4096);
    assert_dirty(t, (const int[]){0, 1, 2, 3, -1}); /* hashed */
    memset(mem + 4096, 0xcc, 4096);                 /* after the hash */
    memcpy(copy, mem + 4096, sizeof(copy));         /* what is sent */
    h[0] = dt_page_hash(t, copy);
    h[1] = dt_page_hash(t, mem + 2 * 4096);
    g_assert_cmpuint(h[0], !=, h[1]);
    dt_note_sent_hashes(t, 1, 2, h);
    memset(mem + 4096, 0xaa, 4096); /* back to the hashed content */
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){1, -1});
    /* out of range: ignored */
    dt_note_sent_hashes(t, 3, 2, h);
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){3, -1});
    dt_free(t);
}

/* dt_note_sent_unhashed(): the exact writes before it are covered (page
 * 1 is not reported), those after it are (page 2), and a page without
 * its baseline is reported by an epoch that hashes it, even unchanged. */
static void test_note_sent_unhashed(void)
{
    static uint8_t mem[4 * 4096];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 13);

    assert_dirty(t, (const int[]){0, 1, 2, 3, -1}); /* hashed */
    g_assert_cmpint(dt_mark_exact(t, 4096, 2 * 4096, NULL), ==, 0);
    dt_note_sent_unhashed(t, 1, 2);
    g_assert_cmpint(dt_mark_exact(t, 2 * 4096, 4096, NULL), ==, 0);
    dt_note_sent_unhashed(t, 3, 5); /* past the end: ignored */
    assert_dirty(t, (const int[]){2, -1});
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){1, 2, 3, -1}); /* no baseline left */
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){-1});
    dt_free(t);
}

/*
 * dt_verify_exact: of the pages written exactly, the next epoch reports
 * those whose contents differ from what went out (page 1 rewritten with
 * what it held is not; page 2 is), and still reports a page that has no
 * baseline (page 3, written after its hash was dropped).  Without it,
 * every exact write is reported.
 */
static void test_verify_exact(void)
{
    static uint8_t mem[4 * 4096];
    struct dt_tracker *t = new_tracker(mem, sizeof(mem), 4096, 1, 13);
    struct dt_epoch_stats st;

    memset(mem + 4096, 0x11, 2 * 4096);
    assert_dirty(t, (const int[]){0, 1, 2, 3, -1}); /* baseline */
    memset(mem + 4096, 0x11, 4096);                 /* the same bytes */
    memset(mem + 2 * 4096, 0x22, 4096);
    g_assert_cmpint(dt_mark_exact(t, 4096, 2 * 4096, NULL), ==, 0);
    assert_dirty(t, (const int[]){1, 2, -1}); /* exact: both */
    dt_note_sent(t, 1, 2, mem + 4096);        /* and they went out */

    memset(mem + 4096, 0x11, 4096);
    memset(mem + 2 * 4096, 0x33, 4096);
    g_assert_cmpint(dt_mark_exact(t, 4096, 3 * 4096, NULL), ==, 0);
    dt_verify_exact(t);
    assert_dirty(t, (const int[]){2, -1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.dirty_exact, ==, 0);
    g_assert_cmpuint(st.dirty_hash, ==, 1);
    g_assert_cmpuint(st.pages_hashed, ==, 3);

    /* Page 3 written exactly: its baseline is gone until it is sent. */
    g_assert_cmpint(dt_mark_exact(t, 3 * 4096, 4096, NULL), ==, 0);
    assert_dirty(t, (const int[]){3, -1});
    g_assert_cmpint(dt_mark_exact(t, 3 * 4096, 4096, NULL), ==, 0);
    dt_verify_exact(t);
    assert_dirty(t, (const int[]){3, -1});
    dt_free(t);
}

/* A hash function that must not be called: the first epoch reads nothing. */
static int no_hash(void *opaque, const uint64_t *select, uint64_t seed,
                   uint64_t *hashes, uint64_t *zero, struct vg_error *err)
{
    (void)select, (void)seed, (void)hashes, (void)zero, (void)err;
    (*(int *)opaque)++;
    return 0;
}

/*
 * With baseline_from_sends, the first epoch reports every page dirty
 * without hashing; a page's baseline is what was sent, and a page not
 * sent yet has none, so hashing it reports it.
 */
static void test_baseline_from_sends(void)
{
    static uint8_t mem[4 * 4096];
    uint8_t copy[4096];
    struct dt_config cfg = {.base = mem,
                            .size = sizeof(mem),
                            .page_size = 4096,
                            .threads = 2,
                            .baseline_from_sends = true};
    struct dt_config dev = cfg;
    struct dt_tracker *t = NULL;
    struct dt_epoch_stats st;
    int hash_calls = 0;

    memset(mem + 4096, 0xaa, 4096);
    g_assert_cmpint(dt_new(&cfg, &t, NULL), ==, 0);
    g_assert_cmpuint(dt_pages_to_hash(t), ==, 0);
    assert_dirty(t, (const int[]){0, 1, 2, 3, -1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.pages_hashed, ==, 0);
    g_assert_cmpuint(st.dirty_baseline, ==, 4);
    g_assert_false(dt_page_is_zero(t, 0)); /* not read: unknown */

    dt_note_sent_zero(t, 0, 1);
    memcpy(copy, mem + 4096, sizeof(copy));
    dt_note_sent(t, 1, 1, copy);
    memset(mem + 4096, 0xbb, 4096); /* after the send: must be seen */
    dt_note_sent(t, 2, 1, mem + 2 * 4096);
    dt_mark_all_opaque(t); /* page 3 was never sent: no baseline */
    assert_dirty(t, (const int[]){1, 3, -1});
    dt_get_stats(t, &st);
    g_assert_cmpuint(st.pages_hashed, ==, 4);
    g_assert_cmpuint(st.dirty_hash, ==, 1);
    g_assert_cmpuint(st.dirty_baseline, ==, 1);
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){-1}); /* hashed now: nothing changed */
    dt_free(t);

    /* VRAM hashed on the device: not asked in the first epoch. */
    dev.base = NULL;
    dev.hash = no_hash;
    dev.hash_opaque = &hash_calls;
    g_assert_cmpint(dt_new(&dev, &t, NULL), ==, 0);
    assert_dirty(t, (const int[]){0, 1, 2, 3, -1});
    g_assert_cmpint(hash_calls, ==, 0);
    dt_mark_all_opaque(t);
    g_free(epoch(t, &st));
    g_assert_cmpint(hash_calls, ==, 1);
    dt_free(t);
}

static void test_zero_pages(void)
{
    static uint8_t mem[6 * 4096];
    struct dt_tracker *t;
    struct dt_epoch_stats st;

    mem[2 * 4096 + 4095] = 1; /* last byte */
    mem[3 * 4096] = 1;        /* first byte */
    memset(mem + 4 * 4096, 0xff, 4096);
    t = new_tracker(mem, sizeof(mem), 4096, 2, 0);
    g_free(epoch(t, &st));
    g_assert_cmpuint(st.zero, ==, 3);
    for (uint64_t p = 0; p < 6; p++) {
        g_assert_cmpint(dt_page_is_zero(t, p), ==, p < 2 || p == 5);
    }
    mem[3 * 4096] = 0;
    dt_mark_all_opaque(t);
    assert_dirty(t, (const int[]){3, -1});
    g_assert_true(dt_page_is_zero(t, 3));
    dt_free(t);
}

static void test_merge_log(void)
{
    const uint64_t size = 8 * 64 * KIB;
    g_autofree uint8_t *mem = g_malloc0(size);
    struct dt_tracker *t = new_tracker(mem, size, 64 * KIB, 1, 3);
    /* 4 KiB granularity: bit 17 is in page 1, bits 64 and 65 in page 4. */
    uint64_t log[2] = {1ull << 17, 3 | 1ull << 40};

    g_free(epoch(t, NULL));
    /* 70 bits: bit 104 (1 << 40 of word 1) lies past them and is ignored. */
    g_assert_cmpint(dt_merge_log(t, 0, log, 70, 4 * KIB, NULL), ==, 0);
    assert_dirty(t, (const int[]){1, 4, -1});
    /* At an offset, granules straddling pages: [60K, 68K) spans 0 and 1. */
    log[0] = 1;
    g_assert_cmpint(dt_merge_log(t, 60 * KIB, log, 1, 8 * KIB, NULL), ==, 0);
    assert_dirty(t, (const int[]){0, 1, -1});
    dt_free(t);
}

static void test_seed(void)
{
    static uint8_t mem[4096];
    struct dt_tracker *a = new_tracker(mem, sizeof(mem), 4096, 1, 0);
    struct dt_tracker *b = new_tracker(mem, sizeof(mem), 4096, 1, 0);
    struct dt_tracker *c = new_tracker(mem, sizeof(mem), 4096, 1, 1234);

    g_assert_cmpuint(dt_seed(a), !=, 0);
    g_assert_cmpuint(dt_seed(a), !=, dt_seed(b));
    g_assert_cmpuint(dt_seed(c), ==, 1234);
    dt_free(a);
    dt_free(b);
    dt_free(c);
}

/* ------------------------------------------------- randomized reference -- */

struct ref {
    uint8_t *mem, *prev, *prev2; /* now, at the last epoch, at the one before */
    uint64_t size, ps, pages;
    struct dt_tracker *t[2];      /* 1 and 3 threads, same seed */
    bool *exact, *opaque, *stale; /* per page */
    bool all_opaque;
};

static void ref_mark(struct ref *r, bool exact, uint64_t off, uint64_t len)
{
    for (int i = 0; i < 2; i++) {
        g_assert_cmpint(
            (exact ? dt_mark_exact : dt_mark_opaque)(r->t[i], off, len, NULL),
            ==, 0);
    }
    for (uint64_t p = off / r->ps; len && p <= (off + len - 1) / r->ps; p++) {
        (exact ? r->exact : r->opaque)[p] = true;
    }
}

/* Write [off, off + len): a byte value, or old content (reverting). */
static void ref_write(struct ref *r, uint64_t off, uint64_t len)
{
    static const uint8_t values[] = {0, 1, 0xaa};

    switch (g_random_int_range(0, 4)) {
    case 0:
        memcpy(r->mem + off, r->prev + off, len);
        break;
    case 1:
        memcpy(r->mem + off, r->prev2 + off, len);
        break;
    default:
        memset(r->mem + off, values[g_random_int_range(0, 3)], len);
    }
}

static void random_range(struct ref *r, uint64_t maxlen, uint64_t *off,
                         uint64_t *len)
{
    *off = (uint64_t)g_random_double_range(0, (double)r->size);
    *len = 1 + (uint64_t)g_random_double_range(0, (double)maxlen);
    *len = MIN(*len, r->size - *off);
}

static void writer_exact(struct ref *r)
{
    uint64_t off, len;

    random_range(r, 3 * r->ps, &off, &len);
    ref_write(r, off, len);
    ref_mark(r, true, off, len);
}

/* A buffer marked opaque, written in part, or not at all. */
static void writer_opaque(struct ref *r)
{
    uint64_t off, len, woff, wlen;

    random_range(r, 4 * r->ps, &off, &len);
    ref_mark(r, false, off, len);
    if (g_random_int_range(0, 3) == 0) {
        return;
    }
    woff = off + (uint64_t)g_random_double_range(0, (double)len);
    wlen = 1 + (uint64_t)g_random_double_range(0, (double)(off + len - woff));
    ref_write(r, woff, MIN(wlen, off + len - woff));
}

/* The guest CPU through an unlogged BAR2: a few bytes anywhere. */
static void writer_cpu(struct ref *r)
{
    for (int i = g_random_int_range(1, 5); i > 0; i--) {
        r->mem[(uint64_t)g_random_double_range(0, (double)r->size)] ^= 0x5a;
    }
    for (int i = 0; i < 2; i++) {
        dt_mark_all_opaque(r->t[i]);
    }
    r->all_opaque = true;
}

/* A DMA engine logging at 4 KiB granularity, merged as one bitmap. */
static void writer_dma_log(struct ref *r)
{
    uint64_t off, len, log[4] = {0}, nbits = 0;

    random_range(r, 4 * r->ps, &off, &len);
    off &= ~(4 * KIB - 1);
    for (; nbits < 256 && off + (nbits + 1) * 4 * KIB <= r->size; nbits++) {
        if (g_random_int_range(0, 4) == 0) {
            log[nbits / 64] |= 1ull << (nbits % 64);
            ref_write(r, off + nbits * 4 * KIB, 4 * KIB);
            ref_mark(r, true, off + nbits * 4 * KIB, 4 * KIB);
        }
    }
    for (int i = 0; i < 2; i++) {
        g_assert_cmpint(dt_merge_log(r->t[i], off, log, nbits, 4 * KIB, NULL),
                        ==, 0);
    }
}

static bool ref_page_zero(const struct ref *r, uint64_t p)
{
    for (uint64_t i = 0; i < r->ps; i++) {
        if (r->mem[p * r->ps + i]) {
            return false;
        }
    }
    return true;
}

static void ref_check_page(struct ref *r, const uint64_t *dirty, uint64_t p)
{
    bool changed = memcmp(r->mem + p * r->ps, r->prev + p * r->ps, r->ps);
    bool hashed = r->all_opaque || r->opaque[p];
    bool d = test_bit(dirty, p);

    if (changed && !d) {
        g_error("page %" G_GUINT64_FORMAT " changed but not reported", p);
    }
    /* Reported exactly when logged, changed, or hashed over a stale hash. */
    g_assert_cmpint(d, ==, r->exact[p] || (hashed && (changed || r->stale[p])));
    g_assert_cmpint(dt_page_is_zero(r->t[0], p), ==,
                    hashed && ref_page_zero(r, p));
    r->stale[p] = hashed ? false : r->stale[p] || r->exact[p];
}

static void ref_epoch(struct ref *r)
{
    uint64_t words = dt_bitmap_words(r->t[0]);
    g_autofree uint64_t *d0 = NULL;
    g_autofree uint64_t *d1 = NULL;
    struct dt_epoch_stats s0, s1;

    d0 = epoch(r->t[0], &s0);
    d1 = g_random_boolean() ? epoch(r->t[1], &s1)
                            : epoch_split(r->t[1], d0, &s1);
    g_assert_cmpmem(d0, words * 8, d1, words * 8);
    g_assert_cmpuint(s0.pages_hashed, ==, s1.pages_hashed);
    g_assert_cmpuint(s0.dirty_exact, ==, s1.dirty_exact);
    g_assert_cmpuint(s0.dirty_hash, ==, s1.dirty_hash);
    g_assert_cmpuint(s0.dirty_baseline, ==, s1.dirty_baseline);
    g_assert_cmpuint(s0.zero, ==, s1.zero);
    for (uint64_t p = 0; p < r->pages; p++) {
        ref_check_page(r, d0, p);
        g_assert_cmpint(dt_page_is_zero(r->t[0], p), ==,
                        dt_page_is_zero(r->t[1], p));
    }
    for (uint64_t p = r->pages; p < words * 64; p++) {
        g_assert_false(test_bit(d0, p));
    }
    memcpy(r->prev2, r->prev, r->size);
    memcpy(r->prev, r->mem, r->size);
    memset(r->exact, 0, r->pages);
    memset(r->opaque, 0, r->pages);
    r->all_opaque = false;
}

static void ref_init(struct ref *r, uint64_t ps, uint64_t pages)
{
    uint64_t seed = g_random_int() | 1;

    r->ps = ps;
    r->pages = pages;
    r->size = ps * pages;
    r->mem = g_malloc0(r->size);
    for (uint64_t p = 0; p < pages; p += 3) { /* a third non-zero */
        memset(r->mem + p * ps, (int)p + 1, ps);
    }
    r->prev = g_memdup2(r->mem, r->size);
    r->prev2 = g_memdup2(r->mem, r->size);
    r->exact = g_new0(bool, pages);
    r->opaque = g_new0(bool, pages);
    r->stale = g_new0(bool, pages);
    r->t[0] = new_tracker(r->mem, r->size, (uint32_t)ps, 1, seed);
    r->t[1] = new_tracker(r->mem, r->size, (uint32_t)ps, 3, seed);
    r->all_opaque = true;       /* the first epoch hashes everything, */
    memset(r->stale, 1, pages); /* and reports all: no baseline yet */
}

static void ref_fini(struct ref *r)
{
    dt_free(r->t[0]);
    dt_free(r->t[1]);
    g_free(r->mem);
    g_free(r->prev);
    g_free(r->prev2);
    g_free(r->exact);
    g_free(r->opaque);
    g_free(r->stale);
}

static void random_run(uint64_t ps, uint64_t pages, int epochs)
{
    static void (*const writers[])(struct ref *) = {
        writer_exact,  writer_exact,   writer_opaque,
        writer_opaque, writer_dma_log, writer_cpu,
    };
    struct ref r = {0};

    ref_init(&r, ps, pages);
    ref_epoch(&r);
    for (int e = 0; e < epochs; e++) {
        for (int w = g_random_int_range(0, 9); w > 0; w--) {
            int k = g_random_int_range(0, G_N_ELEMENTS(writers));
            if (writers[k] == writer_cpu && g_random_int_range(0, 3)) {
                k = 0; /* keep most epochs bounded */
            }
            writers[k](&r);
        }
        ref_epoch(&r);
    }
    ref_fini(&r);
}

static void test_random_4k(void)
{
    random_run(4 * KIB, 150, 300);
}

static void test_random_64k(void)
{
    random_run(64 * KIB, 70, 100);
}

static void test_random_2m(void)
{
    random_run(2 * MIB, 5, 20);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/dirtytrack/pool/chunks", test_pool_chunks);
    g_test_add_func("/dirtytrack/pool/many-jobs", test_pool_many_jobs);
    g_test_add_func("/dirtytrack/pool/errors", test_pool_errors);
    g_test_add_func("/dirtytrack/config-errors", test_config_errors);
    g_test_add_func("/dirtytrack/range-errors", test_range_errors);
    g_test_add_func("/dirtytrack/first-epoch", test_first_epoch);
    g_test_add_func("/dirtytrack/epoch-without-hashing",
                    test_epoch_without_hashing);
    g_test_add_func("/dirtytrack/precision", test_precision);
    g_test_add_func("/dirtytrack/stale-hash-after-exact",
                    test_stale_hash_after_exact);
    g_test_add_func("/dirtytrack/revert-after-send", test_revert_after_send);
    g_test_add_func("/dirtytrack/note-sent-hashes", test_note_sent_hashes);
    g_test_add_func("/dirtytrack/note-sent-unhashed", test_note_sent_unhashed);
    g_test_add_func("/dirtytrack/verify-exact", test_verify_exact);
    g_test_add_func("/dirtytrack/baseline-from-sends",
                    test_baseline_from_sends);
    g_test_add_func("/dirtytrack/zero-pages", test_zero_pages);
    g_test_add_func("/dirtytrack/merge-log", test_merge_log);
    g_test_add_func("/dirtytrack/seed", test_seed);
    g_test_add_func("/dirtytrack/random/4k", test_random_4k);
    g_test_add_func("/dirtytrack/random/64k", test_random_64k);
    g_test_add_func("/dirtytrack/random/2m", test_random_2m);
    return g_test_run();
}
