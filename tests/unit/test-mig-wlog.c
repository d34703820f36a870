/*
 * Unit tests of the engine write log (vfio-migration/mig-wlog.h): ranges
 * come back oldest first and the log empties; a range that continues or
 * repeats the last one merges with it; past MIG_WLOG_MAX ranges one
 * opaque range bounds the rest; and writers on other threads lose
 * nothing while the log is drained beside them.
 */
#include <glib.h>

#include "vfio-migration/mig-wlog.h"

struct seen {
    GArray *e; /* struct mig_wlog_entry */
};

static void collect(void *opaque, uint64_t off, uint64_t len, bool exact)
{
    struct seen *s = opaque;
    struct mig_wlog_entry e = {off, len, exact};

    g_array_append_val(s->e, e);
}

static struct mig_wlog_entry nth(const struct seen *s, unsigned i)
{
    return g_array_index(s->e, struct mig_wlog_entry, i);
}

static void test_order_and_empty(void)
{
    static struct mig_wlog l;
    struct seen s = {g_array_new(false, false, sizeof(struct mig_wlog_entry))};

    mig_wlog_init(&l);
    mig_wlog_add(&l, 8192, 4096, true);
    mig_wlog_add(&l, 0, 100, false);
    mig_wlog_drain(&l, collect, &s);
    g_assert_cmpuint(s.e->len, ==, 2);
    g_assert_cmpuint(nth(&s, 0).off, ==, 8192);
    g_assert_cmpuint(nth(&s, 0).len, ==, 4096);
    g_assert_true(nth(&s, 0).exact);
    g_assert_cmpuint(nth(&s, 1).off, ==, 0);
    g_assert_false(nth(&s, 1).exact);
    g_array_set_size(s.e, 0);
    mig_wlog_drain(&l, collect, &s);
    g_assert_cmpuint(s.e->len, ==, 0);
    mig_wlog_add(&l, 1, 1, true);
    mig_wlog_drain(&l, NULL, NULL); /* forgotten */
    mig_wlog_drain(&l, collect, &s);
    g_assert_cmpuint(s.e->len, ==, 0);
    mig_wlog_destroy(&l);
    g_array_free(s.e, true);
}

static void test_merge(void)
{
    static struct mig_wlog l;
    struct seen s = {g_array_new(false, false, sizeof(struct mig_wlog_entry))};

    mig_wlog_init(&l);
    mig_wlog_add(&l, 4096, 4096, true);
    mig_wlog_add(&l, 8192, 4096, true); /* continues it */
    mig_wlog_add(&l, 4096, 100, true);  /* inside it */
    mig_wlog_add(&l, 12288, 10, false); /* adjacent but opaque: apart */
    mig_wlog_add(&l, 20000, 10, false); /* a gap: apart */
    mig_wlog_add(&l, 0, 4096, true);    /* before the last: apart */
    mig_wlog_drain(&l, collect, &s);
    g_assert_cmpuint(s.e->len, ==, 4);
    g_assert_cmpuint(nth(&s, 0).off, ==, 4096);
    g_assert_cmpuint(nth(&s, 0).len, ==, 8192);
    g_assert_false(nth(&s, 1).exact);
    g_assert_cmpuint(nth(&s, 2).off, ==, 20000);
    g_assert_cmpuint(nth(&s, 3).off, ==, 0);
    mig_wlog_destroy(&l);
    g_array_free(s.e, true);
}

static void test_spill(void)
{
    static struct mig_wlog l;
    struct seen s = {g_array_new(false, false, sizeof(struct mig_wlog_entry))};

    mig_wlog_init(&l);
    for (unsigned i = 0; i < MIG_WLOG_MAX + 10; i++) {
        mig_wlog_add(&l, (uint64_t)i * 8192 + 100000, 4096, true);
    }
    mig_wlog_add(&l, 50, 10, true); /* below every spilled write */
    mig_wlog_drain(&l, collect, &s);
    g_assert_cmpuint(s.e->len, ==, MIG_WLOG_MAX + 1);
    g_assert_cmpuint(nth(&s, MIG_WLOG_MAX).off, ==, 50);
    g_assert_cmpuint(nth(&s, MIG_WLOG_MAX).len, ==,
                     (uint64_t)(MIG_WLOG_MAX + 9) * 8192 + 100000 + 4096 - 50);
    g_assert_false(nth(&s, MIG_WLOG_MAX).exact);
    g_array_set_size(s.e, 0);
    mig_wlog_add(&l, 7, 1, true); /* the spill range is gone too */
    mig_wlog_drain(&l, collect, &s);
    g_assert_cmpuint(s.e->len, ==, 1);
    g_assert_cmpuint(nth(&s, 0).off, ==, 7);
    mig_wlog_destroy(&l);
    g_array_free(s.e, true);
}

#define WRITERS    2u
#define PER_WRITER 20000u

struct writer {
    struct mig_wlog *l;
    unsigned id;
};

/* Writer @id writes page (i * WRITERS + id) for every i: no two ranges
 * of one writer are adjacent, so none merge. */
static gpointer write_pages(gpointer arg)
{
    struct writer *w = arg;

    for (unsigned i = 0; i < PER_WRITER; i++) {
        uint64_t page = (uint64_t)i * WRITERS * 2 + w->id * 2;

        mig_wlog_add(w->l, page * 4096, 4096, true);
    }
    return NULL;
}

/* Note the pages of a range drained. */
static void mark(void *opaque, uint64_t off, uint64_t len, bool exact)
{
    GHashTable *pages = opaque;

    (void)exact;
    for (uint64_t p = off / 4096; p < (off + len + 4095) / 4096; p++) {
        g_hash_table_add(pages, GSIZE_TO_POINTER(p + 1));
    }
}

static void test_threads(void)
{
    static struct mig_wlog l;
    GHashTable *pages = g_hash_table_new(NULL, NULL);
    struct writer w[WRITERS];
    GThread *t[WRITERS];

    mig_wlog_init(&l);
    for (unsigned i = 0; i < WRITERS; i++) {
        w[i] = (struct writer){&l, i};
        t[i] = g_thread_new("writer", write_pages, &w[i]);
    }
    for (unsigned n = 0; n < 2000; n++) {
        mig_wlog_drain(&l, mark, pages);
    }
    for (unsigned i = 0; i < WRITERS; i++) {
        g_thread_join(t[i]);
    }
    mig_wlog_drain(&l, mark, pages);
    for (unsigned id = 0; id < WRITERS; id++) {
        for (unsigned i = 0; i < PER_WRITER; i++) {
            uint64_t page = (uint64_t)i * WRITERS * 2 + id * 2;

            g_assert_true(
                g_hash_table_contains(pages, GSIZE_TO_POINTER(page + 1)));
        }
    }
    mig_wlog_destroy(&l);
    g_hash_table_destroy(pages);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mig-wlog/order-and-empty", test_order_and_empty);
    g_test_add_func("/mig-wlog/merge", test_merge);
    g_test_add_func("/mig-wlog/spill", test_spill);
    g_test_add_func("/mig-wlog/threads", test_threads);
    return g_test_run();
}
